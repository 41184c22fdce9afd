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

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shadow.connector.config import ShadowConfig
from shadow.connector.interner import BlockInterner

logger = logging.getLogger(__name__)

# Event kinds (first element of each queued tuple).
ADMIT, RELEASE, PREEMPT, RESET, CALL = range(5)

#: Per-cache cumulative counters, in snapshot order (Prometheus names add ``shadow_`` / ``_total``).
CACHE_FIELDS = ("requests", "skipped_requests", "block_lookups", "block_hits",
                "block_prefix_hits", "cost_lookup", "cost_saved", "cost_prefix_saved",
                "query_tokens", "prefix_hit_tokens", "evictions", "self_evictions")
#: Per-engine cumulative counters kept by the worker thread.
WORKER_FIELDS = ("recorded_requests", "recorded_bytes", "worker_errors")


@dataclass(frozen=True)
class Prediction:
    """What the shadow caches predicted for one admitted request (the in-memory log)."""

    request_id: str
    num_tokens: int
    n_blocks: int
    n_match: int
    engine_hit_tokens: int
    preempted: bool
    #: cache key (``policy|capacity``) -> first-miss hit tokens (what vLLM would reuse)
    prefix_hit_tokens: dict[str, int] = field(default_factory=dict)
    #: cache key -> gap-spanning hit blocks
    hit_blocks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """Cumulative worker-side counters at one moment (immutable; swapped by reference)."""

    cache_keys: tuple[str, ...]
    caches: tuple[tuple[float, ...], ...]
    worker: tuple[float, ...]
    recording_enabled: int


def cache_key(label: str, capacity: int) -> str:
    return f"{label}|{capacity}"


class _SimAdapter:
    """The few Simulator facts the worker reads, kept in one place (the live API of shadow.sim)."""

    def __init__(self, cfg: ShadowConfig, sim_factory: Callable[[ShadowConfig], Any] | None):
        self.cfg = cfg
        self.sim = (sim_factory or make_simulator)(cfg)
        self.runs = list(_runs_of(self.sim))
        if len(self.runs) != len(cfg.caches):
            raise RuntimeError(f"simulator has {len(self.runs)} caches, expected "
                               f"{len(cfg.caches)}")

    def counters(self) -> list[list[float]]:
        out = []
        for r in self.runs:
            out.append([r.n_req, r.n_req_skipped, r.n_blocks, r.n_hits, r.n_prefix_hits,
                        r.total_cost, r.saved_cost, r.prefix_saved_cost, 0.0, 0.0,
                        r.n_eviction, r.n_self_eviction])
        return out

    def release(self, adm: Any, extra_ids: list[int], n_anon_final: int) -> None:
        release_like_vllm(self.sim, adm, extra_ids, n_anon_final)

    def holds(self, block_id: int) -> bool:
        """Whether any shadow cache holds ``block_id`` (the interner keeps such ids)."""
        for r in self.runs:
            if r.policy.py_find(block_id) >= 0:
                return True
        return False


#: Placeholder ids (see :func:`release_like_vllm`) live far above any id the interner hands out.
_FILLER_IDS = itertools.count(1 << 62)


def release_like_vllm(sim: Any, adm: Any, extra_ids: Sequence[int], n_anon_final: int) -> None:
    """``Simulator.release`` holding, while the generated blocks go in, what vLLM holds.

    ``n_anon_final`` is the number of blocks vLLM holds for the request beyond its full, hashed
    blocks when it finishes: 1 when ``ceil(num_computed_tokens / B)`` exceeds the full blocks
    (the final partial block), else 0.  vLLM allocated that block during decode, so while the
    shadow inserts the generated blocks it must keep a slot for it, or it evicts one block fewer
    than the engine (the off-by-one-block mismatch of the first fidelity runs).

    NOTE: ``Simulator.release`` keeps at most the admission's own reservation (``n_anonymous``);
    a request whose prompt ended on a block boundary reserved none at admission.  For it the
    missing slot is claimed by a placeholder block (an id no hash ever gets) inserted after the
    generated blocks and removed right after the release, which is what vLLM does with a
    partial block: allocated last, freed to the head of the free queue (reused first).
    """
    keep = min(int(n_anon_final), int(adm.n_anonymous))
    missing = int(n_anon_final) - keep
    if missing <= 0:
        sim.release(adm, extra_block_ids=extra_ids, n_anonymous_final=keep)
        return
    fillers = [next(_FILLER_IDS) for _ in range(missing)]
    sim.release(adm, extra_block_ids=list(extra_ids) + fillers, n_anonymous_final=keep)
    for r in _runs_of(sim):
        for f in fillers:
            if r.policy.py_find(f) >= 0:
                r.policy.py_remove(f)


def partial_tail_blocks(num_computed_tokens: int, n_full_blocks: int, block_size: int) -> int:
    """Blocks vLLM holds for a finished request beyond its ``n_full_blocks`` hashed ones (0/1).

    NOTE: ``allocate_slots`` covers the tokens a step computes; the last sampled token is never
    computed, so a request ends holding ``ceil(num_computed_tokens / B)`` blocks.  For a recorded
    request ``num_computed_tokens = input_length + output_length - 1``.
    """
    return max(0, -(-int(num_computed_tokens) // int(block_size)) - int(n_full_blocks))


def _runs_of(sim: Any) -> Sequence[Any]:
    return sim.runs


def make_simulator(cfg: ShadowConfig) -> Any:
    """The live Simulator for ``cfg``: every policy at every capacity, pinned, verified."""
    from shadow.sim import CacheSpec, Simulator

    specs = [CacheSpec(p.name, c, p.params) for p, c in cfg.caches]
    return Simulator(specs, cost_model=cfg.cost_model, pin=cfg.pin, verify=False,
                     trace_name=f"live engine {cfg.engine_id} dp{cfg.dp_rank}")


class ShadowWorker:
    """Owns the queue, the thread, the simulator, the interner, the recorder and the counters."""

    def __init__(self, cfg: ShadowConfig, *, recorder: Any = None,
                 sim_factory: Callable[[ShadowConfig], Any] | None = None,
                 start: bool = True) -> None:
        self.cfg = cfg
        self.block_size = cfg.block_size
        self.maxsize = cfg.queue_size
        self.queue: deque = deque()
        self._wake = threading.Event()
        self._stop = False
        self._sim_factory = sim_factory
        self._sim = _SimAdapter(cfg, sim_factory)
        self.keys = tuple(cache_key(p.label, c) for p, c in cfg.caches)
        self.interner = BlockInterner(cfg.id_horizon_s, is_held=self._holds)
        self.recorder = recorder
        self.inflight: dict[str, tuple] = {}
        self.predictions: deque[Prediction] = deque(maxlen=max(cfg.prediction_log_size, 0) or 1)
        self._log_predictions = cfg.prediction_log_size > 0
        # per-cache token counters the simulator does not keep (tokens, not blocks)
        self._tok = [[0.0, 0.0] for _ in self.keys]
        self._base = [[0.0] * len(CACHE_FIELDS) for _ in self.keys]  # carried over a reset
        self._worker = [0.0] * len(WORKER_FIELDS)
        self._logged: set[str] = set()
        self.snapshot = self._make_snapshot()
        self._thread: threading.Thread | None = None
        if start:
            self.start()

    # -- scheduler thread ------------------------------------------------------------------
    def submit(self, event: tuple) -> bool:
        """Queue ``event``; False (and nothing queued) when the queue is full.  Never blocks."""
        q = self.queue
        if len(q) >= self.maxsize:
            return False
        q.append(event)
        if not self._wake.is_set():
            self._wake.set()
        return True

    def submit_control(self, event: tuple) -> None:
        """Queue a control event regardless of the bound (resets, flush barriers)."""
        self.queue.append(event)
        self._wake.set()

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
        self.submit_control((CALL, done.set))
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
        q = self.queue
        n = 0
        while q:
            ev = q.popleft()
            try:
                kind = ev[0]
                if kind == ADMIT:
                    self._admit(*ev[1:])
                elif kind == RELEASE:
                    self._release(*ev[1:])
                elif kind == PREEMPT:
                    self._preempt(*ev[1:])
                elif kind == RESET:
                    self._reset()
                elif kind == CALL:
                    self.snapshot = self._make_snapshot()
                    ev[1]()
            except Exception as exc:  # noqa: BLE001 - one bad event must not stop the shadow
                self._error(f"event {ev[0]}", exc)
            n += 1
            if n % 256 == 0:
                self.snapshot = self._make_snapshot()
        self.interner.maybe_rotate()
        self.snapshot = self._make_snapshot()

    def _admit(self, req_id: str, hashes: list, num_tokens: int, engine_hit: int,
               preempted: bool, t_arrival_s: float) -> None:
        old = self.inflight.pop(req_id, None)
        if old is not None:  # a re-admission whose preemption we did not see: release first
            self._sim.release(old[0], [], 0)
        ids = self.interner.intern(hashes)
        b = self.block_size
        n_match = len(ids)
        if self.cfg.match == "vllm":
            # NOTE: vLLM always recomputes the last prompt token and stops at the first miss, so
            # a hit is at most floor((N-1)/B) blocks (kv_cache_manager.get_computed_blocks).
            n_match = min(n_match, max(num_tokens - 1, 0) // b)
        n_anon = 1 if num_tokens % b else 0  # the partial tail block: held, never reusable
        adm = self._sim.sim.admit(ids, n_match=n_match, n_anonymous=n_anon,
                                  timestamp_s=t_arrival_s)
        self.inflight[req_id] = (adm, ids, t_arrival_s, num_tokens, preempted)
        pref = adm.prefix_hits
        for i, tk in enumerate(self._tok):
            tk[0] += num_tokens
            tk[1] += int(pref[i]) * b
        if self._log_predictions:
            self.predictions.append(Prediction(
                req_id, num_tokens, len(ids), n_match, engine_hit, preempted,
                {k: int(pref[i]) * b for i, k in enumerate(self.keys)},
                {k: int(adm.hits[i]) for i, k in enumerate(self.keys)}))

    def _release(self, req_id: str, decode_hashes: list, n_output: int, t_done_s: float,
                 input_length: int, n_anon_final: int = 0) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return  # never admitted (aborted while waiting) or reset meanwhile
        adm, ids, t_arrival_s, _num_tokens, _preempted = st
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        self._sim.release(adm, dec, n_anon_final)
        rec = self.recorder
        if rec is not None and rec.enabled:
            rec.write(t_arrival_s, t_done_s, input_length, n_output, ids + dec)

    def _preempt(self, req_id: str, decode_hashes: list, n_anon_final: int = 0) -> None:
        st = self.inflight.pop(req_id, None)
        if st is None:
            return
        dec = self.interner.intern(decode_hashes) if decode_hashes else []
        self._sim.release(st[0], dec, n_anon_final)

    def _reset(self) -> None:
        """Empty every shadow cache (vLLM's reset_prefix_cache with reset_external)."""
        cur = self._sim.counters()
        for i, row in enumerate(cur):
            for j, v in enumerate(row):
                self._base[i][j] += v
        self._sim = _SimAdapter(self.cfg, self._sim_factory)
        self.inflight.clear()

    def _holds(self, block_id: int) -> bool:
        return self._sim.holds(block_id)

    # -- counters ----------------------------------------------------------------------------
    def _make_snapshot(self) -> Snapshot:
        cur = self._sim.counters()
        rows = []
        for i, row in enumerate(cur):
            base = self._base[i]
            row = [v + base[j] for j, v in enumerate(row)]
            row[8], row[9] = self._tok[i]
            rows.append(tuple(row))
        rec = self.recorder
        if rec is not None:
            self._worker[0], self._worker[1] = rec.n_recorded, rec.bytes_total
        enabled = int(rec is not None and rec.enabled)
        return Snapshot(self.keys, tuple(rows), tuple(self._worker), enabled)

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
