"""car: shared mixin, hand-traced rules (a set bit moves T1 -> T2, replace's choice of clock, B1 and
B2 hits adapting ``p`` and entering T2, the ghost bounds), pins (a pinned head is passed, an
all-pinned clock gives way to the other, best effort), and bad parameters.  libcachesim has no
CAR: the reference (shadow/sim/reference/car.py) is the only oracle."""

from __future__ import annotations

import pytest

from shadow.errors import ShadowError
from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestCAR(PolicyMixin):
    NAME = "car"


class TestCARStartingP(PolicyMixin):
    NAME = "car"
    PARAMS = "p=3"


def _get(p, *ids):
    for b in ids:
        p.py_get(b)


def test_set_bit_moves_t1_to_t2_and_ghost_hits_adapt_p():
    p = make_policy("car", 4)
    _get(p, 1, 2, 3, 4, 1, 2)                  # T1 1 2 3 4 (hand first), bits on 1 and 2
    assert p.clocks()["ref"] == {1, 2}
    # |T1| = 4 >= max(1, p = 0): T1.  1 and 2 have their bits: cleared, to T2's tail; 3 goes
    assert p.py_evict() == 3
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b1"], c["ref"]) == ([4], [1, 2], [3], set())
    _get(p, 5)                                 # T1 4 5
    assert p.py_evict() == 4                   # |T1| = 2 >= 1: T1's head
    assert p.clocks()["b1"] == [3, 4]
    _get(p, 3)                                 # B1 hit: p = 0 + max(1, 0 // 2) = 1, to T2's tail
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b1"], c["p"]) == ([5], [1, 2, 3], [4], 1.0)
    assert p.py_evict() == 5                   # |T1| = 1 >= max(1, 1)
    _get(p, 4)                                 # B1 hit: p = 1 + max(1, 0 // 2) = 2
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b1"], c["p"]) == ([], [1, 2, 3, 4], [5], 2.0)
    assert p.py_evict() == 1                   # T1 empty: T2's head, to B2
    _get(p, 6)                                 # T1 6; |B1| = 1, |B2| = 1
    p.py_evict()                               # |T1| = 1 < p = 2: T2's head 2
    c = p.clocks()
    assert (c["b1"], c["b2"]) == ([5], [1, 2])
    _get(p, 1)                                 # B2 hit: p = max(2 - max(1, 1 // 2), 0) = 1
    c = p.clocks()
    assert (c["t2"], c["b2"], c["p"]) == ([3, 4, 1], [2], 1.0)


def test_b2_hit_lowers_p_by_the_size_ratio():
    p = make_policy("car", 6)
    _get(p, 1, 2, 3, 1, 2, 3, 4, 5, 6)        # T1 1..6, bits on 1 2 3
    assert p.py_evict() == 4                   # 1 2 3 to T2, 4 to B1
    _get(p, 7)
    assert p.py_evict() == 5
    _get(p, 8)
    assert p.py_evict() == 6
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b1"]) == ([7, 8], [1, 2, 3], [4, 5, 6])
    _get(p, 4)                                 # B1 hit: p = 0 + max(1, 0 // 3) = 1
    assert p.py_evict() == 7                   # |T1| = 2 >= 1
    _get(p, 5)                                 # B1 hit: p = 2
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b1"], c["p"]) == ([8], [1, 2, 3, 4, 5], [6, 7], 2.0)
    assert p.py_evict() == 1                   # |T1| = 1 < 2: T2's head to B2
    _get(p, 1)                                 # B2 hit: p = max(2 - max(1, 2 // 1), 0) = 0
    c = p.clocks()
    assert (c["t2"], c["b2"], c["p"]) == ([2, 3, 4, 5, 1], [], 0.0)


def test_b1_hit_raises_p_by_the_size_ratio():
    p = make_policy("car", 4)
    _get(p, 1, 2, 3, 4, 1, 2, 3)
    assert p.py_evict() == 4                   # 1 2 3 to T2, 4 to B1
    for b in (5, 6, 7):
        _get(p, b)
        assert p.py_evict() == b               # T1's only block, to B1
    assert p.clocks()["b1"] == [5, 6, 7]       # |T1| + |B1| = 4 >= C dropped 4
    assert p.py_evict() == 1                   # T1 empty: T2's heads go to B2
    assert p.py_evict() == 2
    c = p.clocks()
    assert (c["t2"], c["b1"], c["b2"], c["p"]) == ([3], [5, 6, 7], [1, 2], 0.0)
    _get(p, 5)                                 # p = 0 + max(1, 2 // 3) = 1
    assert p.clocks()["p"] == 1.0
    _get(p, 6)                                 # p = 1 + max(1, 2 // 2) = 2
    assert p.clocks()["p"] == 2.0
    _get(p, 7)                                 # p = min(2 + max(1, 2 // 1), 4) = 4
    c = p.clocks()
    assert (c["t2"], c["b1"], c["p"]) == ([3, 5, 6, 7], [], 4.0)


def test_replace_takes_t2_when_t1_is_below_target():
    p = make_policy("car", 4, "p=3")
    _get(p, 1, 2, 3, 4, 1, 2)
    # |T1| = 4 >= 3: 1 to T2; |T1| = 3 >= 3: 2 to T2; |T1| = 2 < 3: T2's head 1 (bit cleared) goes
    assert p.py_evict() == 1
    c = p.clocks()
    assert (c["t1"], c["t2"], c["b2"]) == ([3, 4], [2], [1])
    _get(p, 5)
    assert p.py_evict() == 3                   # |T1| = 3 >= 3: T1's head
    assert p.clocks()["b1"] == [3]


def test_ghost_bounds():
    p = make_policy("car", 4)
    _get(p, 1, 2, 3, 4)
    assert p.py_evict() == 1                   # 1 to B1, then |T1| + |B1| = 4 >= C: B1 drops it
    assert p.clocks()["b1"] == []
    q = make_policy("car", 2)
    _get(q, 1, 2, 1, 2)
    assert q.py_evict() == 1                   # 1, 2 to T2; T1 empty: T2's head 1 to B2
    _get(q, 3, 3)
    assert q.py_evict() == 2                   # 3 to T2 (bit); T2's head 2 to B2
    _get(q, 4, 4)
    assert q.py_evict() == 3                   # B2 1 2 3: |T1|+|T2|+|B1|+|B2| = 4 >= 2C: drop 1
    c = q.clocks()
    assert (c["t2"], c["b2"]) == ([4], [2, 3])


def test_pinned_head_is_passed_and_keeps_its_clock():
    p = make_policy("car", 3)
    _get(p, 1, 2, 3)
    p.py_pin(1)
    assert p.py_evict() == 2                   # 1 pinned: to T1's tail, its bit still clear
    c = p.clocks()
    assert (c["t1"], c["t2"], c["ref"]) == ([3, 1], [], set())


def test_all_pinned_clock_gives_way_then_best_effort():
    p = make_policy("car", 3)
    _get(p, 1, 2, 3, 3)
    p.py_pin(1)
    p.py_pin(2)
    # T1: 1, 2 passed; 3 has its bit: to T2; T1 (1 2) is passed round once: exhausted; T2: 3
    assert p.py_evict() == 3
    assert p.clocks()["b2"] == [3]
    _get(p, 4)
    p.py_pin(4)
    # every block pinned: T1 (T2 is empty) is passed round once (1 2 4), then its head goes
    assert p.py_evict() == 1
    assert p.clocks()["t1"] == [2, 4]


def test_bad_p():
    with pytest.raises(ShadowError, match=r"policy car: p must be >= 0, got -1"):
        make_policy("car", 4, "p=-1")


def test_p_above_the_cache_is_the_cache():
    assert make_policy("car", 4, "p=9").clocks()["p"] == 4.0


def test_reference_follows_the_same_traces():
    # the hand traces above, through the reference: same victims
    from shadow.sim.reference import make_reference

    seq = [("g", 1), ("g", 2), ("g", 3), ("g", 4), ("g", 1), ("g", 2), ("e", 3), ("g", 5),
           ("e", 4), ("g", 3), ("e", 5), ("g", 4), ("e", 1), ("g", 6), ("e", 2), ("g", 1)]
    ref, pol = make_reference("car", 4), make_policy("car", 4)
    for op, b in seq:
        if op == "g":
            pol.py_get(b)
            if ref.find(b):
                ref.hit(b)
            else:
                ref.insert(b)
        else:
            assert pol.py_evict() == ref.evict() == b
    assert (list(ref.t2), list(ref.b2), ref.p) == ([3, 4, 1], [2], 1.0)
