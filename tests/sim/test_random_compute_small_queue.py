"""random_compute_small_queue: shared mixin, hand-traced admission and ghost, exact batched differential."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces
from tests.sim.test_random_compute import assert_same


class TestRandomComputeSmallQueue(PolicyMixin):
    NAME = "random_compute_small_queue"
    PARAMS = "evict-batch=1"


class TestRandomComputeSmallQueueSmallGhost(PolicyMixin):
    NAME = "random_compute_small_queue"
    PARAMS = "evict-batch=1,small-size-ratio=0.3,ghost-size-ratio=0.2,n-sample=4,seed=3"


def test_small_queue_hand_traced():
    p = make_policy("random_compute_small_queue", 10, "small-size-ratio=0.2,ghost-size-ratio=0")
    for b in range(1, 11):
        p.py_get(b, vtime=b, req_vtime=b)
    assert p.small_ids() == list(range(10, 0, -1))
    p.py_get(3, vtime=11, req_vtime=11)                      # a re-access promotes to main
    assert 3 not in p.small_ids() and p.population() == [3]
    # small holds 9 > 2: its oldest unpinned blocks go first, in FIFO order
    p.py_pin(1)
    assert [p.py_evict(vtime=12) for _ in range(3)] == [2, 4, 5]
    for _ in range(4):
        p.py_evict(vtime=12)
    assert p.small_ids() == [10, 1]                         # at the target: main is sampled next
    assert p.py_evict(vtime=12) == 3
    assert p.ghost_ids() == []                               # ghost-size-ratio=0: no ghost


def test_ghost_hand_traced():
    # small target 2, ghost of 3 ids
    p = make_policy("random_compute_small_queue", 10, "small-size-ratio=0.2,ghost-size-ratio=0.3")
    for b in range(1, 11):
        p.py_get(b, vtime=b, req_vtime=b)
    assert [p.py_evict(vtime=11) for _ in range(4)] == [1, 2, 3, 4]
    assert p.ghost_ids() == [4, 3, 2]                        # newest first; 1 fell off the ghost
    p.py_get(3, vtime=12, req_vtime=12)                      # back from the ghost: straight to main
    assert p.population() == [3] and 3 not in p.small_ids()
    assert p.ghost_ids() == [4, 2]
    p.py_get(1, vtime=13, req_vtime=13)                      # forgotten by the ghost: small again
    assert p.small_ids()[0] == 1 and 1 not in p.population()
    assert p.stats(3) == (12, 1.0, 1)                        # fresh statistics in main
    # main's victims leave no ghost
    q = make_policy("random_compute_small_queue", 4, "small-size-ratio=0,ghost-size-ratio=1")
    for b in (1, 2, 3, 4):
        q.py_get(b, vtime=b, req_vtime=b)
        q.py_get(b, vtime=b, req_vtime=b)                    # promoted: all in main
    assert sorted(q.population()) == [1, 2, 3, 4]
    v = q.py_evict(vtime=9)
    assert v in (1, 2, 3, 4) and q.ghost_ids() == []


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "n-sample=3,evict-batch=2,small-size-ratio=0.3",
                               "small-size-ratio=0,evict-batch=3",
                               "n-sample=3,small-size-ratio=0.2,ghost-size-ratio=0.3",
                               "evict-batch=2,small-size-ratio=0.5,ghost-size-ratio=2",
                               "ghost-size-ratio=0,small-size-ratio=0.25"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same("random_compute_small_queue", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans())
def test_batched_differential_raw(trace, capacity, pin):
    assert_same("random_compute_small_queue", "n-sample=3,evict-batch=2,ghost-size-ratio=0.5",
                capacity, trace, pin)


@pytest.mark.parametrize("trace, capacity", [
    ([[1], [1, 2], [1, 3, 4, 5, 6, 7, 8, 9, 10, 11]], 10),
    ([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 8, 9]], 7),
])
def test_main_all_pinned_takes_victims_from_small(trace, capacity):
    """Regression: main holding fewer unpinned blocks than wanted must not give pinned ones
    while small holds unpinned blocks (found by the mixin's Hypothesis search)."""
    from shadow.sim import CacheSpec, Simulator
    from shadow.trace.batch import Batch
    from tests.sim._traces import next_access

    params = "evict-batch=1,small-size-ratio=0.3,ghost-size-ratio=0.2,n-sample=4,seed=3"
    sim = Simulator([CacheSpec("random_compute_small_queue", capacity, params)], pin=True)
    sim.feed(Batch.from_lists(trace, next_access=next_access(trace)))
    r = sim.results()[0]
    assert r.error is None and r.n_self_eviction == 0


def test_small_fifo_positions_shared_with_main_across_compactions():
    """Small's ring positions live in the sampling set's ``pos`` (negative there): promotions
    leave tombstones, pushes compact the ring many times, and small's order and main's
    population stay what a list model says."""
    cap = 40
    p = make_policy("random_compute_small_queue", cap, "small-size-ratio=0,ghost-size-ratio=0")
    small: list[int] = []           # newest first
    main: set[int] = set()
    t = 0
    for nxt in range(1, 400):
        t += 1
        if len(small) + len(main) == cap:
            v = p.py_evict(vtime=t)  # small holds more than its target (0): its oldest goes
            assert v == small.pop()
        p.py_get(nxt, vtime=t, req_vtime=t)
        small.insert(0, nxt)
        if nxt % 3 == 0 and len(small) > 4:
            b = small.pop(len(small) // 2)           # a hit promotes a block from the middle
            t += 1
            p.py_get(b, vtime=t, req_vtime=t)
            main.add(b)
        assert p.small_ids() == small
        assert set(p.population()) == main
