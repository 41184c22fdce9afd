"""partial_node_random_freq: shared mixin, hand-traced freq and its effect, exact batched differential."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.registry import make_policy, policy_info
from shadow.trace.batch import Batch
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces
from tests.sim.test_partial_node_random_compute import drive_requests, stamp_ops
from tests.sim.test_random_compute import assert_same

NAME = "partial_node_random_freq"


class TestPartialNodeFreqMicro(PolicyMixin):
    NAME = NAME
    PARAMS = "micro-batch=1"     # one block per sample: the one-evict-at-a-time reference loop is exact


class TestPartialNodeFreqSmallSample(PolicyMixin):
    NAME = NAME
    PARAMS = "n-sample=2,micro-batch=1,seed=3"


def _serve(name, trace, capacity, params=""):
    sim = Simulator([CacheSpec(name, capacity, params)], pin=True, cost_model="uniform")
    for i, req in enumerate(trace):
        sim.feed(Batch.from_lists([req], first_request=i))
    return sim


def test_freq_counts_requests_through_a_node_and_survives_a_split():
    sim = _serve(NAME, [[1, 2, 3, 4], [1, 2, 5, 6]], 8)
    # B's path ran through A's node (freq 1 after the split); the split-off [3, 4] keeps A's 0
    assert sim.runs[0].policy.node_freqs() == {(1, 2): 1, (3, 4): 0, (5, 6): 0}
    sim = _serve(NAME, [[1, 2]] * 4, 8)
    assert sim.runs[0].policy.node_freqs() == {(1, 2): 3}


def test_freq_keeps_an_older_node_that_many_requests_used():
    # [1, 2] was used by 4 requests (freq 3, stamp 8); [3, 4] (stamp 10) and [5] (stamp 11) once.
    # [6] needs one slot at now 11: compute scores [1, 2] 1/3 against 1 and 1, so it loses block 2;
    # freq scores it 4/3 against 1 and 1, so the victim is 4 or 5 (a tie: first drawn).
    trace = [[1, 2]] * 4 + [[3, 4], [5], [6]]
    comp = _serve("partial_node_random_compute", trace, 5).runs[0].policy
    freq = _serve(NAME, trace, 5).runs[0].policy

    def resident(p):
        return {b for b in range(1, 7) if p.py_find(b) >= 0}

    assert resident(comp) == {1, 3, 4, 5, 6}
    assert resident(freq) in ({1, 2, 3, 5, 6}, {1, 2, 3, 4, 6})


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "eviction-mode=drain", "micro-batch=2,n-sample=3",
                               "eviction-mode=drain,n-sample=1"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same(NAME, params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans(),
       params=st.sampled_from(["micro-batch=2,n-sample=3", "eviction-mode=drain,n-sample=2"]))
def test_batched_differential_raw(trace, capacity, pin, params):
    assert_same(NAME, params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(2, 24))
def test_batched_differential_prefix_order(trace, capacity):
    assert_same(NAME, "micro-batch=3,n-sample=4", capacity, trace, True, "prefix-order")


def test_metadata_and_bad_params():
    info = policy_info(NAME)
    assert info.honours_pins and not info.needs_next_access
    for bad in ("eviction-mode=batch", "micro-batch=0", "n-sample=0"):
        with pytest.raises(ShadowError, match=NAME):
            make_policy(NAME, 8, bad)


class TestPartialNodeFreqMicroPasses(PolicyMixin):
    """Draws in passes from the first node on (production: from 16384 live nodes)."""
    NAME = NAME
    PARAMS = "micro-batch=1"

    def setup_method(self, method):
        from shadow.sim.policies.partial_node import partial_node_random_compute as m
        self._old_pass_min = m.set_pass_min_nodes(0)

    def teardown_method(self, method):
        from shadow.sim.policies.partial_node import partial_node_random_compute as m
        m.set_pass_min_nodes(self._old_pass_min)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=stamp_ops, capacity=st.integers(1, 8),
       params=st.sampled_from(["n-sample=4,micro-batch=1", "eviction-mode=drain,n-sample=3"]))
def test_stamps_past_32_bits_differential(ops, capacity, params):
    # the base's 32-bit stamps (epoch moves, widening) under the freq score, freqs compared too
    drive_requests(NAME, params, capacity, ops)


@contextmanager
def freq32_max(n: int) -> Iterator[None]:
    """Keep freqs in 32 bits only up to ``n`` (production: 2**32 - 1): they widen mid-run."""
    from shadow.sim.policies.partial_node import partial_node_random_freq as m
    old = m.set_freq32_max(n)
    try:
        yield
    finally:
        m.set_freq32_max(old)


def test_freq_widens_past_32_bits():
    with freq32_max(2):
        p = _serve(NAME, [[1, 2]] * 3, 8).runs[0].policy
        assert p.freq_bits() == 32 and p.node_freqs() == {(1, 2): 2}
        p = _serve(NAME, [[1, 2], [1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 2]], 8).runs[0].policy
        # [1, 2] passes 2 at the fourth request: every freq moves to 64 bits, [3]'s too
        assert p.freq_bits() == 64 and p.node_freqs() == {(1, 2): 4, (3,): 1, (4,): 0}


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=stamp_ops, capacity=st.integers(1, 8), limit=st.integers(0, 3),
       params=st.sampled_from(["n-sample=4,micro-batch=1", "eviction-mode=drain,n-sample=3"]))
def test_freq_widens_mid_run_differential(ops, capacity, limit, params):
    # freqs that pass the 32-bit limit (lowered) mid-run: the same scores and decisions after
    with freq32_max(limit):
        drive_requests(NAME, params, capacity, ops)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans())
def test_freq_widens_batched_differential(trace, capacity, pin):
    with freq32_max(1):
        assert_same(NAME, "micro-batch=2,n-sample=3", capacity, trace, pin)
