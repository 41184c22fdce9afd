"""partial_node_random_compute: shared mixin, hand-traced nodes and trims, exact batched differential."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim import CacheSpec, Simulator
from shadow.trace.batch import Batch
from tests.sim._traces import next_access
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces
from tests.sim.test_random_compute import assert_same


class TestPartialNodeMicro(PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "micro-batch=1"     # one block per sample: the one-evict-at-a-time reference loop is exact


class TestPartialNodeSmallSample(PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "n-sample=2,micro-batch=1,seed=3"


def _serve(trace, capacity, params="", pin=True, replay_order="deepest-first"):
    sim = Simulator([CacheSpec("partial_node_random_compute", capacity, params)], pin=pin,
                    cost_model="uniform", replay_order=replay_order)
    nodes = []
    for i, req in enumerate(trace):
        sim.feed(Batch.from_lists([req], first_request=i))
        nodes.append(sorted(p for _, p in sim.runs[0].policy.node_paths()))
    return sim, nodes


def test_nodes_split_and_trim_hand_traced():
    sim, nodes = _serve([[1, 2, 3, 4], [1, 2, 5, 6], [11, 12, 13]], 8)
    assert nodes[0] == [[1, 2, 3, 4]]                    # one request's new run: one node
    assert nodes[1] == [[1, 2], [3, 4], [5, 6]]          # B's path splits A's node after block 2
    # C needs 1 slot: [3, 4] is the oldest node (1/4 against 1 for the others) and loses its tail
    assert nodes[2] == [[1, 2], [3], [5, 6], [11, 12, 13]]
    stamps = dict((tuple(p), s) for s, p in sim.runs[0].policy.node_paths())
    assert stamps[(3,)] == 4 and stamps[(1, 2)] == 8     # the split-off branch kept A's stamp
    assert sim.results()[0].n_eviction == 1


def test_prefix_order_builds_the_same_nodes():
    trace = [[1, 2, 3, 4], [1, 2, 5, 6]]
    _, a = _serve(trace, 8, replay_order="deepest-first")
    _, b = _serve(trace, 8, replay_order="prefix-order")
    assert a == b


def test_micro_takes_at_most_micro_batch_per_sample():
    # one old 6-block node and a fresh one; C needs 4 slots: micro-batch=2 trims the old node twice
    # (it stays the lowest score), drain takes all 4 at once; both leave [1, 2] resident
    trace = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12]]
    for params in ("micro-batch=2", "eviction-mode=drain"):
        sim, nodes = _serve(trace, 8, params)
        assert nodes[-1] == [[1, 2], [7, 8], [9, 10, 11, 12]], params


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "eviction-mode=drain", "micro-batch=2,n-sample=3",
                               "eviction-mode=drain,n-sample=1"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same("partial_node_random_compute", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans(),
       params=st.sampled_from(["micro-batch=2,n-sample=3", "eviction-mode=drain,n-sample=2"]))
def test_batched_differential_raw(trace, capacity, pin, params):
    assert_same("partial_node_random_compute", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(2, 24))
def test_batched_differential_prefix_order(trace, capacity):
    assert_same("partial_node_random_compute", "micro-batch=3,n-sample=4", capacity, trace, True,
                "prefix-order")


def test_bad_mode_is_a_clear_error():
    import pytest

    from shadow.errors import ShadowError
    from shadow.sim.registry import make_policy

    for bad in ("eviction-mode=batch", "micro-batch=0", "n-sample=0"):
        with pytest.raises(ShadowError):
            make_policy("partial_node_random_compute", 8, bad)


class _PassesAlways:
    """Draws in passes from the first node on (production: from 16384 live nodes): the exact
    differential tests then check that the passes make the same draws as one at a time."""

    def setup_method(self, method):
        from shadow.sim.policies import partial_node_random_compute as m
        self._old_pass_min = m.set_pass_min_nodes(0)

    def teardown_method(self, method):
        from shadow.sim.policies import partial_node_random_compute as m
        m.set_pass_min_nodes(self._old_pass_min)


class TestPartialNodeMicroPasses(_PassesAlways, PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "micro-batch=1"


class TestPartialNodeSmallSamplePasses(_PassesAlways, PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "n-sample=2,micro-batch=1,seed=3"
