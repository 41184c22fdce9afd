import numpy as np
import pytest

from shadow.sim.registry import make_policy
from tests.sim._traces import random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestSLRU(PolicyMixin):
    NAME = "slru"


class TestSLRU2(PolicyMixin):
    NAME = "slru"
    PARAMS = "n-seg=2"


def test_slru_hand_traced():
    p = make_policy("slru", 8, "n-seg=2")          # two segments of 4
    for b in range(1, 9):
        p.py_get(b)                    # seg0 [4 3 2 1], then seg1 [8 7 6 5] (lowest with room)
    assert p.segments() == [[4, 3, 2, 1], [8, 7, 6, 5]]
    p.py_get(1)                        # promote to seg1's head; seg1 over: its tail 5 cools down
    assert p.segments() == [[5, 4, 3, 2], [1, 8, 7, 6]]
    assert p.py_evict() == 2           # lowest segment's tail
    p.py_get(9)
    assert p.segments()[0] == [9, 5, 4, 3]
    p.py_pin(3)
    assert p.py_evict() == 4           # 3 pinned


def test_slru_remainder_goes_to_low_segments():
    assert make_policy("slru", 10).seg_sizes == [3, 3, 2, 2]
    assert make_policy("slru", 2).seg_sizes == [1, 1, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [20, 32, 48])
def test_slru_same_hits_as_libcachesim_larger_caches(capacity, seed):
    lcs_test = pytest.importorskip("tests.sim.test_vs_libcachesim")
    rng = np.random.default_rng(100 + seed)
    trace = random_trace(rng, 200, n_roots=3, max_len=12, n_raw=4)
    want, want_stats = lcs_test._lcs_hits("slru", capacity, trace)
    got, _, got_c, _, _, _ = run_both("slru", "", capacity, trace, pin=False, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == want_stats["n_eviction"]
