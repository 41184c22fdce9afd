"""Checks shared by the five session-level policies' tests (tests/sim/test_session_*.py).

``SessionMixin`` adds to :class:`PolicyMixin` (whose traces have no sessions: every request its
own session) the differential against the reference on multi-turn traces with sessions, types,
turns, context slides and requests of no session, through the Cython serve loop with the
request context, pins on and off, at several capacities.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.trace.batch import Batch
from tests.sim._traces import next_access, sliding_session_trace
from tests.sim.policy_mixin import PolicyMixin
from tests.tiers import unit_rows

KEYS = ("n_req", "n_req_skipped", "n_blocks", "n_hits", "n_prefix_hits", "n_eviction",
        "n_self_eviction", "n_unexpected_eviction")


def run_sessions(name: str, params: str, capacity: int, requests: list[list[int]],
                 records: np.ndarray, *, pin: bool, replay_order: str = "deepest-first",
                 batch: int = 1):
    """Serve ``requests`` with their records in the Cython loop (``batch`` requests a feed) and
    the reference loop: (per-request hits of each, counters of each, the simulator, the ref)."""
    nxt = next_access(requests)
    sim = Simulator([CacheSpec(name, capacity, params)], pin=pin, replay_order=replay_order,
                    cost_model="position")
    ref = RefCache(make_reference(name, capacity, params), capacity, pin=pin,
                   replay_order=replay_order, cost_model="position")
    run = sim.runs[0]
    got, want = [], []
    vt = 1
    for a in range(0, len(requests), batch):
        chunk = requests[a:a + batch]
        h0 = run.n_hits
        sim.feed(Batch.from_lists(chunk, next_access=nxt[a:a + batch], records=records[a:a + batch],
                                  first_request=a, first_vtime=vt))
        vt += sum(len(r) for r in chunk)
        got.append(run.n_hits - h0)
        h = 0
        for i in range(a, a + len(chunk)):
            r = ref.serve(requests[i], nxt[i], timestamp_s=records["start_time_us"][i] / 1e6,
                          session_id=int(records["session_id"][i]),
                          session_next_req=int(records["session_next_req"][i]))
            h += r.n_hits
        want.append(h)
    res = sim.results()[0]
    assert res.error is None, res.error
    gc = {k: getattr(res, k) for k in KEYS}
    wc = {k: ref.stats()[k] for k in KEYS}
    return got, want, gc, wc, sim, ref


class SessionMixin(PolicyMixin):
    @pytest.mark.parametrize("pin", unit_rows([True, False], 2))
    @pytest.mark.parametrize("capacity", unit_rows([4, 9, 20, 60], 4, first=1))
    def test_differential_sessions(self, capacity, pin):
        for seed in range(12):
            rng = np.random.default_rng(seed)
            reqs, rec = sliding_session_trace(rng, 80, n_sessions=2 + seed % 6)
            got, want, gc, wc, sim, ref = run_sessions(self.NAME, self.PARAMS, capacity, reqs, rec,
                                                       pin=pin)
            assert got == want, (seed, capacity, pin)
            assert gc == wc, (seed, capacity, pin)
            p = sim.runs[0].policy
            assert sorted(p.resident_ids()) == sorted(ref.policy.cost)
            assert p.py_orphans() == list(ref.policy.orphans)
            assert gc["n_unexpected_eviction"] == 0
            if pin:
                assert gc["n_self_eviction"] == 0

    @pytest.mark.parametrize("pin", unit_rows([True, False], 2))
    def test_differential_sessions_batched_prefix_order(self, pin):
        for seed in range(6):
            rng = np.random.default_rng(100 + seed)
            reqs, rec = sliding_session_trace(rng, 120, n_sessions=6, p_slide=0.3)
            got, want, gc, wc, _, _ = run_sessions(self.NAME, self.PARAMS, 12, reqs, rec, pin=pin,
                                                   replay_order="prefix-order", batch=40)
            assert got == want and gc == wc

    @pytest.mark.parametrize("capacity", unit_rows([6, 15, 40], 3, first=1))
    def test_differential_live_sessions(self, capacity):
        evictions = 0
        for seed in range(6):
            states, _ = run_live(self.NAME, self.PARAMS, capacity, seed)
            assert states[-1].n_self_eviction == 0
            evictions += states[-1].n_eviction
        assert evictions > 0

    def test_sessionless_trace_warns_once_and_runs(self, caplog):
        rng = np.random.default_rng(7)
        reqs, rec = sliding_session_trace(rng, 60, p_none=1.0)
        with caplog.at_level(logging.WARNING, logger="shadow.sim.core.simulator"):
            got, want, gc, wc, sim, _ = run_sessions(self.NAME, self.PARAMS, 8, reqs, rec,
                                                     pin=True)
        assert got == want and gc == wc
        lines = [r.getMessage() for r in caplog.records if "session id" in r.getMessage()]
        assert len(lines) == 1 and "each their own session" in lines[0]
        assert gc["n_req"] == len(reqs)

    def test_trace_with_sessions_does_not_warn(self, caplog):
        rng = np.random.default_rng(8)
        reqs, rec = sliding_session_trace(rng, 40, p_none=0.0)
        with caplog.at_level(logging.WARNING, logger="shadow.sim.core.simulator"):
            run_sessions(self.NAME, self.PARAMS, 8, reqs, rec, pin=True)
        assert not [r for r in caplog.records if "session id" in r.getMessage()]


def records(sessions: list[int], next_req: list[int] | None = None) -> np.ndarray:
    """lcp records for hand-written requests: their session ids (-1 none) and next requests."""
    from shadow.trace.format import RECORD_DTYPE

    rec = np.zeros(len(sessions), dtype=RECORD_DTYPE)
    for f in ("start_time_us", "complete_time_us", "chat_id", "parent_chat_id"):
        rec[f] = -1
    rec["session_id"] = sessions
    rec["session_next_req"] = next_req if next_req is not None else -1
    return rec


def serve_hand(name: str, capacity: int, requests: list[list[int]], sessions: list[int],
               next_req: list[int] | None = None, *, pin: bool = True, params: str = ""):
    """Serve hand-written requests one by one in the Cython loop; yields (policy, result) after
    each, the reference having served the same (checked equal at every step)."""
    rec = records(sessions, next_req)
    sim = Simulator([CacheSpec(name, capacity, params)], pin=pin)
    ref = RefCache(make_reference(name, capacity, params), capacity, pin=pin)
    for i, req in enumerate(requests):
        sim.feed(Batch.from_lists([req], records=rec[i:i + 1], first_request=i))
        ref.serve(req, session_id=sessions[i],
                  session_next_req=-1 if next_req is None else next_req[i])
        res = sim.results()[0]
        assert res.error is None
        assert sorted(sim.runs[0].policy.resident_ids()) == sorted(ref.policy.cost)
        assert {k: getattr(res, k) for k in KEYS} == {k: ref.stats()[k] for k in KEYS}
        yield sim.runs[0].policy, res


def at_step(steps, k: int):
    """The (policy, result) of ``serve_hand`` right after request ``k`` (later ones not served)."""
    for i, step in enumerate(steps):
        if i == k:
            return step
    raise IndexError(k)


def run_live(name: str, params: str, capacity: int, seed: int):
    """Live admissions (held until released, up to 4 in flight, generated blocks and a final
    partial block at release) of a multi-turn trace in the Cython loop and the reference, checked
    equal (counters, resident blocks, orphans) after each admission and its releases; the results
    after each step and the reference."""
    rng = np.random.default_rng(seed)
    reqs, rec = sliding_session_trace(rng, 60, n_sessions=4, p_slide=0.2)
    sim = Simulator([CacheSpec(name, capacity, params)], cost_model="position", verify=False)
    ref = RefCache(make_reference(name, capacity, params), capacity, cost_model="position",
                   verify=False)
    live: list[tuple] = []
    fresh = 10**6
    states = []      # the Cython cache's results after each admission (equal to the reference's)
    for i, r in enumerate(reqs):
        na = int(rng.integers(0, 2))
        ctx = dict(session_id=int(rec["session_id"][i]),
                   session_next_req=int(rec["session_next_req"][i]))
        a = sim.admit(r, n_anonymous=na, **ctx)
        b = ref.admit(r, n_anonymous=na, **ctx)
        live.append((a, b, r, na))
        while live and (len(live) > 4 or rng.random() < 0.5):
            a, b, r, na = live.pop(int(rng.integers(len(live))))
            extra = [fresh + k for k in range(int(rng.integers(0, 3)))]
            fresh += 10
            fin = int(rng.integers(0, 2))
            sim.release(a, extra, n_anonymous_final=fin)
            if b.status == "served":
                ref.release(r, extra, n_anonymous=na, n_anonymous_final=fin)
        res = sim.results()[0]
        assert {k: getattr(res, k) for k in KEYS} == {k: ref.stats()[k] for k in KEYS}, (seed, i)
        assert sorted(sim.runs[0].policy.resident_ids()) == sorted(ref.policy.cost), (seed, i)
        assert sim.runs[0].policy.py_orphans() == list(ref.policy.orphans), (seed, i)
        states.append(res)
    return states, ref
