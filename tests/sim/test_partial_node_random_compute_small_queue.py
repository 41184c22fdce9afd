"""partial_node_random_compute_small_queue: shared mixin, hand-traced queue rules, exact batched
differential (the main set is partial_node_random_compute's, tested there)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.registry import make_policy
from shadow.trace.batch import Batch
from tests.sim.policy_mixin import PolicyMixin, prefix_traces
from tests.sim.test_random_compute import assert_same

NAME = "partial_node_random_compute_small_queue"


class TestPartialNodeSmallQueue(PolicyMixin):
    NAME = NAME
    PARAMS = "micro-batch=1"     # one block per sample: the one-evict-at-a-time reference loop is exact


class TestPartialNodeSmallQueueThreshold1(PolicyMixin):
    NAME = NAME
    PARAMS = "micro-batch=1,n-sample=2,small-size-ratio=0.3,ghost-size-ratio=0.5,move-to-main-threshold=1"


def _serve(trace, capacity, params=""):
    sim = Simulator([CacheSpec(NAME, capacity, params)], pin=True, cost_model="uniform")
    for i, req in enumerate(trace):
        sim.feed(Batch.from_lists([req], first_request=i))
    return sim, sim.runs[0].policy


def test_fills_main_first_then_small():
    # C=10: small 1, ghost 9.  Before the first eviction main takes every id once small is full.
    sim, p = _serve([[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]], 10)
    q = p.queue()
    assert (p.small_size, p.ghost_size) == (1, 9)
    assert q["small"] == [3]                  # deepest-first: 3 came first and filled small
    assert sorted(b for _, path in p.node_paths() for b in path) == [1, 2, 4, 5, 6, 7, 8, 9, 10]


def test_small_drop_ghost_and_promotion():
    p = make_policy(NAME, 10)                 # small 1, main 9 (its share), threshold 2
    for b in range(1, 11):
        p.py_get(b, vtime=b)                  # 1 in small, 2..10 in main (small full)
    assert p.queue()["small"] == [1]
    # main holds 9 <= 10 - 1: small gives the block; 1 (freq 0 < 2) leaves into the ghost
    assert p.py_evict(vtime=11) == 1
    assert p.queue()["ghost"] == [1]
    p.py_get(11, vtime=12)                    # after the first eviction: small
    p.py_get(11, vtime=13)
    p.py_get(11, vtime=14)                    # freq 2
    assert p.queue()["freq"] == {11: 2}
    # small's 11 reaches the threshold: promoted (a node of its own stamped 15); small is then
    # empty, so main gives the victim
    v = p.py_evict(vtime=15)
    assert v not in (11, 0) and p.queue()["small"] == []
    assert (15, [11]) in p.node_paths()
    p.py_get(1, vtime=16)                     # ghost hit: straight to main, the ghost forgets it
    assert p.queue() == {"small": [], "freq": {}, "ghost": []}
    assert any(path == [1] for _, path in p.node_paths())


def test_main_over_its_share_evicts_from_main():
    p = make_policy(NAME, 10, "small-size-ratio=0.3")     # small 3, main share 7
    for b in range(1, 11):
        p.py_get(b, vtime=b)                  # small 1 2 3, main 4..10 (7 blocks)
    assert p.py_evict(vtime=11) == 1          # main 7 <= 7: small's oldest
    p.py_get(1, vtime=12)                     # ghost hit: main 8 > 7
    v = p.py_evict(vtime=13)
    assert v not in (2, 3) and p.queue()["small"] == [2, 3]


def test_pinned_small_block():
    p = make_policy(NAME, 10, "small-size-ratio=0.3")
    for b in range(1, 11):
        p.py_get(b, vtime=b)                  # small 1 2 3
    p.py_pin(1)                               # would leave: passed over, keeps its place
    assert p.py_evict(vtime=11) == 2
    assert p.queue()["small"] == [1, 3]
    p.py_pin(3)
    # small has only pinned blocks that would leave: main gives the victim
    v = p.py_evict(vtime=12)
    assert v not in (1, 3, 0) and p.queue()["small"] == [1, 3]
    p.py_get(1, vtime=13)
    p.py_get(1, vtime=14)                     # freq 2: promoted even though pinned
    p.py_evict(vtime=15)
    assert 1 not in p.queue()["small"] and p.py_find(1) >= 0


@pytest.mark.parametrize("params,message", [
    ("small-size-ratio=0", "small-size-ratio must be in (0, 1)"),
    ("ghost-size-ratio=-1", "ghost-size-ratio must be in [0, 4]"),
    ("move-to-main-threshold=256", "move-to-main-threshold must be in [1, 255]"),
    ("eviction-mode=x", "eviction-mode must be 'micro' or 'drain'"),
])
def test_refuses_out_of_range(params, message):
    with pytest.raises(ShadowError) as e:
        make_policy(NAME, 100, params)
    assert str(e.value).startswith(f"policy {NAME}: ") and message in str(e.value)


@pytest.mark.slow
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "eviction-mode=drain", "micro-batch=2,n-sample=3",
                               "small-size-ratio=0.4,move-to-main-threshold=1,micro-batch=3"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same(NAME, params, capacity, trace, pin)
