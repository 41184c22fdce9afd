"""The lockstep worker: a bounded queue and one background thread that feeds the shadow caches.

The scheduler-side hooks only copy what they need (request id, the block hashes, a few
integers) into :class:`ShadowWorker`'s queue; everything else happens on the worker thread:
interning hashes to ids, ``Simulator.admit`` / ``release`` over every (policy, capacity) cache,
the recording, the per-request prediction log and the counters.

Invariants:

* The hooks never wait: :meth:`ShadowWorker.submit` is a length check plus ``deque.append``; a
  full queue drops the request (admission *and* its release) and counts it.
* Events are processed in submission order, so the shadow sees admissions and releases in the
  order the engine's scheduler made them, however far the worker lags.
* While a request is in flight (admitted, not released) its blocks are pinned in every shadow
  cache, as the engine cannot evict them either.
* Counters are cumulative and published as an immutable snapshot after each drained batch;
  readers on other threads take the reference (no lock on the scheduler path).

This module imports no vLLM.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from shadow.connector.config import ShadowConfig
from shadow.connector.interner import BlockInterner
from shadow.connector.schema import (CACHE_FIELDS, TIER_FIELDS, WORKER_FIELDS, Snapshot,
                                     cache_key, tier_key)
from shadow.sim.live.batch import LiveBatch
from shadow.sim.tiers.model import TierSpec
from shadow.sim.tiers.loop import ChunkTier
from shadow.sim.engine.rules import blocks_held, full_blocks, max_hit_blocks

logger = logging.getLogger(__name__)

class Admit(NamedTuple):
    """A request admitted.  Queued alone, its whole prompt is computed at once; inside a
    :class:`Step`, ``end`` is where the step's allocation ends (local hit + tokens scheduled)
    and ``live_hashes`` is the request's own block-hash list, read for blocks that fill later.
    ``t_start_s`` is the admission's stamp (the connector's strictly increasing microsecond
    clock, shared with :class:`Release`'s ``t_done_s``), recorded as ``start_time_us``."""

    req_id: str
    hashes: list
    num_tokens: int
    engine_hit: int
    preempted: bool
    t_start_s: float
    live_hashes: list | None = None
    end: int | None = None


class Release(NamedTuple):
    """A request finished (or was aborted) and freed its blocks."""

    req_id: str
    decode_hashes: list             # hashes of its generated full blocks
    n_output: int
    t_done_s: float
    input_length: int
    n_anon_final: int = 0           # blocks held beyond the full ones (the partial tail)
    num_computed_tokens: int | None = None


class Preempt(NamedTuple):
    """A request preempted: its blocks freed; a later admission serves it again.  Recorded as
    a request of type ``preempted`` (``recorder.PREEMPTED_TYPE``) from its admission to
    ``t_done_s``, when it had ``num_tokens`` tokens (-1: not recorded)."""

    req_id: str
    decode_hashes: list
    n_anon_final: int = 0
    t_done_s: float = -1.0
    num_tokens: int = -1


class Reset(NamedTuple):
    """vLLM's prefix-cache reset: every shadow cache starts afresh (a barrier)."""


class Call(NamedTuple):
    """A barrier: ``fn()`` is called once everything queued before it is served."""

    fn: Callable[[], Any]


#: The policy whose live caches are vLLM's physical block pool (shadow.sim.engine.pool).
POOL_POLICY = "vllm"
#: Events served per ``Simulator.serve_live`` call (and per counter snapshot).
BATCH_MAX = 256

@dataclass(frozen=True)
class Prediction:
    """What the shadow caches predicted for one admitted request (the in-memory log)."""

    request_id: str
    num_tokens: int
    n_blocks: int
    n_match: int
    engine_hit_tokens: int
    preempted: bool
    #: cache key (``policy|capacity``) -> first-miss hit tokens (what vLLM would reuse); a cache
    #: that made no prediction for the request (stopped: it failed earlier) is not listed
    prefix_hit_tokens: dict[str, int] = field(default_factory=dict)
    #: cache key -> gap-spanning hit blocks
    hit_blocks: dict[str, int] = field(default_factory=dict)


@dataclass
class Step:
    """What one scheduler step did to the KV cache, as the connector saw it.

    vLLM's ``Scheduler.schedule`` first grows the running requests in running order
    (preempting from the back of that order when a step does not fit), then admits waiting
    requests (only in a step without preemptions).  The worker replays it in that order.

    * ``running_ids`` / ``running_computed``: the scheduled running requests in order
      (``SchedulerOutput.scheduled_cached_reqs``: ids and ``num_computed_tokens`` before the
      step; requests in ``resumed_ids`` are admissions, listed in ``admissions``);
    * ``scheduled``: request id -> tokens scheduled this step (``num_scheduled_tokens``);
    * ``preempted``: :class:`Preempt` events of the requests preempted in this step;
    * ``admissions``: :class:`Admit` events of the requests admitted this step, in admission
      order.
    """

    running_ids: Sequence[str]
    running_computed: Sequence[int]
    resumed_ids: Any
    scheduled: dict[str, int]
    preempted: list[Preempt]
    admissions: Sequence[Admit]


@dataclass(slots=True)
class _InFlight:
    """A request the worker has admitted and not yet freed."""

    adm: Any                   # its simulator Admission (None without simulator caches)
    ids: list[int]             # block ids: the admitted ones, then those grown into
    n_admitted: int            # how many of ``ids`` were admitted (the prompt's)
    num_tokens: int            # tokens at the admission (the prompt, plus the output before a
                               # preemption for a re-admission)
    t_start_s: float
    live_hashes: list | None   # the engine's own hash list, read as blocks fill
    end: int                   # tokens allocated so far


#: The events served by the simulator (everything else is a barrier).
_SIM_EVENTS = (Admit, Release, Preempt, Step)


#: The CACHE_FIELDS columns the worker counts itself (tokens), not the cache: a reset leaves
#: them alone, while the cache's own counters go on from a base.
TOKEN_COLUMNS = (CACHE_FIELDS.index("query_tokens"), CACHE_FIELDS.index("prefix_hit_tokens"))


def counter_row(r: Any, query_tokens: float, prefix_hit_tokens: float) -> tuple[float, ...]:
    """One cache's counters in CACHE_FIELDS order (``metrics.Payload``'s ``c`` rows)."""
    return (r.n_req, r.n_req_skipped, r.n_blocks, r.n_hits, r.n_prefix_hits, r.total_cost,
            r.saved_cost, r.prefix_saved_cost, query_tokens, prefix_hit_tokens, r.n_eviction,
            r.n_self_eviction)


@dataclass(slots=True)
class _TierRun:
    """One offload tier behind one shadow cache (shadow.sim.tiers.loop's compiled form of
    shadow.sim.tiers.model), driven by the cache's admissions in the engine's order with each
    admission's first-miss hit.  ``chunk_bytes`` is 0 when the bytes of a block are unknown
    (the byte counters then stay 0)."""

    cache: int                 # index into the configuration's caches
    spec: TierSpec
    tier: ChunkTier
    chunk_bytes: int
    hit_tokens: int = 0
    loaded_chunks: int = 0
    stored_chunks: int = 0

    def serve(self, ids: Sequence[int], num_tokens: int, hit_blocks: int,
              block_size: int) -> None:
        hit, loaded, stored = self.tier.serve(ids, num_tokens, hit_blocks, block_size,
                                              self.spec.blocks_per_chunk)
        self.hit_tokens += hit
        self.loaded_chunks += loaded
        self.stored_chunks += stored

    def row(self) -> tuple[float, ...]:
        """The TIER_FIELDS counters."""
        cb = self.chunk_bytes
        t = self.tier
        return (self.hit_tokens, self.loaded_chunks * cb, self.stored_chunks * cb,
                t.n_evicted, t.n_store_failed)

    def occupancy(self) -> int:
        return len(self.tier) * self.chunk_bytes

    def capacity(self) -> int:
        return self.tier.n_chunks * self.chunk_bytes


class _Caches:
    """Every shadow cache of one configuration, in configuration order (``keys``).

    ``vllm`` caches are :class:`shadow.sim.engine.pool.VllmBlockPool` objects (vLLM's physical
    pool, duplicates included, driven step by step); every other policy runs in one
    :class:`shadow.sim.Simulator` through its live API.  ``runs[i]`` has the counter attributes
    of either kind.  ``engine_pool`` is the pool at the engine's own capacity that places each
    step's preemptions (one is kept, unreported, when the configuration has none).
    """

    def __init__(self, cfg: ShadowConfig) -> None:
        from shadow.sim import CacheSpec, Simulator
        from shadow.sim.engine.pool import VllmBlockPool

        self.cfg = cfg
        cost = cfg.run.cost.cost
        self.runs: list[Any] = [None] * len(cfg.caches)
        self.pools: list[tuple[int, VllmBlockPool]] = []
        self.loop_idx: list[int] = []
        specs = []
        for i, (p, c) in enumerate(cfg.caches):
            if p.name == POOL_POLICY and not p.params:
                pool = VllmBlockPool(c, cfg.block_size, cost)
                self.runs[i] = pool
                self.pools.append((i, pool))
            else:
                self.loop_idx.append(i)
                specs.append(CacheSpec(p.name, c, p.params))
        self.sim = None
        if specs:
            self.sim = Simulator(specs, cost_model=cfg.run.cost, pin=cfg.pin, verify=False,
                                 category=cfg.category,
                                 trace_name=f"live engine {cfg.engine_id} dp{cfg.dp_rank}")
            for i, run in zip(self.loop_idx, self.sim.runs):
                self.runs[i] = run
        engine = [pool for _i, pool in self.pools if pool.capacity == cfg.engine_blocks]
        self.engine_pool = engine[0] if engine else VllmBlockPool(cfg.engine_blocks,
                                                                  cfg.block_size)
        #: (cache index, pool) of every pool that follows the events: the reported ones, and
        #: the engine-capacity pool as -1 when it is kept unreported
        self.all_pools = list(self.pools) if engine else [*self.pools, (-1, self.engine_pool)]
        #: the offload tiers, caches in configuration order, tiers inside (``tier_keys`` order)
        self.tiers: list[_TierRun] = []
        for i in cfg.tier_targets:
            for t, nc in zip(cfg.tiers, cfg.tier_chunks):
                self.tiers.append(_TierRun(i, t, ChunkTier(nc, t.policy, t.store_threshold,
                                                           t.max_tracker_size),
                                           t.blocks_per_chunk * (cfg.bytes_per_block or 0)))
        #: cache index -> its tiers
        self.tiers_of: dict[int, list[_TierRun]] = {}
        for tr in self.tiers:
            self.tiers_of.setdefault(tr.cache, []).append(tr)

    def counters(self) -> list[tuple[float, ...]]:
        """Per cache, its counters in the Snapshot's column order (token columns 0)."""
        return [counter_row(r, 0.0, 0.0) for r in self.runs]

    def counted(self) -> list[int]:
        """Per simulator cache, the admissions it has counted (served or skipped)."""
        return [self.runs[i].n_req + self.runs[i].n_req_skipped for i in self.loop_idx]

    def holds(self, block_id: int) -> bool:
        """Whether any shadow cache holds ``block_id`` (the interner keeps such ids)."""
        return (any(r.holds(block_id) for r in self.runs)
                or self.engine_pool.holds(block_id)
                or any(tr.tier.holds(block_id) for tr in self.tiers))


def lower_thread_priority(increment: int) -> None:
    """Raise the calling thread's nice value by ``increment`` (Linux: nice is per thread).

    NOTE: the shadow must never slow the engine down.  On a host whose cores the engine keeps
    busy (CPU inference, or a busy API server), a nice worker thread gets what the engine leaves
    over; when it falls behind, the bounded queue drops work and counts it (visible in
    ``shadow_dropped_requests_total``) instead of taking CPU from the engine.  Raising nice needs
    no privilege; where it is not possible the worker simply runs at normal priority.
    NOTE: off by default (``worker_nice`` 0): the worker shares the GIL with the engine's thread,
    and a nicer worker descheduled while it holds the GIL stalls the engine (priority inversion:
    docs/performance.md, "Engine A/B").
    """
    if increment <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + increment, 19))
    except OSError as exc:
        logger.info("shadow worker: cannot lower its priority (%s); running at normal priority", exc)


class ShadowWorker:
    """Owns the queue, the thread, the simulator, the interner, the recorder and the counters."""

    def __init__(self, cfg: ShadowConfig, *, recorder: Any = None,
                 start: bool = True) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.maxsize = cfg.queue_size
        self.batch_max = BATCH_MAX
        self.queue: deque = deque()
        self._wake = threading.Event()
        self._stop = False
        self._sim = _Caches(cfg)
        self.keys = tuple(cache_key(p.label, c) for p, c in cfg.caches)
        self.tier_keys = tuple(tier_key(self.keys[tr.cache], tr.spec.label)
                               for tr in self._sim.tiers)
        self._tier_base = [[0.0] * len(TIER_FIELDS) for _ in self.tier_keys]
        self.interner = BlockInterner(cfg.id_horizon_s, is_held=self._holds)
        self.recorder = recorder
        self.inflight: dict[str, _InFlight] = {}
        self.predictions: deque[Prediction] = deque(maxlen=max(cfg.prediction_log_size, 0) or 1)
        self._log_predictions = cfg.prediction_log_size > 0
        # per-cache token counters the simulator does not keep (tokens, not blocks)
        self._tok = [[0.0, 0.0] for _ in self.keys]
        self._base = [[0.0] * len(CACHE_FIELDS) for _ in self.keys]  # carried over a reset
        self._has_base = False
        self._worker = [0.0] * len(WORKER_FIELDS)
        self._logged: set[str] = set()
        self.snapshot = self._make_snapshot()
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # -- scheduler thread ------------------------------------------------------------------
    def submit(self, event: Admit) -> bool:
        """Queue ``event``; False (and nothing queued) when the queue is full.  Never blocks."""
        q = self.queue
        if len(q) >= self.maxsize:
            return False
        q.append(event)
        if not self._wake.is_set():
            self._wake.set()
        return True

    def submit_control(self, event: Any) -> None:
        """Queue a control event regardless of the bound (resets, flush barriers)."""
        self.queue.append(event)
        self._wake.set()

    def submit_quiet(self, event: Step) -> None:
        """Queue an event regardless of the bound without waking an idle worker.

        NOTE: for steps that only grow running requests (most decode steps): waking the worker
        every step makes it take the GIL in the middle of the engine's next step (a cost per
        request in the engine A/B: docs/performance.md, "Hook cost"); it serves them in order
        with the next admission or
        release, or within its 0.5 s idle wait.
        """
        self.queue.append(event)

    # -- readers (any thread) -----------------------------------------------------------------
    def cache_state(self, key: str) -> Any:
        """The live object behind cache ``key`` (a ``VllmBlockPool`` for a ``vllm`` cache, the
        simulator's ``CacheRun`` otherwise), for reading its state in process after
        :meth:`flush`; KeyError for an unknown key."""
        try:
            i = self.keys.index(key)
        except ValueError:
            raise KeyError(key) from None
        return self._sim.runs[i]

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="shadow-worker", daemon=True)
            self._thread.start()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every event queued before this call is processed; False on timeout."""
        if self._thread is None or not self._thread.is_alive():
            self._drain()
            return True
        done = threading.Event()
        self.submit_control(Call(done.set))
        return done.wait(timeout_s)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Process what is queued, stop the thread, close the recording (idempotent)."""
        self.flush(timeout_s)
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self.recorder is not None:
            try:
                self.recorder.close()
            except Exception as exc:  # noqa: BLE001 - shutdown must not raise into vLLM
                self._error("recorder.close", exc)
        self.snapshot = self._make_snapshot()

    # -- worker thread ---------------------------------------------------------------------
    def _run(self) -> None:
        lower_thread_priority(self.cfg.worker_nice)
        wake, q = self._wake, self.queue
        while not self._stop:
            if not q:
                if self.recorder is not None:
                    self._safe(self.recorder.idle)
                wake.clear()
                if not q:  # NOTE: re-check after clear, or a submit between the two is lost
                    wake.wait(0.5)
                    self._safe(self.interner.maybe_rotate)
                continue
            self._drain()
        self._drain()

    def _drain(self) -> None:
        """Process every queued event, in order, a batch of admissions and releases at a time."""
        q = self.queue
        while q:
            batch = []
            while q and len(batch) < self.batch_max:
                ev = q.popleft()
                if type(ev) in _SIM_EVENTS:
                    batch.append(ev)
                    continue
                # NOTE: a control event is a barrier: what was queued before it is served first
                self._serve(batch)
                batch = []
                try:
                    if type(ev) is Reset:
                        self._reset()
                    elif type(ev) is Call:
                        self.snapshot = self._make_snapshot()
                        ev.fn()
                except Exception as exc:  # noqa: BLE001 - one bad event must not stop the shadow
                    self._error(f"event {type(ev).__name__}", exc)
            self._serve(batch)
            if q:  # NOTE: more to come: publish progress between batches
                self.snapshot = self._make_snapshot()
        self.interner.maybe_rotate()
        self.snapshot = self._make_snapshot()

    def _serve(self, events: list) -> None:
        """Admissions, releases, preemptions and steps of ``events``, in order.

        NOTE: the pools (``vllm`` caches) follow each event at once; the simulator's caches get
        one ``serve_live`` for the whole batch.  Interning, the in-flight table and the live
        batch follow the events' order, so every cache sees exactly the sequence a
        request-at-a-time loop would; what needs the simulator's answers (predictions, token
        counters, the recording) is done after serving.
        """
        if not events:
            return
        lb = LiveBatch()
        admitted: list[tuple] = []
        finished: list[tuple] = []
        for ev in events:
            try:
                kind = type(ev)
                if kind is Step:
                    self._step(lb, admitted, finished, ev)
                elif kind is Admit:
                    self._admit(lb, admitted, *ev)
                elif kind is Release:
                    self._release(lb, finished, *ev)
                else:
                    self._preempt(lb, *ev, finished=finished)
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the shadow
                self._error(f"event {type(ev).__name__}", exc)
        caches = self._sim
        counted0 = caches.counted()
        if caches.sim is not None and len(lb):
            try:
                caches.sim.serve_live(lb)
            except Exception as exc:  # noqa: BLE001
                self._error("serve_live", exc)
                return
        b = self.block_size
        keys = self.keys
        tok = self._tok
        loop_idx = caches.loop_idx
        # NOTE: a simulator cache counts the batch's admissions in order until it stops (then
        # none); its token counters follow its block counters, so they freeze with them.
        left = [a - c for a, c in zip(caches.counted(), counted0)]
        tiers_of = caches.tiers_of
        for (req_id, adm, n_ids, n_match, num_tokens, engine_hit, preempted,
             pool_hits, ids) in admitted:
            pref = adm.prefix_hits if adm is not None else ()
            hits = adm.hits if adm is not None else ()
            counted: list[tuple[int, int, int]] = []   # (cache index, prefix hits, hits)
            served = adm.served if tiers_of and adm is not None else ()
            for j, i in enumerate(loop_idx):
                if left[j] > 0:
                    left[j] -= 1
                    counted.append((i, pref[j], hits[j]))
                    if i in tiers_of and served[j]:
                        self._serve_tiers(tiers_of[i], ids, num_tokens, pref[j])
            for i, res in pool_hits:
                counted.append((i, res[2], res[1]) if res is not None else (i, 0, 0))
                if res is not None and i in tiers_of:
                    self._serve_tiers(tiers_of[i], ids, num_tokens, res[2])
            if not preempted:
                # NOTE: like vLLM's prefix-cache stats, re-admissions after a preemption are
                # left out of the token counters (the engine's side excludes them too).
                for i, ph, _h in counted:
                    tk = tok[i]
                    tk[0] += num_tokens
                    tk[1] += ph * b
            if self._log_predictions:
                # NOTE: only the caches that counted this admission predict for it: a stopped
                # cache's 0 would read as "no hit" where it made no prediction at all.
                counted.sort()
                self.predictions.append(Prediction(
                    req_id, num_tokens, n_ids, n_match, engine_hit, preempted,
                    {keys[i]: ph * b for i, ph, _h in counted},
                    {keys[i]: h for i, _ph, h in counted}))
        rec = self.recorder
        for args in finished:
            if rec is not None and rec.enabled:
                try:
                    rec.write(*args)
                except Exception as exc:  # noqa: BLE001
                    self._error("recorder.write", exc)

    def _serve_tiers(self, tiers: list[_TierRun], ids: Sequence[int], num_tokens: int,
                     hit_blocks: int) -> None:
        """One admission through the tiers behind a cache that served it with a first-miss
        hit of ``hit_blocks`` (lookup, load, store and finish at once: shadow.sim.tiers.model).

        NOTE: every admission, re-admissions after a preemption included, with the tokens it
        was admitted with: the recording keeps each as a record of its own, so offline
        ``simulate --timing recorded --tier`` serves the same sequence (start-time order)."""
        for tr in tiers:
            try:
                tr.serve(ids, num_tokens, hit_blocks, self.block_size)
            except Exception as exc:  # noqa: BLE001 - a tier must not stop the shadow
                self._error("tier", exc)

    def _step(self, lb: LiveBatch, admitted: list, finished: list, st: Step) -> None:
        """One scheduler step, replayed in vLLM's order (see :class:`Step`).

        NOTE: vLLM frees a preempted request's blocks in the middle of growing the running
        requests, at the first one whose growth does not fit.  The connector learns only which
        requests were preempted, so the engine-capacity pool decides where: before growing a
        request it frees the next preempted one (FCFS: from the back of the running order)
        while the growth does not fit; what is left is freed after the running requests.
        """
        inflight = self.inflight
        pre = st.preempted
        if len(pre) > 1:
            order = {rid: k for k, rid in enumerate(inflight)}
            pre = sorted(pre, key=lambda p: order.get(p.req_id, -1), reverse=True)
        else:
            pre = list(pre)
        engine = self._sim.engine_pool
        sched = st.scheduled
        resumed = st.resumed_ids
        for rid, computed in zip(st.running_ids, st.running_computed):
            if resumed and rid in resumed:
                continue
            end = computed + sched.get(rid, 0)
            if pre:
                need = engine.blocks_needed(rid, end)
                while pre and need > engine.num_free:
                    self._preempt(lb, *pre.pop(0), finished=finished)
            self._grow(rid, end)
        for p in pre:
            self._preempt(lb, *p, finished=finished)
        for adm in st.admissions:
            self._admit(lb, admitted, *adm)

    def _grow(self, req_id: str, end: int) -> None:
        """A running request scheduled up to ``end`` tokens: the pools allocate and cache."""
        st = self.inflight.get(req_id)
        if st is None or end <= st.end:
            return
        ids = st.ids
        n_full = full_blocks(end, self.block_size)
        if n_full > len(ids) and st.live_hashes is not None:
            ids.extend(self.interner.intern(st.live_hashes[len(ids):n_full]))
        st.end = end
        for _i, pool in self._sim.all_pools:
            pool.grow(req_id, end)

    def _admit(self, lb: LiveBatch, admitted: list, req_id: str, hashes: list, num_tokens: int,
               engine_hit: int, preempted: bool, t_start_s: float,
               live_hashes: list | None = None, end: int | None = None) -> None:
        old = self.inflight.pop(req_id, None)
        if old is not None:  # a re-admission whose preemption we did not see: release first
            if old.adm is not None:
                lb.release(old.adm, [], 0)
            for _i, pool in self._sim.all_pools:
                pool.free(req_id)
        ids = self.interner.intern(hashes)
        b = self.block_size
        n_match = len(ids)
        if self.cfg.match == "vllm":
            # NOTE: vLLM always recomputes the last prompt token and stops at the first miss, so
            # a hit is at most floor((N-1)/B) blocks (kv_cache_manager.get_computed_blocks).
            n_match = min(n_match, max_hit_blocks(num_tokens, b))
        adm = None
        if self._sim.sim is not None:
            # the partial tail block: held, never reusable
            n_anon = blocks_held(num_tokens, b) - full_blocks(num_tokens, b)
            adm = lb.admit(ids, n_match=n_match, n_anonymous=n_anon, timestamp_s=t_start_s)
        # NOTE: without a step the whole prompt is computed at admission (an Admit event queued alone)
        end_tok = num_tokens if end is None else end
        pool_ids = list(ids)
        pool_hits = []
        for i, pool in self._sim.all_pools:
            res = pool.admit(req_id, pool_ids, num_tokens, end_tok, count=not preempted)
            if i >= 0:
                pool_hits.append((i, res))
        self.inflight[req_id] = _InFlight(adm, pool_ids, len(ids), num_tokens, t_start_s,
                                          live_hashes,
                                          end_tok)
        admitted.append((req_id, adm, len(ids), n_match, num_tokens, engine_hit, preempted,
                         pool_hits, ids))

    def _release(self, lb: LiveBatch, finished: list, req_id: str, decode_hashes: list,
                 n_output: int, t_done_s: float, input_length: int, n_anon_final: int = 0,
                 num_computed_tokens: int | None = None) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return  # never admitted (aborted while waiting), preempted, or reset meanwhile
        pool_ids = st.ids
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        if st.adm is not None:
            lb.release(st.adm, dec, n_anon_final)
        b = self.block_size
        full = pool_ids[:st.n_admitted] + dec
        if len(pool_ids) < len(full):
            pool_ids.extend(full[len(pool_ids):])
        # NOTE: the request ends holding ceil(num_computed_tokens / B) blocks, its full ones
        # cached; a pool that followed its steps has them already (growing is idempotent)
        if num_computed_tokens is None:
            end = len(full) * b + (1 if n_anon_final else 0)
        else:
            end = num_computed_tokens
        grow = end > st.end
        for _i, pool in self._sim.all_pools:
            if grow:
                pool.grow(req_id, end)
            pool.free(req_id)
        if self.recorder is not None:
            # NOTE: a re-admission after a preemption admitted the prompt and the output so far:
            # recorded as such (input_length = its tokens then), as --timing recorded replays it
            extra = st.num_tokens - input_length if st.num_tokens > input_length else 0
            finished.append((st.t_start_s, t_done_s, input_length + extra, n_output - extra,
                             full))

    def _preempt(self, lb: LiveBatch, req_id: str, decode_hashes: list,
                 n_anon_final: int = 0, t_done_s: float = -1.0, num_tokens: int = -1,
                 finished: list | None = None) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        if st.adm is not None:
            lb.release(st.adm, dec, n_anon_final)
        for _i, pool in self._sim.all_pools:
            pool.free(req_id)
        if self.recorder is not None and finished is not None and t_done_s >= 0:
            # NOTE: the admission up to the preemption is a request of its own in the recording
            # (type recorder.PREEMPTED_TYPE): it held and inserted blocks like any other; it
            # computed all its tokens but the last sampled one, as a finished request does
            finished.append((st.t_start_s, t_done_s, st.num_tokens,
                             max(num_tokens - st.num_tokens, 0),
                             st.ids[:st.n_admitted] + dec, 1))

    def _reset(self) -> None:
        """Empty every shadow cache (vLLM's reset_prefix_cache with reset_external)."""
        cur = self._sim.counters()
        for i, row in enumerate(cur):
            for j, v in enumerate(row):
                self._base[i][j] += v
        for base, tr in zip(self._tier_base, self._sim.tiers):
            for j, v in enumerate(tr.row()):
                base[j] += v
        self._has_base = True
        old = self._sim
        self._sim = _Caches(self.cfg)
        # NOTE: both sets of pools come from the same configuration: the same pools in order
        for (_i, new), (_j, prev) in zip(self._sim.all_pools, old.all_pools):
            new.keep_free_order(prev)
        self.inflight.clear()

    def _holds(self, block_id: int) -> bool:
        return self._sim.holds(block_id)

    # -- counters ----------------------------------------------------------------------------
    def _make_snapshot(self) -> Snapshot:
        # NOTE: runs after every drained batch, so it reads the caches' counters directly (no
        # intermediate lists) and adds the pre-reset base only once a reset has happened.
        rows = []
        stopped = []
        tok = self._tok
        base = self._base if self._has_base else None
        for i, r in enumerate(self._sim.runs):
            tk = tok[i]
            row = counter_row(r, tk[0], tk[1])
            if base is not None:
                b = base[i]
                row = tuple(v + b[j] if j not in TOKEN_COLUMNS else v for j, v in enumerate(row))
            rows.append(row)
            stopped.append(1 if r.failed else 0)
        rec = self.recorder
        if rec is not None:
            self._worker[0], self._worker[1] = rec.n_recorded, rec.bytes_total
        enabled = int(rec is not None and rec.enabled)
        tiers = self._sim.tiers
        if not tiers:
            return Snapshot(self.keys, tuple(rows), tuple(self._worker), enabled, tuple(stopped))
        trows = tuple(tr.row() for tr in tiers)
        if base is not None:
            trows = tuple(tuple(v + b for v, b in zip(r, tb))
                          for r, tb in zip(trows, self._tier_base))
        prev = getattr(self, "snapshot", None)
        cap = tuple(tr.capacity() for tr in tiers)
        if prev is not None and prev.tier_capacity == cap:
            cap = prev.tier_capacity   # NOTE: the same object: the stats path compares it cheaply
        return Snapshot(self.keys, tuple(rows), tuple(self._worker), enabled, tuple(stopped),
                        self.tier_keys, trows, tuple(tr.occupancy() for tr in tiers), cap)

    def _safe(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            self._error(getattr(fn, "__qualname__", "worker"), exc)

    def _error(self, where: str, exc: BaseException) -> None:
        self._worker[2] += 1
        if where not in self._logged:
            self._logged.add(where)
            logger.error("shadow worker: %s failed (counted in shadow_errors_total; logged "
                         "once): %r", where, exc, exc_info=exc)
