import numpy as np
import pytest

from shadow.sim.registry import make_policy
from tests.sim._traces import random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestARC(PolicyMixin):
    NAME = "arc"


def test_arc_hand_traced():
    p = make_policy("arc", 4)
    for b in (1, 2, 3, 4):
        p.py_get(b)                        # T1 [4 3 2 1]
    p.py_get(2)                            # T2 [2]
    q = p.queues()
    assert q["t1"] == [4, 3, 1] and q["t2"] == [2]
    # |T1|+|B1|+1 = 4 <= 4; REPLACE: |T1| = 3 > p = 0 -> T1's tail to B1
    assert p.py_evict() == 1
    assert p.queues()["b1"] == [1]
    p.py_get(1)                            # B1 hit: p = 0 + max(0/1, 1) = 1, into T2's head
    q = p.queues()
    assert q["t2"] == [1, 2] and q["b1"] == [] and q["p"] == 1.0
    # T1 [4 3] (2 > p=1): T1's tail 3 -> B1
    assert p.py_evict() == 3
    p.py_get(5)                            # T1 [5 4]
    # |T1|+|B1|+1 = 4 <= 4, ghosts 1 < 2C; |T1| = 2 > 1: 4 -> B1
    assert p.py_evict() == 4
    assert p.queues()["b1"] == [4, 3]
    p.py_get(6)                            # T1 [6 5], |T1|+|B1| = 4
    # case A: drop B1's tail (3), then REPLACE takes T1's tail 5
    assert p.py_evict() == 5
    assert p.queues()["b1"] == [5, 4]


def test_arc_skips_pinned():
    p = make_policy("arc", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    p.py_pin(1)
    assert p.py_evict() == 2           # |T1|+|B1|+1 > C and B1 empty: no ghost
    assert p.queues()["b1"] == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [20, 32, 48])
def test_arc_same_hits_as_libcachesim_larger_caches(capacity, seed):
    lcs_test = pytest.importorskip("tests.sim.test_vs_libcachesim")
    rng = np.random.default_rng(100 + seed)
    trace = random_trace(rng, 200, n_roots=3, max_len=12, n_raw=4)
    want, want_stats = lcs_test._lcs_hits("arc", capacity, trace)
    got, _, got_c, _, _, _ = run_both("arc", "", capacity, trace, pin=False, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == want_stats["n_eviction"]
