from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin, RingAlways


class TestFIFO(PolicyMixin):
    NAME = "fifo"


class TestFIFORing(RingAlways, TestFIFO):
    """The same tests with the order kept as a ring (a production cache of 32k+ slots)."""


def test_fifo_eviction_order_hand_traced():
    p = make_policy("fifo", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    assert p.py_get(1)               # a hit does not reorder
    assert p.py_evict() == 1
    p.py_get(4)
    p.py_pin(2)
    assert p.py_evict() == 3
    assert p.order() == [4, 2]
