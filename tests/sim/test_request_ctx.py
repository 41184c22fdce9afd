"""The request-context hook (``set_request_ctx``, core/policy.pxd ``ArrivalCtx``): called once per
request that passes the skip check, before its match and allocation, with the request's arrival
seconds, category, session and block count, in every path (offline ranges, live admissions, the
recorded timing, the reference loop); only for a policy that sets ``wants_request_ctx``.

The Cython side is checked with ``shadow.sim.core.ctxlog.CtxLog`` (LRU that records what it gets),
the reference side with the reference LRU plus ``WANTS_REQUEST_CTX`` and a record of its own.
"""

from __future__ import annotations

import numpy as np
import pytest

import shadow.sim.core.simulator as simulator_mod
from shadow.sim import CacheSpec, Simulator
from shadow.sim.category import fold
from shadow.sim.core.ctxlog import CtxLog
from shadow.sim.live.batch import LiveBatch
from shadow.sim.live.wire import INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT, INFO_WIDTH
from shadow.sim.core.loop import CacheRun
from shadow.sim.reference import lru as ref_lru
from shadow.sim.reference.loop import RefCache
from shadow.sim.timing.run import run_trace_recorded
from shadow.trace import Batch
from shadow.trace.format import RECORD_DTYPE
from tests.sim._traces import random_trace

ARRIVE = "set_request_ctx"


def _records(requests: list[list[int]], seed: int = 0) -> np.ndarray:
    """Records with arrival times (fractional seconds), types, turns and sessions."""
    rng = np.random.default_rng(seed)
    n = len(requests)
    rec = np.zeros(n, dtype=RECORD_DTYPE)
    for f in ("chat_id", "parent_chat_id"):
        rec[f] = -1
    start = np.cumsum(rng.integers(1, 2_000_000, n))        # microseconds, increasing
    rec["start_time_us"] = start
    rec["complete_time_us"] = start + rng.integers(1, 3_000_000, n)
    rec["type_id"] = rng.integers(0, 3, n)
    rec["turn"] = rng.integers(0, 4, n)
    rec["session_id"] = np.where(rng.random(n) < 0.2, -1, rng.integers(0, 5, n))
    rec["session_next_req"] = np.where(rng.random(n) < 0.3, -1, np.arange(n) + 2)
    rec["n_blocks"] = [len(r) for r in requests]
    rec["input_length"] = [4 * len(r) for r in requests]
    rec["output_length"] = 1
    return rec


def _arrivals(log: CtxLog) -> list[tuple]:
    return [r for r in log.records() if r[0] == ARRIVE]


def _expected(rec: np.ndarray, requests: list[list[int]], mode: str, cap: int) -> list[tuple]:
    """(timestamp, category, session, next, n_blocks) of every request that fits ``cap``."""
    cats = fold(rec["type_id"], rec["turn"], mode)
    return [(rec["start_time_us"][i] / 1e6, int(cats[i]), int(rec["session_id"][i]),
             int(rec["session_next_req"][i]), len(r))
            for i, r in enumerate(requests) if len(set(r)) <= cap]


class _LogLRU(ref_lru.LRU):
    """The reference LRU, recording its request contexts."""

    WANTS_REQUEST_CTX = True

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.arrivals: list[tuple] = []
        self.calls: list[str] = []

    def set_request_ctx(self, a) -> None:
        self.arrivals.append((a.timestamp_s, a.category, a.session_id, a.session_next_req,
                              a.n_blocks, a.vtime, len(self), len(self._pinned_now())))
        self.calls.append(ARRIVE)

    def on_request(self, ctx) -> None:
        self.calls.append("on_request")

    def _pinned_now(self) -> set:
        return self.owner.pinned()


def _ref_cache(cap: int) -> tuple[RefCache, _LogLRU]:
    p = _LogLRU(cap)
    c = RefCache(p, cap)
    p.owner = c
    return c, p


@pytest.fixture
def ctxlog_sim(monkeypatch):
    """A Simulator whose caches are CtxLog instances (one per spec; spec names are ignored)."""
    made: list[CtxLog] = []

    def make(name, capacity, params=""):
        made.append(CtxLog(capacity, 100_000))
        return made[-1]

    monkeypatch.setattr(simulator_mod, "make_policy", make)

    def build(caps, **kw) -> tuple[Simulator, list[CtxLog]]:
        made.clear()
        sim = Simulator([CacheSpec("lru", c) for c in caps], threads=1, **kw)
        return sim, list(made)
    return build


@pytest.mark.parametrize("mode", ["none", "type", "turn", "type+turn", "type+first-turn"])
def test_offline_ctx_per_served_request_before_match(ctxlog_sim, mode):
    rng = np.random.default_rng(3)
    reqs = random_trace(rng, 300, max_len=14)
    rec = _records(reqs)
    cap = 10           # some requests do not fit: they are skipped and get no call
    sim, (log,) = ctxlog_sim([cap], category=mode)
    assert sim.wants_request_ctx
    for a in range(0, len(reqs), 70):             # batches with a first_request offset
        sim.feed(Batch.from_lists(reqs[a:a + 70], records=rec[a:a + 70], first_request=a))
    got = _arrivals(log)
    want = _expected(rec, reqs, mode, cap)
    assert len(want) < len(reqs)                  # the skip path is exercised
    assert [g[1:6] for g in got] == want
    # before the match: no block of the request pinned yet (offline pins are the match's own)
    assert all(g[8] == 0 for g in got)
    # one set_request_ctx then one on_request per served request, in that order
    hooks = [r[0] for r in log.records()]
    assert hooks == [ARRIVE, "on_request"] * len(want)
    # vtime before the request: the blocks of the served requests before it
    served = [r for r in reqs if len(set(r)) <= cap]
    assert [g[6] for g in got] == list(np.cumsum([0] + [len(r) for r in served[:-1]]))


def test_ctx_matches_the_reference_loop():
    rng = np.random.default_rng(11)
    reqs = random_trace(rng, 400, max_len=12)
    rec = _records(reqs, seed=1)
    cap = 9
    info = np.zeros((len(reqs), INFO_WIDTH), dtype=np.int64)
    info[:, INFO_CATEGORY] = fold(rec["type_id"], rec["turn"], "type+turn")
    info[:, INFO_SESSION] = rec["session_id"]
    info[:, INFO_SESSION_NEXT] = rec["session_next_req"]
    ts = rec["start_time_us"] / 1e6
    log = CtxLog(cap, 10_000)
    run = CacheRun(log)
    b = Batch.from_lists(reqs)
    costs = np.ones(64)
    run.serve_batch(np.asarray(b.offsets, dtype=np.int64), np.asarray(b.block_ids, dtype=np.int64),
                    np.full(b.n_blocks, -1, dtype=np.int64), ts, costs,
                    np.ones(64, dtype=np.int64), 0, info=info)
    ref, p = _ref_cache(cap)
    for i, r in enumerate(reqs):
        ref.serve(r, timestamp_s=ts[i], category=int(info[i, 0]), session_id=int(info[i, 1]),
                  session_next_req=int(info[i, 2]))
    got = [g[1:] for g in _arrivals(log)]
    assert got == p.arrivals
    assert len(got) == ref.n_req
    assert p.calls == [ARRIVE, "on_request"] * ref.n_req


def test_no_flag_no_call_and_no_info_rows(monkeypatch):
    reqs = [[1, 2], [1, 3]]
    log = CtxLog(8, 100, False)
    run = CacheRun(log)
    b = Batch.from_lists(reqs)
    run.serve_batch(np.asarray(b.offsets, dtype=np.int64), np.asarray(b.block_ids, dtype=np.int64),
                    np.full(4, -1, dtype=np.int64), np.zeros(2), np.ones(8),
                    np.ones(8, dtype=np.int64), 0)
    assert [r[0] for r in log.records()] == ["on_request", "on_request"]
    # a Simulator whose policies do not want it builds no info rows
    sim = Simulator([CacheSpec("lru", 8)])
    assert not sim.wants_request_ctx
    called = []
    monkeypatch.setattr(simulator_mod, "request_info", lambda *a: called.append(a))
    sim.feed(Batch.from_lists(reqs))
    assert called == []


def test_without_info_rows_category_0_and_no_session():
    log = CtxLog(8, 100)
    run = CacheRun(log)
    b = Batch.from_lists([[1, 2, 3]])
    run.serve_batch(np.asarray(b.offsets, dtype=np.int64), np.asarray(b.block_ids, dtype=np.int64),
                    np.full(3, -1, dtype=np.int64), np.array([2.5]), np.ones(8),
                    np.ones(8, dtype=np.int64), 0)
    assert [g[1:6] for g in _arrivals(log)] == [(2.5, 0, -1, -1, 3)]


def test_info_rows_of_the_wrong_shape_are_value_errors():
    run = CacheRun(CtxLog(8, 100))
    b = Batch.from_lists([[1, 2], [3]])
    args = (np.asarray(b.offsets, dtype=np.int64), np.asarray(b.block_ids, dtype=np.int64),
            np.full(3, -1, dtype=np.int64), np.zeros(2), np.ones(8), np.ones(8, dtype=np.int64), 0)
    with pytest.raises(ValueError, match="info row"):
        run.serve_batch(*args, info=np.zeros((1, INFO_WIDTH), dtype=np.int64))
    with pytest.raises(ValueError, match="info row"):
        run.serve_batch(*args, info=np.zeros((2, INFO_WIDTH + 1), dtype=np.int64))


def test_live_admissions_carry_their_ctx_and_releases_none(ctxlog_sim):
    sim, (log,) = ctxlog_sim([6])
    a = sim.admit([1, 2, 3], timestamp_s=1.25, category=7, session_id=4, session_next_req=9)
    lb = LiveBatch()
    b = lb.admit([1, 2, 4], timestamp_s=2.5, category=3)
    lb.release(a, [5])
    c = lb.admit([1, 6, 7, 8, 9], timestamp_s=3.0)   # needs held room: skipped after its call
    sim.serve_live(lb)
    assert c.served == [False]
    got = [g[1:6] for g in _arrivals(log)]
    assert got == [(1.25, 7, 4, 9, 3), (2.5, 3, -1, -1, 3), (3.0, 0, -1, -1, 5)]
    # admission b's ctx came while a's blocks were held: before b's own match pins
    assert _arrivals(log)[1][8] == 3
    sim.release(b)

    # the reference admit hands over the same
    ref, p = _ref_cache(6)
    ra = ref.admit([1, 2, 3], timestamp_s=1.25, category=7, session_id=4, session_next_req=9)
    ref.admit([1, 2, 4], timestamp_s=2.5, category=3)
    ref.release([1, 2, 3], [5])
    assert ref.admit([1, 6, 7, 8, 9], timestamp_s=3.0).status == "skipped"
    assert ra.status == "served"
    assert [x[:5] for x in p.arrivals] == got


def test_recorded_timing_hands_each_admission_its_ctx_in_time_order(ctxlog_sim):
    reqs = [[1, 2], [1, 3], [4], [1, 2, 5]]
    rec = _records(reqs, seed=5)
    rec["start_time_us"] = [3_000_000, 1_000_000, 2_500_000, 500_000]
    rec["complete_time_us"] = [4_000_000, 1_500_000, 2_600_000, 900_000]
    rec["input_length"] = [4 * len(r) for r in reqs]
    sim, (log,) = ctxlog_sim([16], category="type+first-turn")
    run_trace_recorded(sim, [Batch.from_lists(reqs, records=rec)], "t.lcp", 4)
    order = np.argsort(rec["start_time_us"], kind="stable")
    exp = _expected(rec, reqs, "type+first-turn", 16)
    assert [g[1:6] for g in _arrivals(log)] == [exp[i] for i in order]
