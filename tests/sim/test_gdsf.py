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


class TestGDSFStampRenumber(PolicyMixin):
    """The shared checks and the exact differential tests with the 32-bit stamp counter wrapped
    every few dozen gets (renumbering must change no decision)."""
    NAME = "gdsf"

    def setup_method(self, method):
        from shadow.sim.policies.cost_aware import gdsf
        self._old_limit = gdsf.set_stamp_limit(40)

    def teardown_method(self, method):
        from shadow.sim.policies.cost_aware import gdsf
        gdsf.set_stamp_limit(self._old_limit)


def test_gdsf_renumbering_keeps_heap_and_order():
    import random
    from shadow.sim.policies.cost_aware import gdsf
    old = gdsf.set_stamp_limit(100)
    try:
        rng = random.Random(7)
        p = make_policy("gdsf", 50)            # limit 100 > capacity + 1: renumbers every ~50 gets
        gdsf.set_stamp_limit(old)
        q = make_policy("gdsf", 50)            # never renumbers here
        for _ in range(3000):
            b = rng.randrange(1, 120)
            assert p.py_get(b) == q.py_get(b)
            p.check_heap()
        assert p.n_renumber > 10 and q.n_renumber == 0
        assert p.order() == q.order()
    finally:
        gdsf.set_stamp_limit(old)


def test_gdsf_pinned_walk_deep_region():
    """Pin a whole subtree's worth of the lowest entries: the victim is the lowest unpinned."""
    p = make_policy("gdsf", 200)
    for b in range(1, 201):
        p.py_get(b)                        # equal priorities: the stamp orders them, 1 lowest
    for b in range(1, 150):
        p.py_pin(b)
    assert p.py_evict() == 150
    p.check_heap()
