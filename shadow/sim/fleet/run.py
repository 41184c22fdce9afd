"""The fleet driver: N replicas of every cache behind a router, over one trace.

Each (policy, capacity) cache becomes N replicas of that cache, one per engine; the router picks
each request's replica in arrival order and that replica serves it, exactly as
``shadow simulate`` serves a request (the serve loop, the lookup mode, the timing).  Two ways:

* a router that reads no cache (round_robin, consistent_hash, cache_aware, ...) routes the
  whole trace once; then each replica serves its share through one
  :class:`~shadow.sim.core.simulator.Simulator` holding every cache (serial: ``feed``; a time model:
  ``run_trace_recorded`` with the fleet's times), one pass per replica;
* a router that reads the caches (kv_aware, llm_d, dynamo) decides each request on the caches'
  state at that moment, so every cache is its own fleet of N single-cache simulators, served
  request by request (serial) or event by event in time order (a time model).

Times (``--timing``): serial routes in file order with nothing in flight; ``recorded`` routes
each request at its recorded arrival (a merged recording's ``arrival_time_us``, else its
start), admits it at its recorded start and keeps its recorded completion; ``model`` routes at the
arrival and gives each replica its own service model queue (``ServiceModel``'s rules, per
replica: the concurrency is per engine).  The load a router reads (in flight, waiting, prompt
tokens in prefill, blocks of running requests) comes from those times.

Invariant: with one replica every router sends every request to it, and the fleet's figures are
the single cache's, exactly (tests/sim/fleet/test_one_replica.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.fleet.router import FleetContext, Query, Router, RouterChoice, default_names
from shadow.sim.core.results import CacheSpec, Result
from shadow.sim.core.simulator import policy_notes
from shadow.trace.batch import Batch

#: Block entries per batch when a replica's share is fed to its simulator.
FEED_ENTRIES = 1 << 20

#: The fleet keys a RESULT line gains, in order.
FLEET_KEYS = ("router", "replicas", "replica_hit_min", "replica_hit_max", "req_max",
              "req_imbalance", "prefill_tokens_max", "prefill_imbalance", "peak_running_max",
              "router_index_peak_blocks")


@dataclass
class FleetTrace:
    """A whole trace in memory: records, offsets, block ids, next-access times (the router and
    the per-replica shares need all of it)."""

    rec: np.ndarray
    off: np.ndarray
    ids: np.ndarray
    nxt: np.ndarray
    header: object
    block_size: int

    @property
    def n(self) -> int:
        return int(self.rec.shape[0])


def load_trace(tr) -> FleetTrace:
    """Every batch of the open trace ``tr`` in one set of arrays."""
    recs, offs, ids, nxts = [], [np.zeros(1, dtype=np.int64)], [], []
    base = 0
    for b in tr:
        o = np.asarray(b.offsets, dtype=np.int64)
        recs.append(np.asarray(b.records))
        offs.append(o[1:] + base)
        ids.append(np.asarray(b.block_ids, dtype=np.int64))
        nxts.append(np.asarray(b.next_access, dtype=np.int64))
        base += int(o[-1])
    h = tr.header
    from shadow.trace.format import RECORD_DTYPE
    rec = np.concatenate(recs) if recs else np.zeros(0, dtype=RECORD_DTYPE)
    cat = (lambda a: np.concatenate(a) if a else np.zeros(0, dtype=np.int64))
    return FleetTrace(rec, np.concatenate(offs), cat(ids), cat(nxts), h,
                      int(getattr(h, "block_size_tokens", 0) or 0))


def arrival_seconds(rec: np.ndarray) -> np.ndarray:
    """Arrival per request in seconds: start_time_us, else complete_time_us, else -1."""
    start = rec["start_time_us"].astype(np.float64)
    done = rec["complete_time_us"].astype(np.float64)
    ts = np.where(start >= 0, start, done) / 1e6
    ts[(start < 0) & (done < 0)] = -1.0
    return ts


def prompt_blocks(ft: FleetTrace) -> np.ndarray:
    """How many leading blocks of each request are its prompt's full blocks (what a router
    hashes): ``input_length // B`` where both are known, else every block."""
    nb = np.diff(ft.off)
    inp = ft.rec["input_length"].astype(np.int64)
    if ft.block_size <= 0:
        return nb
    return np.where(inp > 0, np.minimum(nb, inp // ft.block_size), nb)


# ---- times and load -------------------------------------------------------------------------


class Load:
    """The fleet's load signals at the current decision time (the :class:`FleetView` a router
    reads, less the caches).  Every routed request adds to its replica's counters and takes
    them back at its start, prefill end and completion (events applied up to the time asked;
    a completion at t is done before a decision at t, as releases come first in time order)."""

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._in_flight = [0] * replicas
        self._waiting = [0] * replicas
        self._prefill = [0] * replicas
        self._decode = [0] * replicas
        self._running = [0] * replicas
        self.peak_running = [0] * replicas
        self._events: list[tuple[int, int, int, int, int]] = []   # (us, order, kind, r, amount)
        self._seq = 0

    def _at(self, t_us: int, kind: int, r: int, amount: int) -> None:
        # NOTE: kind orders equal times: completions (0) before starts (1) before prefill ends (2)
        heapq.heappush(self._events, (t_us, kind, self._seq, r, amount))
        self._seq += 1

    def advance(self, t_us: int) -> None:
        ev = self._events
        while ev and ev[0][0] <= t_us:
            _, kind, _, r, amount = heapq.heappop(ev)
            if kind == 0:
                self._in_flight[r] -= 1
                self._running[r] -= 1
                self._decode[r] -= amount
            elif kind == 1:
                self._waiting[r] -= 1
                self._running[r] += 1
                if self._running[r] > self.peak_running[r]:
                    self.peak_running[r] = self._running[r]
            else:
                self._prefill[r] -= amount

    def routed(self, r: int, start_us: int, prefill_end_us: int, done_us: int, tokens: int,
               blocks: int) -> None:
        """A request went to ``r``: waiting until ``start_us``, in prefill until
        ``prefill_end_us``, in flight until ``done_us``."""
        self._in_flight[r] += 1
        self._waiting[r] += 1
        self._prefill[r] += tokens
        self._decode[r] += blocks
        self._at(start_us, 1, r, 0)
        self._at(prefill_end_us, 2, r, tokens)
        self._at(done_us, 0, r, blocks)

    def in_flight(self, r: int) -> int:
        return self._in_flight[r]

    def waiting(self, r: int) -> int:
        return self._waiting[r]

    def prefill_tokens(self, r: int) -> int:
        return self._prefill[r]

    def decode_blocks(self, r: int) -> int:
        return self._decode[r]


class Schedule:
    """Start, prefill end and completion of each request on its replica (microseconds)."""

    def __init__(self, timing: str, service, ft: FleetTrace, replicas: int, path: str,
                 router: str) -> None:
        self.timing = timing
        self.service = service
        n = ft.n
        rec = ft.rec
        self.start = np.zeros(n, dtype=np.int64)
        self.done = np.zeros(n, dtype=np.int64)
        self.prefill_end = np.zeros(n, dtype=np.int64)
        if timing == "serial":
            # NOTE: one request at a time in file order (2i, 2i + 1: SerialOrder's clock): each
            # is complete before the next is routed, so nothing is ever in flight at a decision
            self.order = np.arange(n, dtype=np.int64)
            self.route_us = 2 * self.order
        elif timing == "recorded":
            start = rec["start_time_us"].astype(np.int64)
            done = rec["complete_time_us"].astype(np.int64)
            bad = np.flatnonzero((start < 0) | (done < start))
            if bad.shape[0]:
                r = int(bad[0])
                raise ShadowError(f"{path}: request {r} has start time {int(start[r])} us and "
                                  f"completion time {int(done[r])} us: --timing recorded needs "
                                  f"both (router {router})")
            self.start[:], self.done[:], self.prefill_end[:] = start, done, start
            # NOTE: a router decides when a request arrives, before the engine queues and admits
            # it: a merged recording's arrival_time_us (lcp v2), where known and not after the
            # admission; else the admission (a v1 trace's start is its arrival)
            arr = rec["arrival_time_us"].astype(np.int64)
            self.route_us = np.where((arr >= 0) & (arr <= start), arr, start)
            self.order = np.argsort(self.route_us, kind="stable")
        else:
            arr = np.where(rec["start_time_us"] >= 0, rec["start_time_us"],
                           rec["complete_time_us"]).astype(np.int64)
            bad = np.flatnonzero(arr < 0)
            if bad.shape[0]:
                raise ShadowError(f"{path}: request {int(bad[0])} has no arrival time (start "
                                  f"and completion time unknown): --timing model needs one "
                                  f"(router {router})")
            self.order = np.argsort(arr, kind="stable")
            self.route_us = arr
            self._dur = service.durations_us(rec["input_length"], rec["output_length"])
            L = rec["input_length"].astype(np.float64)
            self._prefill_us = (service.a + L / service.prefill + service.d * L * L / 2) * 1e6
            self._running: list[list[int]] = [[] for _ in range(replicas)]

    def place(self, i: int, r: int) -> None:
        """Request ``i`` goes to replica ``r``: its start and completion there (model: that
        replica's first-come first-served queue, ``ServiceModel.schedule``'s rule)."""
        if self.timing == "serial":
            self.start[i] = self.prefill_end[i] = 2 * i
            self.done[i] = 2 * i + 1
        elif self.timing == "model":
            run = self._running[r]
            t = int(self.route_us[i])
            if len(run) >= self.service.concurrency:
                t = max(t, heapq.heappop(run))
            end = t + int(round(float(self._dur[i])))
            heapq.heappush(run, end)
            self.start[i] = t
            self.done[i] = end
            self.prefill_end[i] = min(t + int(round(float(self._prefill_us[i]))), end)


# ---- results --------------------------------------------------------------------------------


def sum_results(parts: list[Result], error_names: list[str]) -> Result:
    """The fleet's totals of one cache: counts and costs summed over the replicas (in replica
    order, from the first one's values, so one replica gives its own figures exactly), the
    longest hole the longest of any, the first error named by its replica."""
    first = parts[0]
    tot = Result(**{f: getattr(first, f) for f in first.__dataclass_fields__})
    for p in parts[1:]:
        for f in ("n_req", "n_req_skipped", "n_blocks", "n_hits", "n_prefix_hits", "total_cost",
                  "saved_cost", "prefix_saved_cost", "n_eviction", "n_self_eviction",
                  "n_unexpected_eviction", "n_holes", "hole_len_sum"):
            setattr(tot, f, getattr(tot, f) + getattr(p, f))
        tot.max_hole_len = max(tot.max_hole_len, p.max_hole_len)
    errors = [f"replica {name}: {p.error}" for p, name in zip(parts, error_names) if p.error]
    tot.error = errors[0] if len(parts) > 1 and errors else first.error
    return tot


@dataclass
class FleetResult:
    """One cache's fleet: its totals, each replica's figures and the router's."""

    total: Result
    replicas: list[Result]
    router: str
    requests: list[int]
    prefill_tokens: list[int]
    peak_running: list[int]
    index_peak: int
    names: list[str] = field(default_factory=list)
    #: what the replicas' policies said the trace lacked (``trace_notes``), each line once
    notes: list[str] = field(default_factory=list)
    #: each request's replica (file order), when the trace was routed whole (a loaded
    #: :class:`FleetTrace`, or a router that reads the caches); None when it was streamed
    assign: np.ndarray | None = None

    @property
    def spec(self) -> CacheSpec:
        return self.total.spec

    @property
    def error(self) -> str | None:
        return self.total.error

    def fields(self) -> dict[str, object]:
        n = len(self.replicas)
        hits = [r.block_hit_ratio for r in self.replicas]
        mean_req = sum(self.requests) / n
        mean_pt = sum(self.prefill_tokens) / n
        return {
            "router": self.router,
            "replicas": n,
            "replica_hit_min": f"{min(hits):.6f}",
            "replica_hit_max": f"{max(hits):.6f}",
            "req_max": max(self.requests),
            "req_imbalance": f"{max(self.requests) / mean_req if mean_req else 0.0:.4f}",
            "prefill_tokens_max": max(self.prefill_tokens),
            "prefill_imbalance": f"{max(self.prefill_tokens) / mean_pt if mean_pt else 0.0:.4f}",
            "peak_running_max": max(self.peak_running),
            "router_index_peak_blocks": self.index_peak,
        }

    def suffix(self) -> str:
        f = self.fields()
        return " ".join(f"{k}={f[k]}" for k in FLEET_KEYS)

    def result_line(self) -> str:
        """Today's RESULT line of the fleet's totals, then the fleet keys."""
        return f"{self.total.result_line()} {self.suffix()}"


# ---- the driver -----------------------------------------------------------------------------


@dataclass
class FleetSetup:
    """How every replica's simulator is built (``Simulator``'s keyword arguments, less the
    caches) and what the run is."""

    sim_kwargs: dict
    timing: str = "serial"
    service: object = None
    path: str = ""
    names: list[str] | None = None


def _check_records(choice: RouterChoice, router: Router, setup: FleetSetup, rec: np.ndarray,
                   first: int) -> None:
    """What the router needs of the requests ``rec`` (file indices from ``first``): a time on
    each, for a router that keeps a clock (the header cannot say whether every request has
    one; the run's own checks are :class:`shadow.sim.run.RunSpec`'s)."""
    why = router.needs_clock()
    if why and rec.shape[0]:
        bad = np.flatnonzero(arrival_seconds(rec) < 0)
        if bad.shape[0]:
            raise ShadowError(f"{setup.path}: request {first + int(bad[0])} has no time, and "
                              f"router {choice.label} needs one: {why}")
    # NOTE: lcp v2's replica_id is 1-based (0: none); a merged recording names every request's
    if choice.name == "recorded" and rec.shape[0] and int(rec["replica_id"].min()) < 1:
        raise ShadowError(f"{setup.path}: router recorded needs a merged recording (the replica "
                          f"of each request), which this trace is not")


def streams(choice: RouterChoice, timing: str) -> bool:
    """Whether a fleet behind ``choice`` streams the trace batch by batch (a router that reads no
    cache, serial timing) rather than loading it whole."""
    return timing == "serial" and not choice.spec.reads_caches


def run_fleet(specs: list[CacheSpec], tr, replicas: int, choice: RouterChoice,
              setup: FleetSetup, progress: Callable[[int, int], None] | None = None
              ) -> list[FleetResult]:
    """Every cache of ``specs`` as a fleet of ``replicas`` behind ``choice``; one
    :class:`FleetResult` per cache, in ``specs`` order.  ``tr`` is an open trace, or a
    :class:`FleetTrace` already loaded.  A router that reads no cache, under serial timing,
    streams the trace batch by batch; anything else loads it whole first.

    The run's settings are checked by :class:`shadow.sim.run.RunSpec` (its ``_check_fleet`` and
    ``bind``); :func:`shadow.sim.run.run` is the entry that makes them, this driver only refuses
    what a request lacks (a time, a recorded replica)."""
    names = list(setup.names) if setup.names else default_names(replicas)
    header = tr.header
    block_size = int(getattr(header, "block_size_tokens", 0) or 0)
    ctx = FleetContext(tuple(names), block_size)
    probe = choice.make(replicas, ctx)
    if streams(choice, setup.timing) and not isinstance(tr, FleetTrace):
        return _run_stream(specs, tr, replicas, choice, probe, setup, names, progress)
    ft = tr if isinstance(tr, FleetTrace) else load_trace(tr)
    _check_records(choice, probe, setup, ft.rec, 0)
    if choice.spec.reads_caches:
        out = []
        for k, spec in enumerate(specs):
            router = probe if k == 0 else choice.make(replicas, ctx)
            out.append(_run_reading(spec, ft, replicas, choice, router, setup, names))
        return out
    return _run_blind(specs, ft, replicas, choice, probe, setup, names, progress)


def _query(ft: FleetTrace, i: int, pb: np.ndarray, ts: np.ndarray) -> Query:
    a = int(ft.off[i])
    return _query_of(ft.rec[i], ft.ids[a:a + int(pb[i])], i, float(ts[i]))


def _query_of(rec, blocks: np.ndarray, index: int, t: float) -> Query:
    user = int(rec["user_id"])
    rep = int(rec["replica_id"]) - 1   # NOTE: lcp v2 replica_id is 1-based, 0 none
    return Query(index, blocks, int(rec["input_length"]), int(rec["output_length"]),
                 int(rec["session_id"]), user if user > 0 else -1, t, rep)


def _shares(ft: FleetTrace, assign: np.ndarray, replicas: int) -> list[np.ndarray]:
    return [np.flatnonzero(assign == r) for r in range(replicas)]


def _sub(ft: FleetTrace, idx: np.ndarray, keep_next: bool) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray, np.ndarray]:
    """The records, offsets, ids and next-access times of requests ``idx`` (in that order)."""
    lens = np.diff(ft.off)[idx]
    off = np.zeros(idx.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    total = int(off[-1])
    # NOTE: each entry's source position: its request's start plus its place in the request
    src = np.repeat(ft.off[:-1][idx] - off[:-1], lens) + np.arange(total, dtype=np.int64)
    nxt = ft.nxt[src] if keep_next else np.full(total, -1, dtype=np.int64)
    return ft.rec[idx], off, ft.ids[src], nxt


class _Slices:
    """A replica's share as a trace (a header and batches of about :data:`FEED_ENTRIES`)."""

    def __init__(self, header, rec, off, ids, nxt) -> None:
        self.header = header
        self.parts = (rec, off, ids, nxt)

    def __iter__(self):
        rec, off, ids, nxt = self.parts
        n = rec.shape[0]
        i = 0
        while i < n:
            j = int(np.searchsorted(off, off[i] + FEED_ENTRIES, side="right")) - 1
            j = min(max(j, i + 1), n)
            a, b = int(off[i]), int(off[j])
            yield Batch(rec[i:j], off[i:j + 1] - a, ids[a:b], nxt[a:b], first_request=i,
                        first_vtime=a + 1)
            i = j


def _prefill_tokens(ft: FleetTrace) -> np.ndarray:
    inp = ft.rec["input_length"].astype(np.int64)
    return np.where(inp > 0, inp, np.diff(ft.off) * max(ft.block_size, 1))


def _route_blind(ft: FleetTrace, router: Router, sched: "Schedule", load: Load,
                 tokens: np.ndarray) -> tuple[np.ndarray, int]:
    """Each request's replica (file order) and the router index's peak, in arrival order."""
    pb = prompt_blocks(ft)
    # NOTE: a query's time is when it is routed (a clock for eviction and session ttls)
    ts = arrival_seconds(ft.rec) if sched.timing == "serial" else sched.route_us / 1e6
    assign = np.zeros(ft.n, dtype=np.int64)
    view = _BlindView(load)
    index_peak = 0
    order = sched.order
    ahead = router.route_all(ft.n)
    if ahead is not None:
        assign[order] = ahead
    if sched.timing == "serial":
        # NOTE: one request at a time: each is complete before the next is routed, so the load
        # a router reads is always none and there is no schedule to keep (peak running 1)
        load.peak_running = [int(c > 0) for c in np.bincount(assign, minlength=load.replicas)]
        if ahead is not None:
            return assign, 0
        for i in range(ft.n):
            assign[i] = router.route(_query(ft, i, pb, ts), view)
            size = router.index_size(view)
            if size > index_peak:
                index_peak = size
        load.peak_running = [int(c > 0) for c in np.bincount(assign, minlength=load.replicas)]
        return assign, index_peak
    for k, i in enumerate(order.tolist()):
        load.advance(int(sched.route_us[i]))
        r = int(ahead[k]) if ahead is not None else router.route(_query(ft, i, pb, ts), view)
        assign[i] = r
        sched.place(i, r)
        load.routed(r, int(sched.start[i]), int(sched.prefill_end[i]), int(sched.done[i]),
                    int(tokens[i]), int(pb[i]))
        size = router.index_size(view)
        if size > index_peak:
            index_peak = size
    load.advance(np.iinfo(np.int64).max)
    return assign, index_peak


def _run_stream(specs, tr, replicas, choice, router, setup, names, progress
                ) -> list[FleetResult]:
    """Serial timing, a router that reads no cache: each decoded batch is routed (file order)
    and each replica's part of it fed to that replica's simulator, as ``run_trace`` feeds one."""
    from shadow.sim.core.oracle import attach_next_access
    from shadow.sim.core.simulator import Simulator, prefetched

    sims = [Simulator(specs, **setup.sim_kwargs) for _ in range(replicas)]
    view = _BlindView(Load(replicas))
    reqs = [0] * replicas
    toks = [0] * replicas
    index_peak = 0
    fed = [0, 0]
    try:
        if replicas == 1 and sims[0].needs_next_access:
            attach_next_access(sims[0], tr)
        B = int(getattr(tr.header, "block_size_tokens", 0) or 0)
        for batch in prefetched(tr):
            rec = batch.records
            n = int(rec.shape[0])
            first = int(batch.first_request)
            _check_records(choice, router, setup, rec, first)
            off = np.asarray(batch.offsets, dtype=np.int64)
            assign = router.route_all(n)
            if assign is None:
                nb = np.diff(off)
                inp = rec["input_length"].astype(np.int64)
                pb = nb if B <= 0 else np.where(inp > 0, np.minimum(nb, inp // B), nb)
                ts = arrival_seconds(rec)
                ids = np.asarray(batch.block_ids)
                assign = np.empty(n, dtype=np.int64)
                for i in range(n):
                    a = int(off[i])
                    assign[i] = router.route(_query_of(rec[i], ids[a:a + int(pb[i])], first + i,
                                                       float(ts[i])), view)
                    size = router.index_size(view)
                    if size > index_peak:
                        index_peak = size
            inp = rec["input_length"].astype(np.int64)
            tk = np.where(inp > 0, inp, np.diff(off) * max(B, 1))
            if replicas == 1:
                sims[0].feed(batch)
                reqs[0] += n
                toks[0] += int(tk.sum())
            else:
                for r, part, idx in _parts(batch, off, assign, replicas):
                    sims[r].feed(part)
                    reqs[r] += part.n_requests
                    toks[r] += int(tk[idx].sum())
            fed[0] += int(off[-1])
            fed[1] += n
            if progress is not None:
                progress(fed[0], fed[1])
    except BaseException:
        for s in sims:
            s.abort()
        raise
    for s in sims:
        s.close()
    per_replica = [s.results() for s in sims]
    peak = [int(c > 0) for c in reqs]
    notes = policy_notes(sims)
    out = []
    for k, _ in enumerate(specs):
        parts = [per_replica[r][k] for r in range(replicas)]
        out.append(FleetResult(sum_results(parts, names), parts, choice.label, reqs, toks, peak,
                               index_peak, names, notes))
    return out


def _parts(batch: Batch, off: np.ndarray, assign: np.ndarray, replicas: int):
    """Each replica's requests of ``batch`` as a batch of their own: (replica, batch, the
    requests' indices in ``batch``), replicas with none left out.

    NOTE: one counting pass (:func:`shadow.sim.fleet._split.split`) lays every replica's ids
    side by side; their next-access times are not gathered (no oracle runs in a fleet of
    several), each part gets -1 throughout."""
    from shadow.sim.fleet._split import split
    n = off.shape[0] - 1
    order = np.empty(n, dtype=np.int64)
    req_ends = np.empty(replicas, dtype=np.int64)
    ids = np.empty(int(off[-1]), dtype=np.int64)
    ent_ends = np.empty(replicas, dtype=np.int64)
    split(off, np.ascontiguousarray(batch.block_ids, dtype=np.int64),
          np.ascontiguousarray(assign, dtype=np.int64), replicas, order, req_ends, ids, ent_ends)
    lens = np.diff(off)
    none = np.full(ids.shape[0], -1, dtype=np.int64)
    r0 = e0 = 0
    for r in range(replicas):
        r1, e1 = int(req_ends[r]), int(ent_ends[r])
        if r1 > r0:
            idx = order[r0:r1]
            sub = np.zeros(r1 - r0 + 1, dtype=np.int64)
            np.cumsum(lens[idx], out=sub[1:])
            yield r, Batch(batch.records[idx], sub, ids[e0:e1], none[:e1 - e0],
                           first_request=int(batch.first_request) + int(idx[0])), idx
        r0, e0 = r1, e1


def _run_blind(specs, ft, replicas, choice, router, setup, names, progress) -> list[FleetResult]:
    """A router that reads no cache: route once, then each replica serves its share."""
    from shadow.sim.core.simulator import run_trace
    from shadow.sim.core.simulator import Simulator
    from shadow.sim.timing.run import FIELDS, CTX_FIELDS, run_trace_recorded

    sched = Schedule(setup.timing, setup.service, ft, replicas, setup.path, choice.label)
    load = Load(replicas)
    tokens = _prefill_tokens(ft)
    assign, index_peak = _route_blind(ft, router, sched, load, tokens)
    shares = _shares(ft, assign, replicas)
    per_replica: list[list[Result]] = []
    notes: list[str] = []
    fed = [0, 0]
    for idx in shares:
        sim = Simulator(specs, **setup.sim_kwargs)
        rec, off, ids, nxt = _sub(ft, idx, replicas == 1)
        if idx.shape[0] == 0:
            sim.close()
        elif setup.timing == "serial":
            run_trace(sim, _Slices(ft.header, rec, off, ids, nxt), setup.path)
        else:
            cols = {f: rec[f].astype(np.int64) for f in FIELDS + CTX_FIELDS}
            cols["start_time_us"] = sched.start[idx]
            cols["complete_time_us"] = sched.done[idx]
            run_trace_recorded(sim, (cols, off, ids), setup.path, ft.block_size)
        per_replica.append(sim.results())
        for line in policy_notes([sim]):
            if line not in notes:
                notes.append(line)
        fed[0] += int(off[-1])
        fed[1] += int(idx.shape[0])
        if progress is not None:
            progress(fed[0], fed[1])
    out = []
    reqs = [int(s.shape[0]) for s in shares]
    ptoks = [int(tokens[s].sum()) for s in shares]
    for k, _ in enumerate(specs):
        parts = [per_replica[r][k] for r in range(replicas)]
        out.append(FleetResult(sum_results(parts, names), parts, choice.label, reqs, ptoks,
                               list(load.peak_running), index_peak, names, notes, assign))
    return out


class _BlindView:
    """The load signals alone (a router that reads no cache)."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.replicas = load.replicas
        self.in_flight = load.in_flight
        self.waiting = load.waiting
        self.prefill_tokens = load.prefill_tokens
        self.decode_blocks = load.decode_blocks

    def kv_usage(self, r: int) -> float:
        return 0.0


class _CacheView(_BlindView):
    """The load signals and the replicas' caches (one cache's fleet)."""

    def __init__(self, load: Load, sims: list) -> None:
        super().__init__(load)
        from shadow.sim.fleet._probe import prefix_lengths, resident_mask
        self._prefix_lengths = prefix_lengths
        self._resident_mask = resident_mask
        self.runs = [s.runs[0] for s in sims]
        self.policies = [r.policy for r in self.runs]
        self._out = np.zeros(len(sims), dtype=np.int64)

    def prefix(self, q: Query) -> np.ndarray:
        ids = np.ascontiguousarray(q.blocks, dtype=np.int64)
        self._prefix_lengths(self.policies, ids, self._out)
        return self._out.copy()

    def resident(self, r: int, block: int) -> bool:
        return self.runs[r].holds(int(block))

    def resident_mask(self, r: int, blocks: np.ndarray) -> np.ndarray:
        ids = np.ascontiguousarray(blocks, dtype=np.int64)
        out = np.zeros(ids.shape[0], dtype=np.uint8)
        self._resident_mask(self.policies[r], ids, out)
        return out

    def resident_blocks(self) -> int:
        return sum(p.n_resident for p in self.policies)

    def kv_usage(self, r: int) -> float:
        p = self.policies[r]
        return p.n_pinned / p.capacity if p.capacity else 0.0


def _run_reading(spec: CacheSpec, ft: FleetTrace, replicas: int, choice: RouterChoice,
                 router: Router, setup: FleetSetup, names: list[str]) -> FleetResult:
    """A router that reads the caches: one fleet of single-cache simulators for ``spec``."""
    from shadow.sim.core.simulator import Simulator

    if replicas == 1:
        ft = _oracle_times(ft, spec)

    sims = [Simulator([spec], **setup.sim_kwargs) for _ in range(replicas)]
    try:
        sched = Schedule(setup.timing, setup.service, ft, replicas, setup.path, choice.label)
        load = Load(replicas)
        view = _CacheView(load, sims)
        if setup.timing == "serial":
            assign, index_peak = _serve_serial(ft, sims, router, view, sched, load)
        else:
            assign, index_peak = _serve_timed(ft, sims, router, view, sched, load, setup)
    except BaseException:
        for s in sims:
            s.abort()
        raise
    for s in sims:
        s.close()
    parts = [s.results()[0] for s in sims]
    tokens = _prefill_tokens(ft)
    shares = _shares(ft, assign, replicas)
    return FleetResult(sum_results(parts, names), parts, choice.label,
                       [int(s.shape[0]) for s in shares], [int(tokens[s].sum()) for s in shares],
                       list(load.peak_running), index_peak, names, policy_notes(sims),
                       assign)


def _oracle_times(ft: FleetTrace, spec: CacheSpec) -> FleetTrace:
    """``ft`` with the next-access times an oracle ``spec`` reads as ``shadow simulate`` gives
    them (:func:`shadow.sim.core.oracle.attach_next_access`: recomputed without the requests
    its capacity skips), so one replica gives the single cache's figures; ``ft`` itself for any
    other policy or when the cache skips nothing.  (An oracle runs in a fleet of one only.)"""
    from shadow.sim.core.oracle import recompute_next_access
    from shadow.sim.registry import policy_info

    if not policy_info(spec.policy).needs_next_access or ft.n == 0:
        return ft
    src = recompute_next_access([Batch(ft.rec, ft.off, ft.ids, ft.nxt)], [spec.capacity],
                                n_entries=int(ft.off[-1]))
    try:
        nxt = src.array(spec.capacity)
    finally:
        src.close()
    return ft if nxt is None else FleetTrace(ft.rec, ft.off, ft.ids, nxt, ft.header,
                                             ft.block_size)


def _request_arrays(sim, ft: FleetTrace):
    """What ``Simulator.feed`` derives per request, for the whole trace: arrival seconds, looked-up
    blocks, anonymous slots, info rows (None where the run needs none)."""
    from shadow.sim.category import request_info
    from shadow.sim.engine.rules import lookup_counts, vllm_anonymous_counts

    lens = np.diff(ft.off)
    ts = np.ascontiguousarray(arrival_seconds(ft.rec), dtype=np.float64)
    nm = (None if sim.lookup == "all" else
          np.ascontiguousarray(lookup_counts(ft.rec, lens, sim.lookup, sim.block_size_tokens),
                               dtype=np.int64))
    na = (np.ascontiguousarray(vllm_anonymous_counts(ft.rec, lens, sim.block_size_tokens),
                               dtype=np.int64) if sim.lookup == "vllm" else None)
    info = (np.ascontiguousarray(request_info(ft.rec, sim.category), dtype=np.int64)
            if sim.wants_request_ctx else None)
    return ts, nm, na, info


def _serve_serial(ft, sims, router, view, sched, load) -> tuple[np.ndarray, int]:
    """Route and serve each request in file order, whole (``Simulator.feed``'s rules).

    kv_aware without lag runs through the compiled loop (:mod:`shadow.sim.fleet._serial`)
    while its index is exactly the resident sets, and through its router object one request at
    a time while a speculation is alive (the reference path, tested equal)."""
    from shadow.sim.fleet._probe import resident_mask
    from shadow.sim.fleet.kv_aware import KvAware

    pb = np.ascontiguousarray(prompt_blocks(ft), dtype=np.int64)
    ts, nm, na, info = _request_arrays(sims[0], ft)
    lens = np.diff(ft.off)
    longest = int(lens.max()) if lens.shape[0] else 0
    extra = int(na.max()) if na is not None and na.shape[0] else 0
    for s in sims:
        s._ensure_costs(longest + extra + 1)
        s.runs[0].reserve(longest + extra + 1)
    one = np.zeros(2, dtype=np.int64)
    mask = np.zeros(max(longest, 1), dtype=np.uint8)
    assign = np.zeros(ft.n, dtype=np.int64)
    index_peak = 0
    fast = (type(router) is KvAware and router.index.lag <= 0 and not _REFERENCE_ONLY)
    peak = np.zeros(2, dtype=np.int64)
    runs = [s.runs[0] for s in sims]
    i = 0
    while i < ft.n:
        if fast and router.index.simple():
            from shadow.sim.fleet._serial import kv_serial
            cexact, cint = sims[0]._cost_exact, sims[0]._cost_int
            j = kv_serial(runs, ft.off, ft.ids, ft.nxt, pb, ts, cexact, cint, nm, na, info, i,
                          router.index.speculative, assign, peak)
            index_peak = max(index_peak, int(peak[0]))
            if peak[1] >= 0:
                a = int(ft.off[j - 1])
                blocks = ft.ids[a + int(peak[1]):a + int(pb[j - 1])]
                router.index.speculate(int(assign[j - 1]), blocks, float(ts[j - 1]))
                router.index.stored(int(assign[j - 1]), blocks[:0], float(ts[j - 1]), view)
            i = j
            continue
        a, b = int(ft.off[i]), int(ft.off[i + 1])
        r = router.route(_query(ft, i, pb, ts), view)
        assign[i] = r
        router.placed(r, -1)
        run = runs[r]
        ids = ft.ids[a:b]
        wants = router.wants_stores()
        if wants:
            resident_mask(run.policy, ids, mask)
        one[1] = b - a
        # NOTE: the one request as a batch of its own (Simulator.feed's arguments, sliced);
        # next-access times are read by oracles alone, which run with one replica only
        run.serve_batch(one, ids, ft.nxt[a:b], ts[i:i + 1], sims[r]._cost_exact,
                        sims[r]._cost_int, i, None if nm is None else nm[i:i + 1],
                        None if na is None else na[i:i + 1],
                        None if info is None else info[i:i + 1])
        if wants:
            router.stored(r, _newly_held(run.policy, ids, mask), float(ts[i]), view)
        index_peak = max(index_peak, router.index_size(view))
        i += 1
    load.peak_running = [int(c > 0) for c in np.bincount(assign, minlength=len(sims))]
    for s in sims:
        s._report()
    return assign, index_peak


def _newly_held(policy, ids: np.ndarray, before: np.ndarray) -> np.ndarray:
    """The ``ids`` that ``policy`` holds now and did not before (``before``: their residency
    then, from ``resident_mask``): what the replica stored, as its KV events report it."""
    from shadow.sim.fleet._probe import resident_mask
    k = ids.shape[0]
    was = before[:k].copy()
    resident_mask(policy, ids, before)
    return ids[(was == 0) & (before[:k] == 1)]


#: Serve kv_aware's serial fleets through the reference path only (tests compare the two).
_REFERENCE_ONLY = False


def _serve_timed(ft, sims, router, view, sched, load, setup) -> tuple[np.ndarray, int]:
    """Route each request at its time and serve admissions and releases in time order through
    each replica's live path (``run_trace_recorded``'s rules, one event at a time)."""
    from shadow.sim.category import request_info
    from shadow.sim.fleet._probe import resident_mask
    from shadow.sim.live.batch import LiveBatch
    from shadow.sim.live.wire import INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT
    from shadow.sim.timing.run import live_counts

    B = ft.block_size
    n = ft.n
    pb = prompt_blocks(ft)
    ts = arrival_seconds(ft.rec)
    cols = {f: ft.rec[f].astype(np.int64) for f in ("input_length", "output_length")}
    n_prompt, n_match, n_anon, n_rel, n_final = live_counts(cols, ft.off, B)
    info = request_info(ft.rec, sims[0].category) if sims[0].wants_request_ctx else None
    tokens = _prefill_tokens(ft)
    longest = int(np.diff(ft.off).max()) if n else 0
    mask = np.zeros(max(longest, 1), dtype=np.uint8)
    assign = np.full(n, -1, dtype=np.int64)
    adm = [None] * n
    index_peak = 0
    # events: (time us, kind, file index): kind 0 release, 1 route, 2 admission, 3 the release
    # of a request that started as it finished (after its own admission)
    heap = [(int(sched.route_us[i]), 1, i) for i in range(n)]
    heapq.heapify(heap)
    while heap:
        t_us, kind, i = heapq.heappop(heap)
        a = int(ft.off[i])
        if kind == 1:
            load.advance(t_us)
            q = _query(ft, i, pb, ts)
            q.t = t_us / 1e6
            r = router.route(q, view)
            assign[i] = r
            sched.place(i, r)
            router.placed(r, int(sched.prefill_end[i]))
            load.routed(r, int(sched.start[i]), int(sched.prefill_end[i]),
                        int(sched.done[i]), int(tokens[i]), int(pb[i]))
            heapq.heappush(heap, (int(sched.start[i]), 2, i))
            same = sched.done[i] == sched.start[i]
            heapq.heappush(heap, (int(sched.done[i]), 3 if same else 0, i))
            continue
        r = int(assign[i])
        sim = sims[r]
        batch = LiveBatch()
        wants = router.wants_stores()
        if kind == 2:
            ids = ft.ids[a:a + int(n_prompt[i])]
            if wants:
                resident_mask(sim.runs[0].policy, ids, mask)
            cat, sess, nxt = ((int(info[i, INFO_CATEGORY]), int(info[i, INFO_SESSION]),
                               int(info[i, INFO_SESSION_NEXT])) if info is not None
                              else (0, -1, -1))
            adm[i] = batch.admit(ids.tolist(), int(n_match[i]), int(n_anon[i]),
                                 int(sched.start[i]) / 1e6, None, cat, sess, nxt)
            sim.serve_live(batch)
            if wants:
                router.stored(r, _newly_held(sim.runs[0].policy, ids, mask), t_us / 1e6, view)
        else:
            ids = ft.ids[a + int(n_prompt[i]):a + int(n_rel[i])]
            if wants:
                resident_mask(sim.runs[0].policy, ids, mask)
            batch.release(adm[i], ids.tolist(), int(n_final[i]))
            sim.serve_live(batch)
            adm[i] = None
            if wants:
                router.stored(r, _newly_held(sim.runs[0].policy, ids, mask), t_us / 1e6, view)
        size = router.index_size(view)
        if size > index_peak:
            index_peak = size
    load.advance(np.iinfo(np.int64).max)
    return assign, index_peak



def replica_names(header, replicas: int) -> list[str]:
    """The replicas' names: a merged recording's (``header.replica_names``) when it names as
    many replicas as the fleet has, else ``r0`` .. ``r{N-1}``."""
    names = list(getattr(header, "replica_names", None) or ())
    return names if len(names) == replicas else default_names(replicas)


def run_routers(spec, tr, progress: Callable[[int, int], None] | None = None
                ) -> list[FleetResult]:
    """Every router of the bound run ``spec`` (:class:`shadow.sim.run.RunSpec`) over the open
    trace ``tr``: one :class:`FleetResult` per (router, cache), routers outer, caches in
    ``spec.caches`` order.  A router that streams reads ``tr`` again; the others share one
    loaded copy.  ``progress(accesses, requests)`` counts on over the routers."""
    names = replica_names(tr.header, spec.replicas)
    setup = FleetSetup(spec.simulator_kwargs(), timing=spec.timing, service=spec.service,
                       path=str(tr.path), names=names)
    loaded: FleetTrace | None = None
    done = [0, 0]
    out: list[FleetResult] = []
    for choice in spec.router_choices:
        base = tuple(done)

        def step(accesses: int, requests: int, base=base) -> None:
            done[0], done[1] = base[0] + accesses, base[1] + requests
            progress(done[0], done[1])

        if streams(choice, spec.timing):
            src = tr
        else:
            loaded = loaded if loaded is not None else load_trace(tr)
            src = loaded
        out.extend(run_fleet(list(spec.caches), src, spec.replicas, choice, setup,
                             step if progress is not None else None))
        if loaded is not None and src is loaded:
            # NOTE: a loaded run reports as it goes only where each replica serves its share
            # (blind routers); the count moves on by the whole trace either way
            done[0], done[1] = base[0] + int(loaded.off[-1]), base[1] + loaded.n
            if progress is not None:
                progress(done[0], done[1])
    return out
