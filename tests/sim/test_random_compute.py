"""random_compute: shared mixin, hand-traced scores, exact differential vs the reference with batching.

Also home of :func:`run_batched`, the differential harness the other sampling policies use: the
reference loop (``reference/loop.py``) asks a policy with ``evict_n`` for the whole deficit of an
allocation, as the Cython loop does, so the same draws are made on both sides.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.sim.reference.random_compute import DenseSet, SplitMix64
from shadow.sim.registry import make_policy
from shadow.trace.batch import Batch
from tests.sim._traces import next_access
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces


def run_batched(name: str, params: str, capacity: int, trace: list[list[int]], *, pin: bool,
                replay_order: str = "deepest-first", cost_model: str = "position"):
    """Per-request (hits, prefix hits, skipped) and counters: Cython loop vs batched reference."""
    nxt = next_access(trace)
    sim = Simulator([CacheSpec(name, capacity, params)], pin=pin, replay_order=replay_order,
                    cost_model=cost_model)
    pol = make_reference(name, capacity, params)
    ref = RefCache(pol, capacity, pin=pin, replay_order=replay_order, cost_model=cost_model)
    run = sim.runs[0]
    got, want, vt = [], [], 1
    for i, req in enumerate(trace):
        h0, p0, s0 = run.n_hits, run.n_prefix_hits, run.n_req_skipped
        sim.feed(Batch.from_lists([req], next_access=[nxt[i]], first_request=i, first_vtime=vt))
        vt += len(req)
        got.append((run.n_hits - h0, run.n_prefix_hits - p0, run.n_req_skipped - s0))
        r = ref.serve(req, nxt[i])
        want.append((r.n_hits, r.n_prefix_hits, int(r.status == "skipped")))
    res = sim.results()[0]
    assert res.error is None, res.error
    keys = ("n_req", "n_req_skipped", "n_blocks", "n_eviction", "n_self_eviction", "n_unexpected_eviction")
    return got, want, {k: getattr(res, k) for k in keys}, {k: ref.stats()[k] for k in keys}, sim, ref


def assert_same(name: str, params: str, capacity: int, trace, pin: bool, replay_order="deepest-first"):
    got, want, gc, wc, sim, ref = run_batched(name, params, capacity, trace, pin=pin,
                                              replay_order=replay_order)
    assert got == want
    assert gc == wc
    assert sorted(sim.runs[0].policy.resident_ids()) == sorted(
        b for b in {x for r in trace for x in r} if ref.policy.find(b))
    return sim


class TestRandomCompute(PolicyMixin):
    NAME = "random_compute"
    # NOTE: one victim per sample, so the shared one-evict-at-a-time reference loop is exact too;
    # the batched default is compared below through run_batched.
    PARAMS = "evict-batch=1"


class TestRandomComputeAccessStamp(PolicyMixin):
    NAME = "random_compute"
    PARAMS = "evict-batch=1,timestamp=access,n-sample=5,seed=7"


def test_splitmix_matches_reference_draws():
    # the Cython policy and the reference see the same stream: a fresh cache of 1..20 evicts the
    # same victims in the same order under both
    p = make_policy("random_compute", 20, "n-sample=3,evict-batch=1,seed=9")
    r = make_reference("random_compute", 20, "n-sample=3,evict-batch=1,seed=9")

    class A:
        pass

    for b in range(1, 21):
        acc = A()
        acc.cost, acc.vtime, acc.req_vtime = b, b, b
        p.py_get(b, cost=b, vtime=b, req_vtime=b)
        r.insert(b, acc)
    acc = A()
    acc.vtime = 100
    got = [p.py_evict(vtime=100) for _ in range(10)]
    want = [r.evict(acc, set()) for _ in range(10)]
    assert got == want
    assert p.population() == r.dense.live()


def test_score_and_decay_hand_traced():
    p = make_policy("random_compute", 4, "n-sample=64,evict-batch=1")
    p.py_get(1, cost=10, vtime=1, req_vtime=10)
    assert p.stats(1) == (10, 1.0, 10)
    p.py_get(1, cost=10, vtime=2, req_vtime=20010)            # d = 20000: freq = e^-1 + 1
    last, freq, cost = p.stats(1)
    assert last == 20010 and cost == 10 and freq == pytest.approx(math.exp(-1.0) + 1.0)
    p.py_get(1, cost=10, vtime=3, req_vtime=20010)            # same stamp: freq += 1
    assert p.stats(1)[1] == pytest.approx(math.exp(-1.0) + 2.0)
    # with 64 draws over 2 blocks both are seen (w.h.p. fixed by the seed): the cheap one goes
    p.py_get(2, cost=1, vtime=4, req_vtime=20010)
    assert p.py_evict(vtime=20011) == 2


def test_dense_set_swap_remove():
    d = DenseSet()
    for x in (5, 6, 7, 8):
        d.add(x)
    d.remove(6)
    assert d.live() == [5, 8, 7]
    f = DenseSet(4, full=True)
    f.add(f.items[f.n])
    f.add(f.items[f.n])
    f.remove(0)
    assert f.live() == [1] and sorted(f.items) == [0, 1, 2, 3]


def test_rng_is_splitmix64():
    # first outputs of splitmix64 seeded with 0 (the published test vector)
    r = SplitMix64(0)
    assert r.next() == 0xE220A8397B1DCDAF
    assert r.next() == 0x6E789E6AA1B965F4


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "n-sample=4,evict-batch=3", "n-sample=2,evict-batch=5,timestamp=access"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same("random_compute", params, capacity, trace, pin)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans())
def test_batched_differential_raw(trace, capacity, pin):
    assert_same("random_compute", "n-sample=3,evict-batch=2", capacity, trace, pin)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(2, 24))
def test_batched_differential_prefix_order(trace, capacity):
    assert_same("random_compute", "n-sample=4,evict-batch=4", capacity, trace, True, "prefix-order")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["random_compute", "random_compute_small_queue", "belady_compute"])
@pytest.mark.parametrize("params", ["n-sample=16,evict-batch=4", "n-sample=128,evict-batch=8",
                                    "n-sample=5,evict-batch=1,seed=3"])
def test_draws_past_pinned_blocks_in_several_rounds(name, params):
    # NOTE: the draws go in rounds (as many attempts as draws are missing, then the next round
    # for the ones that landed on pinned blocks): each request holds 56 blocks the reference
    # says are resident (pinned by their hits) and brings 4 new ones, so 4 of the 8 unpinned go,
    # most draws are redrawn and some samples run out of attempts (4 x n-sample) and take the
    # scan.  Which 4 go depends on every draw, so one attempt too many or too few shows in the
    # resident set and the hits.
    trace = [list(range(1, 65))]
    for k in range(30):
        res = _resident_after(name, params, 64, trace)
        start = (5 * k) % (len(res) - 55)
        trace.append(res[start:start + 56] + list(range(1000 + 4 * k, 1004 + 4 * k)))
    assert_same(name, params, 64, trace, True)


def _resident_after(name, params, capacity, trace):
    """The reference's resident ids after ``trace`` (pins on, deepest first)."""
    *_, ref = run_batched(name, params, capacity, trace, pin=True)
    return sorted(b for b in {x for r in trace for x in r} if ref.policy.find(b))


def test_bad_parameters_are_clear_errors():
    from shadow.errors import ShadowError

    for bad in ("n-sample=0", "evict-batch=0", "timestamp=wall", "seed=-1", "nsample=3"):
        with pytest.raises(ShadowError):
            make_policy("random_compute", 8, bad)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["random_compute", "random_compute_small_queue", "belady_compute",
                                  "partial_node_random_compute", "partial_node_random_freq"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 16))
def test_costs_past_32_bits_differential(name, trace, capacity):
    # costs 1e9 + 7e8 p: inside int32 at positions 0 and 1, past it from 2 on, so a policy that
    # keeps costs in 32 bits widens them mid-run (at the first request of 3 blocks or more)
    got, want, gc, wc, _, _ = run_batched(name, "", capacity, trace, pin=True,
                                          cost_model="linear:1000000000,700000000")
    assert got == want
    assert gc == wc


# --- 32-bit stamps (an epoch and a sweep) and 32-bit costs (widened on demand) ----------------

# NOTE: the ages the epoch code must get right: around 13_862_944 (from there the prefilter's
# bound is 0.0), 14_902_665 (from there exp(-age / 20000) is 0.0), 2**24, the clamp age (2**30)
# and the span (2**31: a stamp this far past the epoch sweeps).
_UNDERFLOW = 14_902_665
_GAPS = [0, 1, 3, 700, 20000, 13_862_943, 13_862_944, _UNDERFLOW - 1, _UNDERFLOW, _UNDERFLOW + 1,
         2**24 - 1, 2**24, 2**24 + 1, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 1, 2**31, 2**31 + 1,
         3 * 2**31 + 5]
_COSTS = [1] * 8 + [0, 3, 1000, -7, 2**31 - 1, -2**31, 2**31, -2**31 - 1, 2**40]


def ref_get(r: object, capacity: int, b: int, acc: object) -> bool:
    """One ``get`` on reference policy ``r`` (``py_get``'s: hit, or evict-if-full then insert);
    True on a hit."""
    if r.find(b):
        r.hit(b, acc)
        return True
    if len(r) >= capacity:
        r.evict(acc, set())
    r.insert(b, acc)
    return False


def _drive(name: str, params: str, capacity: int, ops) -> tuple[object, list[int]]:
    """Run ``ops`` on the Cython policy and its reference, comparing after each: hit or miss,
    victim, residents, population order and every resident's (last, freq, cost), freq bit for bit.

    An op is ``("get", block, gap, lag, cost)`` (the stamp advances by ``gap``; ``req_vtime`` is the
    stamp, ``vtime`` lags it by ``lag``, as a request's stamp is ahead of its gets) or ``("evict",
    0, gap, lag, 0)`` (an eviction at ``now = stamp - lag``).  The policy's ``last`` is
    ``max(true last, epoch)``: a sweep clamps older ones to the epoch.  Returns the policy and
    its epoch after each op.
    """
    from types import SimpleNamespace

    p = make_policy(name, capacity, params)
    r = make_reference(name, capacity, params)
    t = vt = 0
    epochs = []
    for kind, b, gap, lag, cost in ops:
        t += gap
        vt = max(vt, t - lag)
        acc = SimpleNamespace(block_id=b, cost=cost, cost_exact=float(cost), next_access=-1,
                              vtime=vt, req_vtime=t)
        if kind == "get":
            assert p.py_get(b, cost=cost, vtime=vt, req_vtime=t) == ref_get(r, capacity, b, acc)
        else:
            assert p.py_evict(vtime=vt) == r.evict(acc, set())
        assert sorted(p.resident_ids()) == sorted(r.last)
        assert p.population() == r.dense.live()
        for x in r.last:
            assert p.stats(x) == (max(r.last[x], p.epoch), r.freq[x], r.cost[x]), (x, t)
        epochs.append(p.epoch)
    return p, epochs


_ops = st.lists(st.tuples(st.sampled_from(["get"] * 3 + ["evict"]), st.integers(1, 12),
                          st.sampled_from(_GAPS), st.sampled_from([0, 0, 1, 3]),
                          st.sampled_from(_COSTS)),
                min_size=1, max_size=60)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["random_compute", "random_compute_small_queue"])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, capacity=st.integers(2, 10),
       params=st.sampled_from(["n-sample=8,evict-batch=1", "n-sample=3,evict-batch=1,seed=5",
                               "n-sample=8,evict-batch=1,timestamp=access"]))
def test_epoch_sweeps_differential(name, ops, capacity, params):
    # stamps that jump past 2**31 at once and in steps (several sweeps a run), ages on both sides
    # of the underflow, the prefilter's cut-off and the clamp age, hits before and after a sweep,
    # and now and then a cost outside int32 (the costs widen mid-run)
    _drive(name, params, capacity, [(k, b if k == "get" else 0, g, lag, c)
                                    for k, b, g, lag, c in ops])


def test_epoch_sweeps_hand_built():
    # Every block is seen by a 64-draw sample over 8 (fixed by the seed).  S is the first stamp
    # 2**31 past the epoch 0: the sweep moves the epoch to S - 2**30 and clamps 1 .. 4 (and 5,
    # exactly 2**30 old at S, stays).  Hits after the sweep on clamped blocks get freq 1.0 as in
    # the reference (true age far past the underflow); draws before and after give the same ties.
    S, C = 2**31, 2**30
    g = "get"
    ops = [(g, 1, 1, 0, 3), (g, 2, 1, 0, 3), (g, 3, 1, 0, 100), (g, 1, 47, 0, 3),  # 1 hit (freq 2)
           (g, 4, C - 1 - 50, 0, 7),                     # last = C - 1: clamped at S
           (g, 5, 1, 0, 7),                              # last = C: age exactly C at S, kept
           (g, 6, 2000, 0, 7),                           # last = C + 2000
           (g, 7, S - C - 2000, 0, 5),                   # at S: the sweep (no eviction: 7 of 8)
           (g, 1, 1, 0, 3), (g, 4, 0, 0, 7),             # hits on clamped blocks: freq 1.0
           (g, 6, 2, 0, 7),                              # hit 2**30 - 1997 after its last
           ("evict", 0, _UNDERFLOW - 3, 0, 0),           # ages on both sides of the underflow
           ("evict", 0, 4, 0, 0), (g, 8, 0, 0, 2), (g, 9, 1, 0, 2),
           (g, 8, S, 0, 2),                              # sweep two: 8 is hit across it
           (g, 10, 2**24 + 1, 0, 2), (g, 11, 2**24, 0, 2), ("evict", 0, 0, 2, 0),
           (g, 9, 3 * S, 0, 2**33),                      # sweep three, and the costs widen
           ("evict", 0, 1, 0, 0), ("evict", 0, 1, 0, 0)]
    stamps = [sum(o[2] for o in ops[:i + 1]) for i in range(len(ops))]
    for name in ("random_compute", "random_compute_small_queue"):
        p, epochs = _drive(name, "n-sample=64,evict-batch=1,seed=3", 8, ops)
        assert sorted(set(epochs)) == [0, stamps[7] - C, stamps[15] - C, stamps[19] - C]
        assert p.cost_bits() == 64


def test_epoch_sweep_clamps_and_hits():
    # the sweep itself: lasts older than the new epoch become it, newer ones stay; a hit on a
    # clamped block restarts its count at 1.0, as a hit after any age past the underflow does
    p = make_policy("random_compute", 4, "n-sample=8,evict-batch=1")
    p.py_get(1, cost=2, req_vtime=10)
    p.py_get(1, cost=2, req_vtime=10)                   # freq 2.0
    p.py_get(2, cost=2, req_vtime=2**30 + 5)
    assert p.epoch == 0
    p.py_get(3, cost=2, req_vtime=2**31)
    assert p.epoch == 2**30
    assert p.stats(1) == (2**30, 2.0, 2) and p.stats(2) == (2**30 + 5, 1.0, 2)
    assert p.stats(3) == (2**31, 1.0, 2)
    p.py_get(1, cost=2, req_vtime=2**31)
    assert p.stats(1) == (2**31, 1.0, 2)
    p.py_get(2, cost=2, req_vtime=2**31 + 20000)        # 2**30 - 19995 old: past the underflow
    assert p.stats(2) == (2**31 + 20000, 1.0, 2)


def test_costs_widen_mid_run():
    # costs live in the 32-bit record until one does not fit (either side), then in 64 bits for
    # good, the earlier ones copied: no score ever sees a clipped cost.  At now = 2 (every age 1):
    # 2 (cost 2**31 - 1, freq 3) scores about 6.4e9 and 1 (cost 2**32, freq 2) about 8.6e9, so 2
    # goes before 1; 1's cost clipped to 2**31 - 1 would give it 4.3e9 and evict it first.
    p = make_policy("random_compute", 4, "n-sample=64,evict-batch=1,seed=2")
    p.py_get(1, cost=5, vtime=1, req_vtime=1)
    for _ in range(3):
        p.py_get(2, cost=2**31 - 1, vtime=1, req_vtime=1)
    p.py_get(3, cost=-2**31, vtime=1, req_vtime=1)
    assert p.cost_bits() == 32
    p.py_get(1, cost=2**32, vtime=1, req_vtime=1)      # a hit widens
    assert p.cost_bits() == 64
    assert [p.stats(b)[2] for b in (1, 2, 3)] == [2**32, 2**31 - 1, -2**31]
    p.py_get(4, cost=-2**31 - 1, vtime=1, req_vtime=1)
    assert p.stats(4) == (1, 1.0, -2**31 - 1)
    assert [p.py_evict(vtime=2) for _ in range(3)] == [4, 3, 2]
    q = make_policy("random_compute", 4, "n-sample=64,evict-batch=1")
    q.py_get(1, cost=-2**31 - 1, vtime=1, req_vtime=1)  # an insert widens (below int32)
    assert q.cost_bits() == 64 and q.stats(1)[2] == -2**31 - 1
