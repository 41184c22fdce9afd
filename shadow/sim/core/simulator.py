"""The multi-cache stepper: one decode of a trace, every (policy, capacity) cache stepped over it.

(Specs and results: :mod:`shadow.sim.core.results`; the live protocol: :mod:`shadow.sim.live.batch`; vLLM's
block rules and the lookup modes: :mod:`shadow.sim.engine.rules`.)

``Simulator.feed(batch)`` serves every request of a :class:`~shadow.trace.batch.Batch` in every
cache, each cache's whole batch with the GIL released (so a reader thread can decode the next
batch meanwhile).  ``admit``/``release`` are the live, one-request-at-a-time form used by the
connector and the replay predictor.  See docs/design.md "Simulator API".

:func:`run_trace` drives a simulator over an open trace, start to finish: the serial driver of
:func:`shadow.sim.run.run` (which checks the run against the trace first: an oracle needs
next-access times): plan the oracles without skipped requests, feed every batch (decoded one batch
ahead), then close; on any failure, or Ctrl-C, the simulator is aborted so no partial output (hole
files) is left behind.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from shadow.atomic import commit, create_temp, discard, output_error
from shadow.errors import ShadowError
from shadow.sim.category import DEFAULT_CATEGORY, check_category, request_info
from shadow.sim.cost.models import CostModel, parse_cost_model
from shadow.sim.live.wire import EV_ADMIT, OUT_RC, OUT_WIDTH, ROW_KIND, ROW_WIDTH
from shadow.sim.core.loop import FAIL_MESSAGES, CacheRun, live_batch_all, serve_chunks
from shadow.sim.registry import make_policy, policy_info
from shadow.sim.live.batch import Admission, LiveBatch
from shadow.sim.core.oracle import attach_next_access
from shadow.sim.core.results import CacheSpec, Result
from shadow.sim.engine.rules import LOOKUP_MODES, lookup_counts, vllm_anonymous_counts
from shadow.trace.reader import default_decode_threads

__all__ = ["Simulator", "CacheSpec", "Result", "Admission", "LiveBatch", "prefetched",
           "CHUNK_ENTRIES", "run_trace", "sim_decode_threads", "SIM_DECODE_THREADS"]

log = logging.getLogger(__name__)

#: Block entries per chunk: every cache serves one chunk of requests before the next chunk.
CHUNK_ENTRIES = 16384

class Simulator:
    """Step several (policy, capacity) caches over one trace, or serve live requests."""

    def __init__(self, specs: Sequence[CacheSpec], *, cost_model: str | CostModel = "uniform",
                 pin: bool = True, replay_order: str = "deepest-first", verify: bool = True,
                 dump_holes_dir: str | os.PathLike | None = None, trace_name: str = "",
                 block_id: str = "prefix", lookup: str = "all", block_size_tokens: int = 0,
                 threads: int | None = None, chunk_entries: int = CHUNK_ENTRIES,
                 category: str = DEFAULT_CATEGORY) -> None:
        if replay_order not in ("deepest-first", "prefix-order"):
            raise ShadowError(f"bad replay order {replay_order!r} (deepest-first or prefix-order)")
        if lookup not in LOOKUP_MODES:
            raise ShadowError(f"bad lookup mode {lookup!r} ({', '.join(LOOKUP_MODES)})")
        if lookup != "all" and block_size_tokens <= 0:
            raise ShadowError(f"lookup mode {lookup!r} needs the trace's block size in tokens "
                              f"(the header has none)")
        if not specs:
            raise ShadowError("no cache to simulate")
        #: how the trace's type and turn fold into the category ``set_request_ctx`` carries
        #: (:mod:`shadow.sim.category`)
        self.category = check_category(category)
        self.specs = list(specs)
        self.cost = cost_model if isinstance(cost_model, CostModel) else parse_cost_model(cost_model)
        if block_size_tokens > 0:
            # NOTE: profile:'s block costs need the block size (any other model is unchanged)
            self.cost = self.cost.for_block_size(int(block_size_tokens))
        self.pin = pin
        self.replay_order = replay_order
        self.verify = verify
        self.trace_name = trace_name
        self.block_id = block_id
        self.lookup = lookup
        self.block_size_tokens = int(block_size_tokens)
        self.runs: list[CacheRun] = []
        for s in self.specs:
            policy = make_policy(s.policy, s.capacity, s.params)
            self.runs.append(CacheRun(policy, pin, replay_order, verify))
        self._needs_next = [policy_info(s.policy).needs_next_access for s in self.specs]
        #: True if some cache's policy reads the request context (``set_request_ctx``): only then
        #: are the per-request info rows built
        self.wants_request_ctx = any(r.policy.wants_request_ctx for r in self.runs)
        self.chunk_entries = int(chunk_entries)
        self._groups = self._make_groups(threads)
        self._pool = None
        #: Next-access values recomputed without skipped requests, per capacity (the oracles);
        #: set by :func:`shadow.sim.core.oracle.attach_next_access`, None to use the trace's own.
        self.next_access_source = None
        self._cost_exact = np.zeros(0)
        self._cost_int = np.zeros(0, dtype=np.int64)
        self._ensure_costs(1024)
        self._warned_skip = [False] * len(self.runs)
        self._trace_warned: set[str] = set()
        self._reported_fail = [False] * len(self.runs)
        self._n_live = 0
        self._no_next = np.zeros(0, dtype=np.int64)
        self._holes: list[tuple[str, str]] = []
        if dump_holes_dir is not None:
            self._open_holes(Path(dump_holes_dir))

    # ---- set-up ----

    def _open_holes(self, d: Path) -> None:
        """Open every cache's hole file under a :func:`shadow.atomic.create_temp` name; a
        failure (a read-only directory) removes the ones opened and names the file."""
        if not d.is_dir():
            raise ShadowError(f"--dump-holes: directory {d} does not exist")
        base = Path(self.trace_name or "trace").name.split(".")[0] or "trace"
        try:
            for spec, run in zip(self.specs, self.runs):
                final = d / f"holes_{base}_cache{spec.capacity}_{spec.policy}.txt"
                tmp = create_temp(final)
                self._holes.append((str(tmp), str(final)))
                try:
                    run.open_holes(str(tmp))
                except OSError as exc:
                    raise output_error(final, exc) from None
        except BaseException:
            self.abort()
            raise

    def _ensure_costs(self, n: int) -> None:
        if n > len(self._cost_exact):
            n = max(n, 2 * len(self._cost_exact))
            self._cost_exact = np.ascontiguousarray(self.cost.costs(n), dtype=np.float64)
            self._cost_int = np.ascontiguousarray(self.cost.int_costs(n), dtype=np.int64)

    @property
    def needs_next_access(self) -> bool:
        """True if some cache's policy reads next-access times (an oracle)."""
        return any(self._needs_next)

    # ---- offline ----

    def feed(self, batch, prefix_hits: np.ndarray | None = None) -> None:
        """Serve every request of ``batch`` in every cache (whole requests, file order).

        ``prefix_hits`` (int64, caches x requests, C order), when given, receives each request's
        first-miss hit blocks per cache, -1 where the cache did not serve it (skipped, or the
        cache had stopped)."""
        n = batch.n_requests
        if n == 0:
            return
        offsets = np.ascontiguousarray(batch.offsets, dtype=np.int64)
        ids = np.ascontiguousarray(batch.block_ids, dtype=np.int64)
        nxt = np.ascontiguousarray(batch.next_access, dtype=np.int64)
        lens = np.diff(offsets)
        max_b = int(np.max(lens))
        self._ensure_costs(max_b + 1)
        ts = _timestamps(batch.records)
        nm = (None if self.lookup == "all" else
              lookup_counts(batch.records, lens, self.lookup, self.block_size_tokens))
        na = (vllm_anonymous_counts(batch.records, lens, self.block_size_tokens)
              if self.lookup == "vllm" else None)
        max_len = max_b if na is None else int(np.max(lens + na))
        info = request_info(batch.records, self.category) if self.wants_request_ctx else None
        for run in self.runs:
            run.reserve(max_len + 1)
        src = self.next_access_source
        per_cap: dict[int, np.ndarray] = {}
        nxts = {}
        for spec, run, needs in zip(self.specs, self.runs, self._needs_next):
            if needs and src is not None:
                if spec.capacity not in per_cap:
                    per_cap[spec.capacity] = np.ascontiguousarray(
                        src.for_batch(spec.capacity, batch, nxt), dtype=np.int64)
                nxts[id(run)] = per_cap[spec.capacity]
            else:
                nxts[id(run)] = nxt
        jobs = [(g, [nxts[id(r)] for r in g]) for g in self._groups]
        args = (offsets, ids, ts, self._cost_exact, self._cost_int, int(batch.first_request),
                nm, self.chunk_entries, na, info)
        outs: list = [None] * len(jobs)
        if prefix_hits is not None:
            if prefix_hits.shape != (len(self.runs), n) or prefix_hits.dtype != np.int64 \
                    or not prefix_hits.flags.c_contiguous:
                raise ValueError(f"prefix_hits: an int64 C array of {len(self.runs)} x {n}")
            row = {id(r): k for k, r in enumerate(self.runs)}
            outs = [[prefix_hits[row[id(r)]] for r in g] for g, _nx in jobs]
        if len(jobs) == 1:
            serve_chunks(jobs[0][0], jobs[0][1], *args, prefix_hits=outs[0])
        else:
            # NOTE: each group steps its caches with the GIL released (serve_chunks), so the
            # groups run in parallel; results do not depend on the grouping (caches are independent).
            futures = [self._executor().submit(serve_chunks, g, nx, *args, prefix_hits=o)
                       for (g, nx), o in zip(jobs[1:], outs[1:])]
            serve_chunks(jobs[0][0], jobs[0][1], *args, prefix_hits=outs[0])
            for f in futures:
                f.result()
            self._rebalance()
        self._report()

    def _executor(self):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(max_workers=len(self._groups) - 1,
                                            thread_name_prefix="shadow-sim")
        return self._pool

    def _make_groups(self, threads: int | None) -> list[list[CacheRun]]:
        """Split the caches into ``threads`` groups of about equal estimated work."""
        if threads is None:
            threads = os.cpu_count() or 1
        n = max(1, min(int(threads), len(self.runs)))
        return self._balance(n, [policy_info(s.policy).spec.weight * s.capacity ** 0.25
                                 for s in self.specs])

    def _balance(self, n: int, work: list[float]) -> list[list[CacheRun]]:
        """``n`` groups of caches, the costliest first, each to the least loaded group (LPT)."""
        loads = [0.0] * n
        groups: list[list[CacheRun]] = [[] for _ in range(n)]
        for i in sorted(range(len(self.runs)), key=lambda i: -work[i]):
            g = loads.index(min(loads))
            groups[g].append(self.runs[i])
            loads[g] += work[i]
        return groups

    def _rebalance(self) -> None:
        """Regroup the caches by the CPU time each has taken so far (``CacheRun.busy_ns``).

        NOTE: the static estimate (``PolicySpec.weight``) is off by up to 2x for a given trace and size, and
        the slowest group sets a batch's wall time; measured work balances the threads from the
        second batch on.  Results do not depend on the grouping (the caches are independent).
        """
        busy = [float(r.busy_ns) for r in self.runs]
        if len(self._groups) > 1 and sum(busy) > 0:
            self._groups = self._balance(len(self._groups), busy)

    def _report(self) -> None:
        for run in self.runs:
            # NOTE: a policy may say once what it makes of the trace (the session family of a
            # trace without session ids); the same line from several caches is logged once
            warn = getattr(run.policy, "trace_warning", None)
            msg = warn() if warn is not None else None
            if msg and msg not in self._trace_warned:
                self._trace_warned.add(msg)
                log.warning("%s", msg)
        for i, (spec, run) in enumerate(zip(self.specs, self.runs)):
            if run.first_skip_req >= 0 and not self._warned_skip[i]:
                self._warned_skip[i] = True
                log.warning("%s cache %d: request %d has %d distinct blocks, more than the cache "
                            "holds; such requests are skipped (n_req_skipped; warned once)",
                            spec.policy, spec.capacity, run.first_skip_req, run.first_skip_distinct)
            if run.failed and not self._reported_fail[i]:
                self._reported_fail[i] = True
                log.error("%s cache %d: %s", spec.policy, spec.capacity, self._error(run))

    @staticmethod
    def _error(run: CacheRun) -> str | None:
        if not run.failed:
            return None
        return FAIL_MESSAGES[run.failed].format(req=run.failed_req, block=run.failed_block)

    def results(self) -> list[Result]:
        out = []
        for spec, run in zip(self.specs, self.runs):
            out.append(Result(
                spec, self.trace_name, self.cost.name, self.block_id, self.pin, self.replay_order,
                run.n_req, run.n_req_skipped, run.n_blocks, run.n_hits, run.n_prefix_hits,
                run.total_cost, run.saved_cost, run.prefix_saved_cost, run.n_eviction,
                run.n_self_eviction, run.n_unexpected_eviction, run.n_holes, run.hole_len_sum,
                run.max_hole_len, self._error(run)))
        return out

    def _shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def close(self) -> None:
        """Finish the hole dumps: close each (a write that failed, e.g. on a full disk, is an
        :class:`~shadow.errors.OutputError` and no hole file is committed), then commit each from
        its temporary name (fsync, rename); stop the worker threads."""
        self._shutdown()
        try:
            for (_tmp, final), run in zip(self._holes, self.runs):
                try:
                    run.close_holes()   # NOTE: a write that failed (a full disk) raises here
                except OSError as exc:
                    raise output_error(final, exc) from None
            for tmp, final in self._holes:
                commit(tmp, final)
        except BaseException:
            self.abort()
            raise
        self._holes = []

    def abort(self) -> None:
        """Stop the worker threads; drop every hole file not committed yet."""
        self._shutdown()
        self._drop_holes()

    def _drop_holes(self) -> None:
        """Close every hole file and delete the temporary ones (nothing under a final name)."""
        for run in self.runs:
            try:
                run.close_holes()
            except OSError:
                pass
        for tmp, _ in self._holes:
            discard(tmp)
        self._holes = []

    def __enter__(self) -> "Simulator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # ---- live ----

    def serve_live(self, batch: LiveBatch) -> tuple[np.ndarray, np.ndarray] | None:
        """Serve ``batch``'s admissions and releases, in order, in every cache (one call each).

        Returns :meth:`serve_live_arrays`' result arrays (None for an empty batch): admission
        ``adm`` queued as event ``e`` (``batch.admissions``) reads its results from row ``e``."""
        n = len(batch.ev)
        if n == 0:
            return None
        ids = np.array(batch.flat, dtype=np.int64)
        nxt = None
        if batch.nxt:
            nxt = np.full(len(ids), -1, dtype=np.int64)
            for start, values in batch.nxt:
                nxt[start:start + len(values)] = values
        rc = np.zeros((n, len(self.runs)), dtype=np.int64)
        for e, adm in batch.outside:
            rc[e] = adm._i[:, OUT_RC]
        out_i, out_f = self.serve_live_arrays(
            np.array(batch.ev, dtype=np.int64).reshape(n, ROW_WIDTH),
            np.array(batch.offsets, dtype=np.int64), ids, np.array(batch.ts, dtype=np.float64),
            rc, batch.max_len, nxt)
        for e, adm in batch.admissions:
            # NOTE: copies, so an in-flight admission does not keep its whole batch alive
            adm._i = out_i[e].copy()
            adm._f = out_f[e].copy()
        return out_i, out_f

    def serve_live_arrays(self, ev: np.ndarray, offsets: np.ndarray, ids: np.ndarray,
                          ts: np.ndarray, rc: np.ndarray, max_len: int,
                          nxt: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`serve_live` on a batch already in the wire format of ``live/wire.pxd``: event
        rows ``ev``, entry ``offsets`` into ``ids``, a timestamp per event, and ``rc[e, k]`` for
        a release ``e`` of an admission served in an earlier batch (its ``OUT_RC`` in cache
        ``k``).  ``max_len``: the longest event's entries plus anonymous slots.  Returns the
        result arrays ``(out_i, out_f)``, (events, caches, OUT_WIDTH) each."""
        n, K = ev.shape[0], len(self.runs)
        if nxt is None:
            if len(self._no_next) < len(ids):
                self._no_next = np.full(max(len(ids), 2 * len(self._no_next)), -1, dtype=np.int64)
            nxt = self._no_next[:len(ids)]
        self._ensure_costs(int(max_len) + 1)
        out_i = np.zeros((n, K, OUT_WIDTH), dtype=np.int64)
        out_f = np.zeros((n, K, OUT_WIDTH), dtype=np.float64)
        out_i[:, :, OUT_RC] = rc
        live_batch_all(self.runs, ev, offsets, ids, nxt, ts, self._cost_exact, self._cost_int,
                       out_i, out_f, self._n_live)
        self._n_live += int(np.count_nonzero(ev[:, ROW_KIND] == EV_ADMIT)) if n else 0
        self._report()
        return out_i, out_f

    def admit(self, block_ids: Iterable[int], n_match: int | None = None, n_anonymous: int = 0,
              timestamp_s: float = -1.0, next_access: Iterable[int] | None = None,
              category: int = 0, session_id: int = -1,
              session_next_req: int = -1) -> Admission:
        """Serve one live request in every cache and keep its blocks pinned until :meth:`release`.

        Statistics (``hits``: gap-spanning, ``prefix_hits``: up to the first miss) cover
        ``block_ids[:n_match]``; every block is allocated and accessed; ``n_anonymous`` slots are
        reserved without a block (vLLM's partial tail block) until release.  ``timestamp_s``,
        ``category`` (already folded: :mod:`shadow.sim.category`), ``session_id`` and
        ``session_next_req`` are what ``set_request_ctx`` gets.  Many requests at once:
        :class:`LiveBatch` and :meth:`serve_live` (same results, fewer calls).
        """
        batch = LiveBatch()
        adm = batch.admit(block_ids, n_match, n_anonymous, timestamp_s, next_access, category,
                          session_id, session_next_req)
        self.serve_live(batch)
        return adm

    def release(self, adm: Admission, extra_block_ids: Iterable[int] = (),
                n_anonymous_final: int = 0) -> None:
        """Insert the request's generated blocks, then unpin its blocks tail first.

        While the generated blocks go in, the request holds ``n_anonymous_final`` anonymous slots
        (vLLM's final partial block, allocated until the request is freed): the admission's
        reservation shrinks to that many, or grows to it after the generated blocks are inserted
        (evicting a block when the cache is full), as vLLM allocates the final partial block
        after the generated ones.  Every anonymous slot is free again afterwards.
        """
        batch = LiveBatch()
        batch.release(adm, extra_block_ids, n_anonymous_final)
        self.serve_live(batch)


def policy_notes(sims: Iterable[Simulator], method: str = "trace_notes") -> list[str]:
    """The distinct lines the simulators' policies give from ``method`` (if they have it), in
    simulator and cache order (``trace_notes``: what the trace lacked, which ``simulate``
    warns about after the run)."""
    out: list[str] = []
    for sim in sims:
        for r in sim.runs:
            notes = getattr(r.policy, method, None)
            for line in notes() if notes is not None else ():
                if line not in out:
                    out.append(line)
    return out


def _timestamps(records: np.ndarray) -> np.ndarray:
    """Arrival seconds per request: start_time_us, else complete_time_us, else -1."""
    try:
        start = records["start_time_us"].astype(np.float64)
        done = records["complete_time_us"].astype(np.float64)
    except (ValueError, KeyError, IndexError):
        return np.full(len(records), -1.0)
    ts = np.where(start >= 0, start, done) / 1e6
    ts[(start < 0) & (done < 0)] = -1.0
    return np.ascontiguousarray(ts, dtype=np.float64)


def prefetched(batches: Iterable, depth: int = 2):
    """Iterate ``batches`` with a reader thread decoding up to ``depth`` batches ahead.

    ``Simulator.feed`` releases the GIL while it steps the caches, so decoding the next batch
    (zstd releases the GIL too) overlaps with simulating the current one.
    """
    import queue
    import threading

    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def work() -> None:
        try:
            for b in batches:
                while not stop.is_set():
                    try:
                        q.put(b, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as exc:       # handed to the consumer, re-raised there
            q.put(exc)

    t = threading.Thread(target=work, name="shadow-trace-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                pass
            t.join(timeout=0.05)


#: Frame-decoding threads of an offline simulation (``$SHADOW_DECODE_THREADS`` overrides it).
#: NOTE: one is enough: a decode thread (~80-100 M entries/s here; parsing has its own thread)
#: outruns the fastest cache's serve loop (~50 M/s); a second one takes turns on the serve loop's
#: core and keeps twice the frames (4 MiB each) in flight through the L3 that the caches' state
#: lives in.  End to end one thread is never slower than two (docs/performance.md, "One decode
#: thread when simulating").
SIM_DECODE_THREADS = 1


def sim_decode_threads() -> int:
    """Decode threads for :func:`~shadow.trace.open_trace` in an offline simulation."""
    return default_decode_threads(prefer=SIM_DECODE_THREADS)


def run_trace(sim: Simulator, tr, path: str | os.PathLike[str],
              progress: Callable[[int, int], None] | None = None, meter=None) -> None:
    """Feed the whole trace ``tr`` (opened from ``path``) to ``sim`` and close it.

    ``progress(block accesses fed, requests fed)`` is called after each batch; ``meter``
    (a :class:`~shadow.sim.core.prefill.PrefillMeter`) gets each batch's prompt lengths and
    per-cache first-miss hits.
    """
    try:
        if sim.needs_next_access:
            # NOTE: a pre-pass over the trace, only when some request is skipped by an oracle
            # smaller than the largest request (it must plan without the requests it skips).
            attach_next_access(sim, tr)
        accesses = requests = 0
        for batch in prefetched(tr):
            if meter is None:
                sim.feed(batch)
            else:
                hits = np.empty((len(sim.runs), batch.n_requests), dtype=np.int64)
                sim.feed(batch, prefix_hits=hits)
                meter.add(batch.records["input_length"], hits)
            if progress is not None:
                accesses += len(batch.block_ids)
                requests += batch.n_requests
                progress(accesses, requests)
    except BaseException:
        sim.abort()
        raise
    sim.close()
