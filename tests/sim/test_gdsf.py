from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestGDSF(PolicyMixin):
    NAME = "gdsf"


class TestGDSFCostAware(PolicyMixin):
    NAME = "gdsf"
    PARAMS = "cost-aware=true"


def test_gdsf_hand_traced():
    p = make_policy("gdsf", 3)
    for b in (1, 2, 3):
        p.py_get(b)                    # priority 1e6 each; ties by insert order
    p.py_get(2)                        # 2e6
    assert p.py_evict() == 1           # lowest priority, oldest among equals
    assert p.L == 1e6
    p.py_get(4)                        # L + 1e6 = 2e6, newer than 2's stamp
    assert [b for b, _ in p.order()] == [3, 2, 4]
    assert p.py_evict() == 3
    p.py_pin(2)
    assert p.py_evict() == 4           # 2 pinned (priority 2e6, older than 4)
    assert p.L == 2e6


def test_gdsf_cost_aware_prefers_to_keep_costly():
    p = make_policy("gdsf", 2, "cost-aware=true")
    p.py_get(1, cost=500)
    p.py_get(2, cost=5)
    assert p.py_evict() == 2
