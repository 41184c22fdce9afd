from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestClock(PolicyMixin):
    NAME = "clock"


class TestClockTwoBit(PolicyMixin):
    NAME = "clock"
    PARAMS = "n-bit-counter=2"


def test_clock_second_chance_hand_traced():
    p = make_policy("clock", 3)
    for b in (1, 2, 3):              # queue tail->head: 1 2 3, all bits 0
        p.py_get(b)
    p.py_get(1)                      # 1's bit set
    assert p.py_evict() == 2         # 1 gets a second chance (to the head), 2 goes
    p.py_get(4)                      # tail->head: 3 1 4
    assert p.py_evict() == 3
    assert p.py_evict() == 1
    assert p.resident_ids() == [4]


def test_clock_pinned_candidate_passed_over():
    p = make_policy("clock", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    p.py_pin(1)
    assert p.py_evict() == 2
