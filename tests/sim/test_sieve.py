from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestSieve(PolicyMixin):
    NAME = "sieve"


def test_sieve_hand_hand_traced():
    p = make_policy("sieve", 4)
    for b in (1, 2, 3, 4):           # tail->head: 1 2 3 4
        p.py_get(b)
    p.py_get(1)
    p.py_get(3)                      # visited: 1, 3
    assert p.py_evict() == 2         # hand clears 1, evicts 2, stays at 3
    p.py_get(5)                      # inserted at the head: 1 3 4 5
    assert p.py_evict() == 4         # hand at 3: clear it, evict 4
    assert p.py_evict() == 5         # hand at 5 (4's successor)
    assert sorted(p.resident_ids()) == [1, 3]


def test_sieve_pinned_skipped():
    p = make_policy("sieve", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    p.py_pin(1)
    p.py_pin(2)
    assert p.py_evict() == 3
