from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestGDSFCompute(PolicyMixin):
    NAME = "gdsf_compute"


def test_gdsf_compute_clock_and_priorities():
    p = make_policy("gdsf_compute", 3)
    p.py_get(1, cost=5)                  # L 0: pri 5
    p.py_get(2, cost=3)                  # pri 3
    p.py_get(3, cost=4)                  # pri 4
    p.py_get(2, cost=99)                 # hit: freq 2 x the cost kept at insert (3) = 6
    assert p.order() == [(3, 4.0), (1, 5.0), (2, 6.0)]
    assert p.py_evict() == 3 and p.L == 4.0       # the minimum leaves, L = its priority
    p.py_get(4, cost=1)                  # L + cost = 5: ties with 1, inserted later
    assert p.order() == [(1, 5.0), (4, 5.0), (2, 6.0)]
    assert p.py_evict() == 1 and p.L == 5.0       # tie: the older insert/hit goes first
    p.py_get(2)                          # hit: L 5 + freq 3 x 3 = 14
    assert p.order() == [(4, 5.0), (2, 14.0)]
    assert p.py_evict() == 4 and p.L == 5.0


def test_gdsf_compute_tie_goes_by_last_access_not_insert():
    p = make_policy("gdsf_compute", 3)
    p.py_get(1, cost=2)                  # pri 2
    p.py_get(2, cost=1)                  # pri 1
    p.py_get(2)                          # pri 2, stamped after 1
    p.py_get(3, cost=2)                  # pri 2, newest
    assert [b for b, _ in p.order()] == [1, 2, 3]
    assert p.py_evict() == 1


def test_gdsf_compute_find_has_no_side_effect():
    """The fork's find advanced n_req on every probe; here probes change no order."""
    a, b = make_policy("gdsf_compute", 4), make_policy("gdsf_compute", 4)
    for p in (a, b):
        for blk, c in ((1, 3), (2, 3), (3, 3), (4, 3)):
            p.py_get(blk, cost=c)
    for _ in range(5):
        for blk in (4, 3, 2, 1, 9):
            a.py_find(blk)
    assert a.order() == b.order() and a.L == b.L == 0.0
    assert a.py_evict() == b.py_evict() == 1


def test_gdsf_compute_pinned_candidate():
    p = make_policy("gdsf_compute", 3)
    p.py_get(1, cost=1)
    p.py_get(2, cost=2)
    p.py_get(3, cost=3)
    p.py_pin(1)
    assert p.py_evict() == 2 and p.L == 2.0       # 1 is the minimum but pinned: next lowest
    p.py_pin(3)
    assert p.py_evict() == 1 and p.L == 1.0       # all pinned: the plain minimum (L may fall)
