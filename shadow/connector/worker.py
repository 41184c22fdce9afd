"""The lockstep worker: a bounded queue and one background thread that feeds the shadow caches.

The scheduler-side hooks only copy what they need (request id, the block hashes, a few
integers) into :class:`ShadowWorker`'s queue; everything else happens on the worker thread:
interning hashes to ids, each event handed to every live cache kind through one interface
(:mod:`shadow.sim.lockstep.caches`: vLLM's pools, the simulator's caches, tiers behind them),
the recording, the per-request prediction log and the counters (their schema:
:mod:`shadow.connector.schema`).

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
from dataclasses import dataclass
from typing import Any, NamedTuple

from shadow.connector.blockkey import BlockKeys
from shadow.connector.config import ShadowConfig
from shadow.connector.interner import BlockInterner
from shadow.connector.schema import (PARTS, PREFILL, RECORDING_BYTES, RECORDING_FREE,
                                     RECORDING_LIMIT, WORKER_FIELDS, Snapshot, part_keys)
from shadow.sim.core.prefill import admission_seconds
from shadow.sim.lockstep.caches import (LiveCache, LiveRequest, PoolCaches, SimCaches,
                                        TieredCaches, TierSpecRow)
from shadow.sim.engine.rules import full_blocks, max_hit_blocks

#: The worker row's columns the worker and its recorder count in (WORKER_FIELDS order).
_W_RECORDED, _W_BYTES, _W_ERRORS, _W_DELETED = (
    WORKER_FIELDS.index(f) for f in ("recorded_requests", "recorded_bytes", "errors",
                                     "recording_segments_deleted"))
logger = logging.getLogger(__name__)

class Admit(NamedTuple):
    """A request admitted.  Queued alone, its whole prompt is computed at once; inside a
    :class:`Step`, ``end`` is where the step's allocation ends (local hit + tokens scheduled)
    and ``live_hashes`` is the request's own block-hash list, read for blocks that fill later.
    ``t_start_s`` is the admission's stamp (the connector's strictly increasing microsecond
    clock, shared with :class:`Release`'s ``t_done_s``), recorded as ``start_time_us``;
    ``arrival_s`` the request's arrival (vLLM's ``arrival_time``, wall clock; -1 unknown),
    recorded as ``arrival_time_us``; ``request`` the engine's request object, whose tokens the
    recording's block keys are computed from (read on the worker thread; None: none)."""

    req_id: str
    hashes: list
    num_tokens: int
    engine_hit: int
    preempted: bool
    t_start_s: float
    live_hashes: list | None = None
    end: int | None = None
    request: Any = None
    arrival_s: float = -1.0


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
#: Events per drained batch: one flush of every cache kind (and one counter snapshot).
BATCH_MAX = 256

class Prediction(NamedTuple):
    """What the shadow caches predicted for one admitted request (the in-memory log).

    NOTE: a NamedTuple: one is made per admission on the worker thread, and a frozen dataclass
    costs about 4x as much to build (its ``__init__`` sets each field through
    ``object.__setattr__``)."""

    request_id: str
    num_tokens: int
    n_blocks: int
    n_match: int
    engine_hit_tokens: int
    preempted: bool
    #: cache key (``policy|capacity``) -> first-miss hit tokens (what vLLM would reuse); a cache
    #: that made no prediction for the request (stopped: it failed earlier) is not listed
    prefix_hit_tokens: dict[str, int]
    #: cache key -> gap-spanning hit blocks
    hit_blocks: dict[str, int]
    #: with a profile cost model: cache key -> the request's prefill seconds with that cache's
    #: first-miss hit, ``"engine"`` -> with the engine's own; None without a profile
    prefill_s: dict[str, float] | None = None
    #: with a profile cost model: the request's prefill seconds with no hit (None without)
    prefill_s_no_hit: float | None = None


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


class _InFlight(LiveRequest):
    """A request the worker has admitted and not yet freed: what every cache sees
    (:class:`shadow.sim.lockstep.caches.LiveRequest`), and the engine's own hash list, read as
    blocks fill (``num_tokens``: the prompt, plus the output before a preemption for a
    re-admission); the engine's request (its tokens give the recording's block keys) and its
    arrival."""

    __slots__ = ("live_hashes", "request", "arrival_s")


#: Where the engine's own prefill seconds start in the WORKER_FIELDS row (then the saved ones).
_ENGINE_PREFILL = WORKER_FIELDS.index("engine_prefill_seconds")

#: The events served by the caches (everything else is a barrier).
_CACHE_EVENTS = (Admit, Release, Preempt, Step)


def build_caches(cfg: ShadowConfig,
                 on_error: Callable[[str, BaseException], None]) -> tuple[list[LiveCache],
                                                                           PoolCaches]:
    """The live caches of ``cfg``, one object per kind (shadow.sim.lockstep.caches), and the
    ``vllm`` pools among them, whose engine-capacity pool places each step's preemptions.

    ``vllm`` caches are vLLM's physical pool, duplicates included, driven step by step; every
    other policy runs in one Simulator through its live API; the tiers go behind the caches
    ``cfg.tier_targets`` names (tier rows: caches in configuration order, tiers inside); the
    sampled miss-ratio curve (``cfg.mrc``) follows the same events."""
    from shadow.sim import CacheSpec

    cost = cfg.run.cost
    pool_rows, pool_caps, sim_rows, specs = [], [], [], []
    for i, (p, c) in enumerate(cfg.caches):
        if p.name == POOL_POLICY and not p.params:
            pool_rows.append(i)
            pool_caps.append(c)
        else:
            sim_rows.append(i)
            specs.append(CacheSpec(p.name, c, p.params))
    pools = PoolCaches(pool_rows, pool_caps, cfg.block_size, cost.cost, cfg.engine_blocks)
    kinds: list[LiveCache] = [pools]
    if specs:
        kinds.append(SimCaches(sim_rows, specs, cfg.block_size, cost_model=cost, pin=cfg.pin,
                               category=cfg.category,
                               trace_name=f"live engine {cfg.engine_id} dp{cfg.dp_rank}"))
    tiers: list[TierSpecRow] = []
    for i in cfg.tier_targets:
        for t, nc in zip(cfg.tiers, cfg.tier_chunks):
            tiers.append(TierSpecRow(len(tiers), i, nc, t.policy, t.store_threshold,
                                     t.max_tracker_size, t.blocks_per_chunk,
                                     t.blocks_per_chunk * (cfg.bytes_per_block or 0)))
    for k, kind in enumerate(kinds):
        mine = [t for t in tiers if t.cache in kind.rows]
        if mine:
            kinds[k] = TieredCaches(kind, mine, cfg.block_size, on_error)
    if cfg.mrc is not None:
        from shadow.sim.lockstep.curve import LiveCurve

        kinds.append(LiveCurve(cfg.engine_blocks, max_ids=cfg.mrc.max_ids, rate=cfg.mrc.rate))
    return kinds, pools


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
    """Owns the queue, the thread, the live caches, the interner, the recorder and the counters.

    The caches are a list of :class:`shadow.sim.lockstep.caches.LiveCache` kinds: every event goes
    to each through the same calls, and after each drained batch each is flushed; nothing here
    depends on which kinds there are."""

    def __init__(self, cfg: ShadowConfig, *, recorder: Any = None, start: bool = True,
                 extra_keys: Callable[[Any, int, int], Any] | None = None) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.maxsize = cfg.queue_size
        self.batch_max = BATCH_MAX
        self.queue: deque = deque()
        self._wake = threading.Event()
        self._stop = False
        self._logged: set[str] = set()
        self.caches, self._pools = build_caches(cfg, self._error)
        #: Snapshot keys field -> the keys of the parts keyed by it (schema.PARTS)
        self.part_keys = part_keys(cfg)
        self.keys = self.part_keys["cache_keys"]
        self.tier_keys = self.part_keys["tier_keys"]
        self.interner = BlockInterner(cfg.id_horizon_s, is_held=self._holds)
        self.recorder = recorder
        #: the recording's block keys (``extra_keys``: vLLM's extra keys of a block's tokens)
        self.block_keys = BlockKeys(cfg.fleet_key or b"\0" * 32, cfg.block_size, extra_keys)
        self.inflight: dict[str, _InFlight] = {}
        self.predictions: deque[Prediction] = deque(maxlen=max(cfg.prediction_log_size, 0) or 1)
        self._log_predictions = cfg.prediction_log_size > 0
        self._match_vllm = cfg.match == "vllm"
        #: with a profile cost model, per cache its PREFILL_FIELDS counters (the worker's own,
        #: from the caches' hits; they go on over a reset, as the token counters do)
        self._profile = cfg.run.cost.profile
        self._pre = [[0.0, 0.0] for _ in self.part_keys[PREFILL.keys]]
        self._worker = [0.0] * len(WORKER_FIELDS)
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
        for c in self.caches:
            if i in c.rows:
                return c.cache(i)
        raise KeyError(key)

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
                if type(ev) in _CACHE_EVENTS:
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
        """Admissions, releases, preemptions and steps of ``events``, in order, then a flush.

        NOTE: every event goes to every cache kind at once, in order; a kind may queue it (the
        simulator's caches serve the whole batch at its flush, one call per cache).  Interning
        and the in-flight table follow the events' order, so every cache sees exactly the
        sequence a request-at-a-time loop would; what needs the caches' answers (predictions)
        and the recording are done after the flush.
        """
        if not events:
            return
        admitted: list[tuple[_InFlight, int]] = []
        finished: list[tuple] = []
        for ev in events:
            try:
                kind = type(ev)
                if kind is Step:
                    self._step(admitted, finished, ev)
                elif kind is Admit:
                    self._admit(admitted, *ev)
                elif kind is Release:
                    self._release(finished, *ev)
                else:
                    self._preempt(*ev, finished=finished)
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the shadow
                self._error(f"event {type(ev).__name__}", exc)
        served = []
        for c in self.caches:
            try:
                served.append(c.flush())
            except Exception as exc:  # noqa: BLE001 - the other kinds go on
                self._error(f"{type(c).__name__}.flush", exc)
        if admitted and (self._log_predictions or self._profile is not None):
            try:
                self._predict(admitted, served)
            except Exception as exc:  # noqa: BLE001 - the recording goes on
                self._error("predict", exc)
        rec = self.recorder
        keys = self.block_keys
        memo = self.interner.keys
        for t0, t1, n_in, n_out, ids, type_id, request, arrival_s in finished:
            if rec is not None and rec.enabled:
                try:
                    rec.write(t0, t1, n_in, n_out, ids, type_id, arrival_s=arrival_s,
                              block_keys=keys.of_request(request, ids, memo))
                except Exception as exc:  # noqa: BLE001
                    self._error("recorder.write", exc)

    def _predict(self, admitted: list[tuple[_InFlight, int]], served: list[list]) -> None:
        """One :class:`Prediction` per admission, from every kind's hits; with a profile cost
        model, each admission's prefill seconds per cache and with the engine's hit, added to
        the prefill counters (re-admissions after a preemption left out, as of the token
        counters).

        NOTE: only the caches that counted an admission predict for it: a stopped cache's 0
        would read as "no hit" where it made no prediction at all."""
        n = len(admitted)
        if served and all(len(res) == n for res in served):
            # NOTE: every kind served every admission (nearly always): merged by position
            per = [hl for _req, hl in served[0]]
            for res in served[1:]:
                per = [p + hl for p, (_req, hl) in zip(per, res)]
        else:   # NOTE: a kind failed on some event: merged by request
            hits: dict[_InFlight, list] = {}
            for res in served:
                for req, hl in res:
                    hits.setdefault(req, []).extend(hl)
            per = [hits.get(req, []) for req, _e in admitted]
        b, keys = self.block_size, self.keys
        for counted in per:
            counted.sort()
        secs = None
        if self._profile is not None:
            secs = admission_seconds(self._profile, [req.num_tokens for req, _e in admitted],
                                     [e for _req, e in admitted],
                                     [[ph for _i, ph, _h, _s in c] for c in per], self.block_size)
            pre, worker = self._pre, self._worker
            for (req, _e), counted, (t0, t_engine, t_caches) in zip(admitted, per, secs):
                if not req.count:
                    continue
                for (i, _ph, _h, _s), t in zip(counted, t_caches):
                    row = pre[i]
                    row[0] += t
                    row[1] += t0 - t
                worker[_ENGINE_PREFILL] += t_engine
                worker[_ENGINE_PREFILL + 1] += t0 - t_engine
        if not self._log_predictions:
            return
        for k, ((req, engine_hit), counted) in enumerate(zip(admitted, per)):
            extra = () if secs is None else (
                {**{keys[i]: t for (i, _ph, _h, _s), t in zip(counted, secs[k][2])},
                 "engine": secs[k][1]}, secs[k][0])
            self.predictions.append(Prediction(
                req.req_id, req.num_tokens, len(req.prompt), req.n_match, engine_hit,
                not req.count, {keys[i]: ph * b for i, ph, _h, _s in counted},
                {keys[i]: h for i, _ph, h, _s in counted}, *extra))

    def _step(self, admitted: list, finished: list, st: Step) -> None:
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
        engine = self._pools.engine
        sched = st.scheduled
        resumed = st.resumed_ids
        for rid, computed in zip(st.running_ids, st.running_computed):
            if resumed and rid in resumed:
                continue
            end = computed + sched.get(rid, 0)
            if pre:
                need = engine.blocks_needed(rid, end)
                while pre and need > engine.num_free:
                    self._preempt(*pre.pop(0), finished=finished)
            self._grow(rid, end)
        for p in pre:
            self._preempt(*p, finished=finished)
        for adm in st.admissions:
            self._admit(admitted, *adm)

    def _grow(self, req_id: str, end: int) -> None:
        """A running request scheduled up to ``end`` tokens (the pools allocate and cache)."""
        st = self.inflight.get(req_id)
        if st is None or end <= st.end:
            return
        ids = st.ids
        n_full = full_blocks(end, self.block_size)
        if n_full > len(ids) and st.live_hashes is not None:
            ids.extend(self.interner.intern(st.live_hashes[len(ids):n_full]))
        for c in self.caches:
            c.grow(st, end)
        st.end = end

    def _admit(self, admitted: list, req_id: str, hashes: list, num_tokens: int,
               engine_hit: int, preempted: bool, t_start_s: float,
               live_hashes: list | None = None, end: int | None = None, request: Any = None,
               arrival_s: float = -1.0) -> None:
        caches = self.caches
        old = self.inflight.pop(req_id, None)
        if old is not None:  # a re-admission whose preemption we did not see: freed first
            for c in caches:
                c.preempt(old, [], 0)
        ids = self.interner.intern(hashes)
        n_match = len(ids)
        if self._match_vllm:
            # NOTE: vLLM always recomputes the last prompt token and stops at the first miss, so
            # a hit is at most floor((N-1)/B) blocks (kv_cache_manager.get_computed_blocks).
            n_match = min(n_match, max_hit_blocks(num_tokens, self.block_size))
        # NOTE: without a step the whole prompt is computed at admission (an Admit event queued alone)
        req = _InFlight(req_id, ids, num_tokens, n_match, not preempted, t_start_s,
                        num_tokens if end is None else end)
        req.live_hashes = live_hashes
        req.request = request
        req.arrival_s = arrival_s
        for c in caches:
            c.admit(req)
        self.inflight[req_id] = req
        admitted.append((req, engine_hit))

    def _release(self, finished: list, req_id: str, decode_hashes: list, n_output: int,
                 t_done_s: float, input_length: int, n_anon_final: int = 0,
                 num_computed_tokens: int | None = None) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return  # never admitted (aborted while waiting), preempted, or reset meanwhile
        ids = st.ids
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        full = ids[:len(st.prompt)] + dec
        if len(ids) < len(full):
            ids.extend(full[len(ids):])
        if num_computed_tokens is None:
            end = len(full) * self.block_size + (1 if n_anon_final else 0)
        else:
            end = num_computed_tokens
        for c in self.caches:
            c.release(st, dec, n_anon_final, end)
        if self.recorder is not None:
            # NOTE: a re-admission after a preemption admitted the prompt and the output so far:
            # recorded as such (input_length = its tokens then), as --timing recorded replays it
            extra = st.num_tokens - input_length if st.num_tokens > input_length else 0
            finished.append((st.t_start_s, t_done_s, input_length + extra, n_output - extra,
                             full, 0, st.request, st.arrival_s))

    def _preempt(self, req_id: str, decode_hashes: list, n_anon_final: int = 0,
                 t_done_s: float = -1.0, num_tokens: int = -1,
                 finished: list | None = None) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        for c in self.caches:
            c.preempt(st, dec, n_anon_final)
        if self.recorder is not None and finished is not None and t_done_s >= 0:
            # NOTE: the admission up to the preemption is a request of its own in the recording
            # (type recorder.PREEMPTED_TYPE): it held and inserted blocks like any other; it
            # computed all its tokens but the last sampled one, as a finished request does
            finished.append((st.t_start_s, t_done_s, st.num_tokens,
                             max(num_tokens - st.num_tokens, 0),
                             st.ids[:len(st.prompt)] + dec, 1, st.request, st.arrival_s))

    def _reset(self) -> None:
        """Empty every shadow cache (vLLM's reset_prefix_cache with reset_external)."""
        for c in self.caches:
            c.reset()
        self.inflight.clear()

    def _holds(self, block_id: int) -> bool:
        return any(c.holds(block_id) for c in self.caches)

    # -- counters ----------------------------------------------------------------------------
    def _make_snapshot(self) -> Snapshot:
        # NOTE: runs after every drained batch: each kind writes its rows in place
        keys = self.part_keys
        out = {p.snapshot: [(p.initial or 0) if p.state else (0,) * len(p.series)]
               * len(keys[p.keys]) for p in PARTS}
        for c in self.caches:
            c.counters(out)
        if self._profile is not None:
            out[PREFILL.snapshot] = [tuple(r) for r in self._pre]
        rec = self.recorder
        if rec is not None:
            w = self._worker
            w[_W_RECORDED], w[_W_BYTES], w[_W_DELETED] = (rec.n_recorded, rec.bytes_total,
                                                          rec.segments_deleted)
            if keys[RECORDING_BYTES.keys]:
                out[RECORDING_BYTES.snapshot] = [rec.bytes_on_disk]
                out[RECORDING_FREE.snapshot] = [rec.disk_free_bytes]
                out[RECORDING_LIMIT.snapshot] = [rec.keep_bytes]
        prev = getattr(self, "snapshot", None)
        fields = {}
        for p in PARTS:
            v = tuple(out[p.snapshot])
            if p.state and prev is not None and getattr(prev, p.snapshot) == v:
                v = getattr(prev, p.snapshot)   # NOTE: the same object: compared cheaply
            fields[p.snapshot] = v
        return Snapshot(worker=tuple(self._worker),
                        recording_enabled=int(rec is not None and rec.enabled), **keys, **fields)

    def _safe(self, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            self._error(getattr(fn, "__qualname__", "worker"), exc)

    def _error(self, where: str, exc: BaseException) -> None:
        self._worker[_W_ERRORS] += 1
        if where not in self._logged:
            self._logged.add(where)
            logger.error("shadow worker: %s failed (counted in shadow_errors_total; logged "
                         "once): %r", where, exc, exc_info=exc)
