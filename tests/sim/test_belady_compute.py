"""belady_compute: shared mixin, hand-traced scores, exact batched differential vs the reference."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces
from tests.sim.test_random_compute import assert_same


class TestBeladyCompute(PolicyMixin):
    NAME = "belady_compute"
    PARAMS = "evict-batch=1"


def test_belady_compute_scores_hand_traced():
    # 64 draws over three blocks see all three (fixed seed): never-reused goes first, then the
    # highest ln(next - now) - ln(cost); a stale next access (<= now) goes last
    p = make_policy("belady_compute", 3, "n-sample=64,evict-batch=1")
    p.py_get(1, cost=1, next_access=50)       # ln(40) - ln(1)
    p.py_get(2, cost=10, next_access=200)     # ln(190) - ln(10) < ln(40)
    p.py_get(3, cost=1, next_access=-1)
    assert p.py_evict(vtime=10) == 3
    p.py_get(4, cost=1, next_access=5)        # stale at now=10
    assert p.py_evict(vtime=10) == 1
    assert p.py_evict(vtime=10) == 2
    assert p.resident_ids() == [4]


def test_belady_compute_costs_past_32_bits():
    # costs live in 32 bits until one does not fit, then in 64 for good: the score never sees a
    # clipped cost.  At now=0: 1 scores ln(3) - ln(max(-5, 1)) = ln(3), 2 scores
    # ln(2**34) - ln(2**33) = ln(2), so 1 goes first; a cost clipped to 2**31 - 1 would give 2
    # about ln(8) and evict it first.  3 is never reused (+inf): first of all.
    p = make_policy("belady_compute", 3, "n-sample=64,evict-batch=1")
    p.py_get(1, cost=-5, next_access=3)
    assert p.cost_bits() == 32
    p.py_get(2, cost=2**33, next_access=2**34)
    assert p.cost_bits() == 64
    p.py_get(3, cost=1, next_access=-1)
    assert p.py_evict(vtime=0) == 3
    assert p.py_evict(vtime=0) == 1
    assert p.resident_ids() == [2]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "n-sample=3,evict-batch=2", "n-sample=1,evict-batch=4"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same("belady_compute", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans())
def test_batched_differential_raw(trace, capacity, pin):
    assert_same("belady_compute", "n-sample=3,evict-batch=3", capacity, trace, pin)
