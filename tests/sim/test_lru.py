from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestLRU(PolicyMixin):
    NAME = "lru"


def test_lru_eviction_order_hand_traced():
    p = make_policy("lru", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    p.py_get(1)                      # order (recent first): 1 3 2
    assert p.order() == [1, 3, 2]
    assert p.py_evict() == 2
    p.py_get(4)                      # 4 1 3
    p.py_pin(3)
    assert p.py_evict() == 1         # 3 is pinned: the next least recent goes
    assert p.order() == [4, 3]
