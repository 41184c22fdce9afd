"""randomtwo: shared mixin (exact differential vs the reference, same splitmix64 draws), a hand-traced
run with the seed's first draws, and libCacheSim's tie rule.  The PyPI libcachesim package has no
RandomTwo class, so the pure-Python reference is the oracle."""

from __future__ import annotations

import pytest

from shadow.sim.reference.random_compute import SplitMix64
from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestRandomTwo(PolicyMixin):
    NAME = "randomtwo"


class TestRandomTwoOtherSeed(PolicyMixin):
    NAME = "randomtwo"
    PARAMS = "seed=99"


def test_eviction_order_hand_traced():
    # seed 1: draws over 4 items give indices 2, 2; the next four over 3 give 2, 1, 1, 2
    r = SplitMix64(1)
    assert [r.below(4) for _ in range(2)] == [2, 2]
    assert [r.below(3) for _ in range(4)] == [2, 1, 1, 2]
    p = make_policy("randomtwo", 4)
    for b in (1, 2, 3, 4):
        p.py_get(b, vtime=b)
    assert p.py_get(3, vtime=5)                       # a hit restamps: 3 is the most recent
    assert p.last_access(3) == 5
    assert p.py_evict(vtime=6) == 3                   # drawn twice: the one candidate goes
    assert p.population() == [1, 2, 4]
    assert p.py_evict(vtime=6) == 2                   # draws 4 (stamp 4), 2 (stamp 2)
    assert p.population() == [1, 4]
    p.py_get(5, vtime=6)                              # [1, 4, 5]
    p.py_pin(1)
    assert p.py_evict(vtime=7) == 4                   # draws 4 (stamp 4), 5 (stamp 6)
    assert p.population() == [1, 5]


def test_equal_stamps_go_to_the_later_draw():
    # libCacheSim RandomTwo evicts the first draw only if its stamp is strictly lower; seed 3
    # draws index 0 then 1 over two items
    r = SplitMix64(3)
    assert [r.below(2) for _ in range(2)] == [0, 1]
    p = make_policy("randomtwo", 2, "seed=3")
    p.py_get(1, vtime=7)
    p.py_get(2, vtime=7)
    assert p.py_evict(vtime=8) == 2


def test_bad_seed_is_a_clear_error():
    from shadow.errors import ShadowError

    for bad in ("seed=-1", f"seed={2**64}", "n-samples=2"):
        with pytest.raises(ShadowError):
            make_policy("randomtwo", 8, bad)
