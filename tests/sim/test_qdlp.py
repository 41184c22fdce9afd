import numpy as np
import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.registry import make_policy
from shadow.trace.batch import Batch
from tests.sim._traces import next_access, random_trace
from tests.sim.policy_mixin import PolicyMixin


class TestQDLP(PolicyMixin):
    NAME = "qdlp"


class TestQDLPHalfFIFOClock(PolicyMixin):
    NAME = "qdlp"
    PARAMS = "fifo-size-ratio=0.5,ghost-size-ratio=0.5,main-cache=Clock,move-to-main-threshold=2"


def test_qdlp_hand_traced():
    # C=4, fifo-size-ratio=0.5: fifo 2, main 2 (Clock2: counters 0..3), ghost int(4 * 0.9) = 3
    p = make_policy("qdlp", 4, "fifo-size-ratio=0.5")
    assert (p.fifo_size, p.main_size, p.ghost_size) == (2, 2, 3)
    for b in (1, 2, 3, 4):
        p.py_get(b)                              # the FIFO takes every new block
    for b in (1, 2, 3):
        assert p.py_get(b)                       # FIFO counts 1
    q = p.queues()
    assert q["fifo"] == [4, 3, 2, 1] and q["main"] == []
    # 1 and 2 move to main (not full); 3 finds main full: main's CLOCK victim 1 goes, 3 moves in
    assert p.py_evict() == 1
    q = p.queues()
    assert q["fifo"] == [4] and q["main"] == [3, 2] and q["ghost"] == []
    assert p.py_evict() == 4                     # count 0: into the ghost
    assert p.queues()["ghost"] == [4]
    assert p.py_evict() == 2                     # FIFO empty: main's CLOCK tail (counter 0)
    p.py_get(4)                                  # ghost hit: straight into main
    q = p.queues()
    assert q["main"] == [4, 3] and q["ghost"] == [] and q["fifo"] == []
    assert p.py_get(3)                           # main counter of 3: 1
    p.py_get(5)
    p.py_get(6)                                  # FIFO [6, 5], cache full
    assert not p.py_get(7)                       # evicts 5 (count 0) into the ghost
    assert p.queues()["ghost"] == [5] and p.py_find(5) < 0
    assert not p.py_get(5)                       # evicts 6; 5 is a ghost hit into a full main:
    q = p.queues()                               # 3 (counter 1) goes round, 4 spills out
    assert q["main"] == [5, 3] and q["freq"][3] == 0 and q["fifo"] == [7]
    assert q["ghost"] == [6] and p.py_find(4) < 0


def test_qdlp_pinned_fifo_block_passed():
    p = make_policy("qdlp", 10)
    for b in range(1, 11):
        p.py_get(b)
    p.py_pin(1)
    assert p.py_evict() == 2                     # 1 (count 0) is pinned: passed in place
    assert p.py_find(1) >= 0
    p.py_get(1)                                  # count 1: promoted at the next eviction
    assert p.py_evict() == 3 and p.queues()["main"] == [1]


def _hits(specs, trace):
    sim = Simulator(specs, pin=False, cost_model="uniform")
    nxt = next_access(trace)
    vt = 1
    for i, req in enumerate(trace):
        sim.feed(Batch.from_lists([req], next_access=[nxt[i]], first_request=i, first_vtime=vt))
        vt += len(req)
    return [(r.n_hits, r.n_eviction) for r in sim.results()]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("capacity", [8, 32])
def test_qdlp_without_promotion_or_ghost_is_fifo(capacity, seed):
    # no ghost and a threshold no block reaches in these traces: every block stays in the FIFO
    trace = random_trace(np.random.default_rng(seed), 120, n_roots=3, max_len=10, n_raw=4)
    got = _hits([CacheSpec("qdlp", capacity, "ghost-size-ratio=0,move-to-main-threshold=255"),
                 CacheSpec("fifo", capacity, "")], trace)
    assert got[0] == got[1]
