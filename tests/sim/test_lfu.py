from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestLFU(PolicyMixin):
    NAME = "lfu"


def test_lfu_hand_traced():
    p = make_policy("lfu", 4)
    for b in (1, 2, 3, 4):
        p.py_get(b)
    p.py_get(3)
    p.py_get(1)
    p.py_get(3)
    assert p.buckets() == [(1, [2, 4]), (2, [1]), (3, [3])]
    assert p.py_evict() == 2           # least frequent, first to reach it
    p.py_get(5)
    assert p.py_evict() == 4
    p.py_get(4)
    p.py_get(5)                        # 5 reaches freq 2 after 1 did
    assert p.buckets() == [(1, [4]), (2, [1, 5]), (3, [3])]
    p.py_pin(4)
    assert p.py_evict() == 1           # 4 pinned: the next candidate in order
