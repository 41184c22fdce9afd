"""The multi-cache stepper: one decode of a trace, every (policy, capacity) cache stepped over it.

``Simulator.feed(batch)`` serves every request of a :class:`~shadow.trace.batch.Batch` in every
cache, each cache's whole batch with the GIL released (so a reader thread can decode the next
batch meanwhile).  ``admit``/``release`` are the live, one-request-at-a-time form used by the
connector and the replay predictor.  See docs/design.md "Simulator API".
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.cost import CostModel, parse_cost_model
from shadow.sim.loop import FAIL_MESSAGES, CacheRun, live_batch_all, serve_chunks
from shadow.sim.registry import make_policy, policy_info
from shadow.sim.vllm_rules import (computed_tokens, full_blocks, max_hit_blocks,
                                   partial_tail_blocks)

log = logging.getLogger(__name__)

#: Block entries per chunk: every cache serves one chunk of requests before the next chunk.
CHUNK_ENTRIES = 16384

#: Rough relative cost per block access, to balance the caches over threads (measured ratios).

#: ``lookup`` modes: which of a request's blocks are looked up (counted in the statistics).
LOOKUP_MODES = ("all", "prompt", "vllm")


def lookup_counts(records: np.ndarray, n_blocks: np.ndarray, mode: str, block_size: int) -> np.ndarray | None:
    """Per request, how many leading blocks are looked up; None for ``all`` (every block).

    A recorded request holds its prompt blocks and then its generated-token blocks;
    ``input_length`` says where the prompt ends.  ``prompt``: the prompt's full blocks,
    ``input_length // B``.  ``vllm``: ``(input_length - 1) // B``, since vLLM always recomputes the
    prompt's last token (a prompt of exactly k blocks can reuse only k - 1).  Capped at the
    request's block count and at 0.
    """
    if mode == "all":
        return None
    inp = records["input_length"].astype(np.int64)
    if mode == "prompt":
        k = full_blocks(inp, block_size)
    else:
        k = max_hit_blocks(inp, block_size)
    return np.ascontiguousarray(np.clip(k, 0, n_blocks), dtype=np.int64)


def vllm_anonymous_counts(records: np.ndarray, n_blocks: np.ndarray, block_size: int) -> np.ndarray:
    """Per request, the slots vLLM holds beyond the request's recorded blocks (``--lookup vllm``).

    vLLM allocates slots for the tokens it computes, ``input_length + output_length - 1`` of them
    (the last sampled token never is), so a request holds ``ceil(that / B)`` blocks; in a
    recording (full prompt blocks, then full generated blocks) that is one more than its blocks
    when the computed length is not a multiple of B: the final partial block, allocated
    (evicting when the cache is full) and freed unhashed.  Where a trace names fewer of the
    request's blocks (a converted trace without its output blocks) the others count the same way:
    room held while the request runs, nothing cached (:func:`partial_tail_blocks`).
    """
    inp = records["input_length"].astype(np.int64)
    out = np.maximum(records["output_length"].astype(np.int64), 1)
    return np.ascontiguousarray(partial_tail_blocks(computed_tokens(inp, out), n_blocks,
                                                    block_size), dtype=np.int64)


#: PrefixSim's RESULT keys, in its order; this project's extra keys follow them.
RESULT_KEYS = ("trace", "algo", "cache_size", "cost_model", "block_id", "n_req", "n_req_skipped",
               "n_blocks", "block_hit_ratio", "compute_saving_ratio", "n_eviction",
               "n_self_eviction", "n_unexpected_eviction")
EXTRA_KEYS = ("prefix_hit_ratio", "prefix_compute_saving_ratio", "holes_per_req", "mean_hole_len",
              "max_hole_len", "pin", "replay_order")


@dataclass(frozen=True)
class CacheSpec:
    """One simulated cache: a registered policy name, its capacity in blocks, its ``k=v`` params."""

    policy: str
    capacity: int
    params: str = ""

    @property
    def label(self) -> str:
        return self.policy if not self.params else f"{self.policy}({self.params})"


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


@dataclass
class Result:
    """Statistics of one cache after a run (ratios are 0 when their denominator is)."""

    spec: CacheSpec
    trace: str
    cost_model: str
    block_id: str
    pin: bool
    replay_order: str
    n_req: int
    n_req_skipped: int
    n_blocks: int
    n_hits: int
    n_prefix_hits: int
    total_cost: float
    saved_cost: float
    prefix_saved_cost: float
    n_eviction: int
    n_self_eviction: int
    n_unexpected_eviction: int
    n_holes: int
    hole_len_sum: int
    max_hole_len: int
    error: str | None = None

    @property
    def block_hit_ratio(self) -> float:
        return _ratio(self.n_hits, self.n_blocks)

    @property
    def compute_saving_ratio(self) -> float:
        return _ratio(self.saved_cost, self.total_cost)

    @property
    def prefix_hit_ratio(self) -> float:
        return _ratio(self.n_prefix_hits, self.n_blocks)

    @property
    def prefix_compute_saving_ratio(self) -> float:
        return _ratio(self.prefix_saved_cost, self.total_cost)

    @property
    def holes_per_req(self) -> float:
        return _ratio(self.n_holes, self.n_req)

    @property
    def mean_hole_len(self) -> float:
        return _ratio(self.hole_len_sum, self.n_holes)

    def fields(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "algo": self.spec.policy,
            "cache_size": self.spec.capacity,
            "cost_model": self.cost_model,
            "block_id": self.block_id,
            "n_req": self.n_req,
            "n_req_skipped": self.n_req_skipped,
            "n_blocks": self.n_blocks,
            "block_hit_ratio": f"{self.block_hit_ratio:.6f}",
            "compute_saving_ratio": f"{self.compute_saving_ratio:.6f}",
            "n_eviction": self.n_eviction,
            "n_self_eviction": self.n_self_eviction,
            "n_unexpected_eviction": self.n_unexpected_eviction,
            "prefix_hit_ratio": f"{self.prefix_hit_ratio:.6f}",
            "prefix_compute_saving_ratio": f"{self.prefix_compute_saving_ratio:.6f}",
            "holes_per_req": f"{self.holes_per_req:.4f}",
            "mean_hole_len": f"{self.mean_hole_len:.4f}",
            "max_hole_len": self.max_hole_len,
            "pin": "on" if self.pin else "off",
            "replay_order": self.replay_order,
        }

    def summary_line(self) -> str:
        """PrefixSim's summary line (``%-24s block hit ratio %.4f   compute saving %.4f``)."""
        return (f"{self.spec.policy:<24s} block hit ratio {self.block_hit_ratio:.4f}   "
                f"compute saving {self.compute_saving_ratio:.4f}")

    def result_line(self) -> str:
        """``RESULT k=v ...``: PrefixSim's keys in its order, then this project's extra keys."""
        f = self.fields()
        parts = [f"{k}={f[k]}" for k in RESULT_KEYS + EXTRA_KEYS]
        if self.spec.params:
            parts.append(f"params={self.spec.params}")
        return "RESULT " + " ".join(parts)


class Admission:
    """A live request admitted into every cache; release it with :meth:`Simulator.release` or
    :meth:`LiveBatch.release`.

    Its per-cache results (``served``, ``hits``: gap-spanning, ``prefix_hits``: up to the first
    miss, ``cost``, ``saved``, ``prefix_saved``; lists in the simulator's cache order) exist once
    the batch that admits it has been served; before that reading them raises ShadowError.
    """

    __slots__ = ("ids", "n_anonymous", "released", "_i", "_f")

    def __init__(self, ids: list[int], n_anonymous: int) -> None:
        #: the admitted block ids (a list; the release inserts and unpins these)
        self.ids = ids
        self.n_anonymous = n_anonymous
        self.released = False
        self._i: np.ndarray | None = None   # (caches, 3): rc, hits, prefix hits
        self._f: np.ndarray | None = None   # (caches, 3): cost, saved, prefix saved

    def _col(self, a: np.ndarray | None, j: int) -> list:
        if a is None:
            raise ShadowError("admission not served yet (serve its LiveBatch first)")
        return a[:, j].tolist()

    @property
    def block_ids(self) -> np.ndarray:
        return np.array(self.ids, dtype=np.int64)

    @property
    def served(self) -> list[bool]:
        return [rc == 0 for rc in self._col(self._i, 0)]

    @property
    def hits(self) -> list[int]:
        return self._col(self._i, 1)

    @property
    def prefix_hits(self) -> list[int]:
        return self._col(self._i, 2)

    @property
    def cost(self) -> list[float]:
        return self._col(self._f, 0)

    @property
    def saved(self) -> list[float]:
        return self._col(self._f, 1)

    @property
    def prefix_saved(self) -> list[float]:
        return self._col(self._f, 2)


class LiveBatch:
    """Live admissions and releases, queued in order and served by :meth:`Simulator.serve_live`.

    Invariant: serving a batch is the same as calling :meth:`Simulator.admit` /
    :meth:`Simulator.release` for its events one by one, in order (each cache is independent),
    but it costs one call per cache for the whole batch instead of one per request per cache,
    and each cache serves every event while its tables are in the CPU cache.
    """

    __slots__ = ("ev", "flat", "offsets", "ts", "nxt", "admissions", "outside", "max_len",
                 "_rows")

    def __init__(self) -> None:
        self.ev: list[tuple[int, int, int, int, int]] = []   # (kind, a, b, c, link)
        self.flat: list[int] = []
        self.offsets: list[int] = [0]
        self.ts: list[float] = []
        self.nxt: list[tuple[int, list[int]]] = []           # (entry offset, next-access values)
        self.admissions: list[tuple[int, Admission]] = []    # (event, admission)
        self.outside: list[tuple[int, Admission]] = []       # releases of earlier batches' admissions
        self.max_len = 0
        self._rows: dict[int, int] = {}                        # id(admission) -> its event here

    def __len__(self) -> int:
        return len(self.ev)

    def admit(self, block_ids: Iterable[int], n_match: int | None = None, n_anonymous: int = 0,
              timestamp_s: float = -1.0, next_access: Iterable[int] | None = None) -> Admission:
        """Queue an admission (see :meth:`Simulator.admit`); its results appear once served."""
        ids = block_ids if type(block_ids) is list else [int(x) for x in block_ids]
        if ids and min(ids) < 1:
            # NOTE: ids start at 1: 0 is the empty mark, the bottom of int64 marks free slots
            raise ShadowError(f"block id {min(ids)} in an admission (block ids start at 1)")
        B = len(ids)
        nm = B if n_match is None else max(0, min(int(n_match), B))
        n_anon = max(0, int(n_anonymous))
        adm = Admission(ids, n_anon)
        e = len(self.ev)
        start = self.offsets[-1]
        if next_access is not None:
            nx = [int(x) for x in next_access]
            if len(nx) != B:
                raise ShadowError(f"next_access has {len(nx)} values for {B} blocks")
            self.nxt.append((start, nx))
        self.ev.append((0, nm, n_anon, 0, -1))
        self.flat.extend(ids)
        self.offsets.append(start + B)
        self.ts.append(float(timestamp_s))
        self.admissions.append((e, adm))
        self._rows[id(adm)] = e
        if B + n_anon > self.max_len:
            self.max_len = B + n_anon
        return adm

    def release(self, adm: Admission, extra_block_ids: Iterable[int] = (),
                n_anonymous_final: int = 0) -> None:
        """Queue a release (see :meth:`Simulator.release`)."""
        if adm.released:
            raise ShadowError("request released twice")
        link = self._rows.get(id(adm), -1)
        if link < 0 and adm._i is None:
            raise ShadowError("release of an admission that was never served")
        adm.released = True
        extra = (extra_block_ids if type(extra_block_ids) is list
                 else [int(x) for x in extra_block_ids])
        e = len(self.ev)
        B = len(adm.ids)
        n_final = max(0, int(n_anonymous_final))
        self.ev.append((1, B, adm.n_anonymous, n_final, link))
        self.flat.extend(adm.ids)
        self.flat.extend(extra)
        L = B + len(extra)
        self.offsets.append(self.offsets[-1] + L)
        self.ts.append(-1.0)
        if link < 0:
            self.outside.append((e, adm))
        if L + n_final > self.max_len:
            self.max_len = L + n_final


class Simulator:
    """Step several (policy, capacity) caches over one trace, or serve live requests."""

    def __init__(self, specs: Sequence[CacheSpec], *, cost_model: str | CostModel = "uniform",
                 pin: bool = True, replay_order: str = "deepest-first", verify: bool = True,
                 dump_holes_dir: str | os.PathLike | None = None, trace_name: str = "",
                 block_id: str = "prefix", lookup: str = "all", block_size_tokens: int = 0,
                 threads: int | None = None, chunk_entries: int = CHUNK_ENTRIES) -> None:
        if replay_order not in ("deepest-first", "prefix-order"):
            raise ShadowError(f"bad replay order {replay_order!r} (deepest-first or prefix-order)")
        if lookup not in LOOKUP_MODES:
            raise ShadowError(f"bad lookup mode {lookup!r} ({', '.join(LOOKUP_MODES)})")
        if lookup != "all" and block_size_tokens <= 0:
            raise ShadowError(f"lookup mode {lookup!r} needs the trace's block size in tokens "
                              f"(the header has none)")
        if not specs:
            raise ShadowError("no cache to simulate")
        self.specs = list(specs)
        self.cost = cost_model if isinstance(cost_model, CostModel) else parse_cost_model(cost_model)
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
        self.chunk_entries = int(chunk_entries)
        self._groups = self._make_groups(threads)
        self._pool = None
        #: Next-access values recomputed without skipped requests, per capacity (the oracles);
        #: set by :func:`shadow.sim.oracle.attach_next_access`, None to use the trace's own.
        self.next_access_source = None
        self._cost_exact = np.zeros(0)
        self._cost_int = np.zeros(0, dtype=np.int64)
        self._ensure_costs(1024)
        self._warned_skip = [False] * len(self.runs)
        self._reported_fail = [False] * len(self.runs)
        self._n_live = 0
        self._no_next = np.zeros(0, dtype=np.int64)
        self._holes: list[tuple[str, str]] = []
        if dump_holes_dir is not None:
            self._open_holes(Path(dump_holes_dir))

    # ---- set-up ----

    def _open_holes(self, d: Path) -> None:
        if not d.is_dir():
            raise ShadowError(f"--dump-holes: directory {d} does not exist")
        base = Path(self.trace_name or "trace").name.split(".")[0] or "trace"
        for spec, run in zip(self.specs, self.runs):
            final = d / f"holes_{base}_cache{spec.capacity}_{spec.policy}.txt"
            tmp = final.with_name(final.name + ".tmp")
            run.open_holes(str(tmp))
            self._holes.append((str(tmp), str(final)))

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

    def feed(self, batch) -> None:
        """Serve every request of ``batch`` in every cache (whole requests, file order)."""
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
                nm, self.chunk_entries, na)
        if len(jobs) == 1:
            serve_chunks(jobs[0][0], jobs[0][1], *args)
        else:
            # NOTE: each group steps its caches with the GIL released (serve_chunks), so the
            # groups run in parallel; results do not depend on the grouping (caches are independent).
            futures = [self._executor().submit(serve_chunks, g, nx, *args) for g, nx in jobs[1:]]
            serve_chunks(jobs[0][0], jobs[0][1], *args)
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
        """Finish the hole dumps (rename each from its temporary name); stop the worker threads."""
        self._shutdown()
        for run in self.runs:
            run.close_holes()
        for tmp, final in self._holes:
            os.replace(tmp, final)
        self._holes = []

    def abort(self) -> None:
        self._shutdown()
        for run in self.runs:
            run.close_holes()
        for tmp, _ in self._holes:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        self._holes = []

    def __enter__(self) -> "Simulator":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # ---- live ----

    def serve_live(self, batch: LiveBatch) -> None:
        """Serve ``batch``'s admissions and releases, in order, in every cache (one call each)."""
        n = len(batch.ev)
        if n == 0:
            return
        K = len(self.runs)
        ev = np.array(batch.ev, dtype=np.int64).reshape(n, 5)
        offsets = np.array(batch.offsets, dtype=np.int64)
        ids = np.array(batch.flat, dtype=np.int64)
        ts = np.array(batch.ts, dtype=np.float64)
        if batch.nxt:
            nxt = np.full(len(ids), -1, dtype=np.int64)
            for start, values in batch.nxt:
                nxt[start:start + len(values)] = values
        else:
            if len(self._no_next) < len(ids):
                self._no_next = np.full(max(len(ids), 2 * len(self._no_next)), -1, dtype=np.int64)
            nxt = self._no_next[:len(ids)]
        self._ensure_costs(batch.max_len + 1)
        out_i = np.zeros((n, K, 3), dtype=np.int64)
        out_f = np.zeros((n, K, 3), dtype=np.float64)
        for e, adm in batch.outside:
            out_i[e, :, 0] = adm._i[:, 0]
        live_batch_all(self.runs, ev, offsets, ids, nxt, ts, self._cost_exact, self._cost_int,
                       out_i, out_f, self._n_live)
        self._n_live += len(batch.admissions)
        for e, adm in batch.admissions:
            # NOTE: copies, so an in-flight admission does not keep its whole batch alive
            adm._i = out_i[e].copy()
            adm._f = out_f[e].copy()
        self._report()

    def admit(self, block_ids: Iterable[int], n_match: int | None = None, n_anonymous: int = 0,
              timestamp_s: float = -1.0, next_access: Iterable[int] | None = None) -> Admission:
        """Serve one live request in every cache and keep its blocks pinned until :meth:`release`.

        Statistics (``hits``: gap-spanning, ``prefix_hits``: up to the first miss) cover
        ``block_ids[:n_match]``; every block is allocated and accessed; ``n_anonymous`` slots are
        reserved without a block (vLLM's partial tail block) until release.  Many requests at
        once: :class:`LiveBatch` and :meth:`serve_live` (same results, fewer calls).
        """
        batch = LiveBatch()
        adm = batch.admit(block_ids, n_match, n_anonymous, timestamp_s, next_access)
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
