"""size: shared mixin, a hand-traced eviction order, and libcachesim's ``Size`` get by get (the
spec names ``Size``, so tests/sim/test_vs_libcachesim.py compares the serve loop too)."""

from __future__ import annotations

import pytest

from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin
from tests.sim.test_lfuda import conversation_gets, libcachesim_gets, shadow_gets


class TestSize(PolicyMixin):
    NAME = "size"


def test_size_hand_traced():
    # libCacheSim's tied heap: the root goes and the array's last entry takes its place
    p = make_policy("size", 3)
    for b in (1, 2, 3):
        p.py_get(b)
    assert p.order() == [1, 2, 3]
    p.py_get(4)                        # evicts 1; 3 moves to the root
    assert p.order() == [3, 2, 4]
    p.py_get(2)                        # a hit changes nothing
    p.py_get(5)                        # evicts 3, the newest before 4
    assert p.order() == [4, 2, 5]
    p.py_pin(4)
    assert p.py_evict() == 2           # 4 pinned: the next entry; 5 takes its place
    assert p.order() == [4, 5]


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [100, 1000, 10000])
def test_size_same_gets_as_libcachesim_on_the_conversation_trace(capacity):
    stream = conversation_gets()
    want = libcachesim_gets("Size", capacity, stream, timeout_s=60.0)
    assert len(want) == len(stream)
    assert shadow_gets("size", capacity, stream) == want
