from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestMRU(PolicyMixin):
    NAME = "mru"


def test_mru_eviction_order_hand_traced():
    p = make_policy("mru", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    p.py_get(1)                      # order (recent first): 1 3 2
    assert p.order() == [1, 3, 2]
    assert p.py_evict() == 1         # the most recent goes
    p.py_get(4)                      # 4 3 2
    p.py_pin(4)
    assert p.py_evict() == 3         # 4 is pinned: the next most recent goes
    assert p.order() == [4, 2]
