import numpy as np
import pytest

from shadow.sim.registry import make_policy
from tests.sim._traces import random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestTwoQ(PolicyMixin):
    NAME = "twoq"


class TestTwoQSmallAin(PolicyMixin):
    NAME = "twoq"
    PARAMS = "Ain-size-ratio=0.1,Aout-size-ratio=1.0"


def test_twoq_hand_traced():
    # C=8: Ain 2, Aout 4, Am 6
    p = make_policy("twoq", 8)
    assert (p.ain_size, p.aout_size, p.am_size) == (2, 4, 6)
    for b in range(1, 9):
        p.py_get(b)                        # all new: Ain [8..1]
    p.py_get(1)                            # a hit in Ain changes nothing
    assert p.queues()["ain"] == list(range(8, 0, -1))
    assert p.py_evict() == 1               # Am empty: Ain's tail -> Aout
    assert p.py_evict() == 2
    assert p.queues()["aout"] == [2, 1]
    p.py_get(1)                            # Aout hit: into Am
    q = p.queues()
    assert q["am"] == [1] and q["aout"] == [2]
    # Ain holds 6 > 2: still evicted from Ain, oldest first
    assert p.py_evict() == 3
    for _ in (3, 2):
        p.py_evict()
    assert p.queues()["ain"] == [8, 7, 6]
    p.py_get(2)                            # Aout hit -> Am [2, 1]
    p.py_evict()                           # Ain 3 > 2: 6 goes to Aout
    assert p.queues()["ain"] == [8, 7]
    p.py_get(1)                            # Am LRU: [1, 2]
    assert p.py_evict() == 2               # Ain at its size: Am's LRU tail


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [20, 32, 48])
def test_twoq_same_hits_as_libcachesim_larger_caches(capacity, seed):
    lcs_test = pytest.importorskip("tests.sim.test_vs_libcachesim")
    rng = np.random.default_rng(100 + seed)
    trace = random_trace(rng, 200, n_roots=3, max_len=12, n_raw=4)
    want, want_stats = lcs_test._lcs_hits("twoq", capacity, trace)
    got, _, got_c, _, _, _ = run_both("twoq", "", capacity, trace, pin=False, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == want_stats["n_eviction"]
