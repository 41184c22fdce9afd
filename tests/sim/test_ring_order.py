"""The lazy-deletion ring (``LRing``, policies/_shared/dlist.pxd) under lru and fifo, and fifo's list form (an
``SOrder`` is a list below LR_RING_MIN slots, a ring from there on): a long random mix of gets,
pins, evictions and removes on a small cache (so the ring compacts many times and victims are
often taken behind pinned blocks), each form forced, checked step by step against a plain list
model."""

import random

import pytest

from shadow.sim.policies._shared.dlist import set_ring_min_slots
from shadow.sim.registry import make_policy


class ListModel:
    """Resident ids oldest first (the next victim first); ``touch`` says whether a hit moves."""

    def __init__(self, capacity: int, touch: bool):
        self.capacity = capacity
        self.touch = touch
        self.q: list[int] = []
        self.pins: dict[int, int] = {}

    def evict(self) -> int:
        if not self.q:
            return 0
        for b in self.q:
            if self.pins.get(b, 0) == 0:
                break
        else:
            b = self.q[0]
        self.q.remove(b)
        self.pins.pop(b, None)
        return b

    def get(self, b: int) -> bool:
        if b in self.q:
            if self.touch:
                self.q.remove(b)
                self.q.append(b)
            return True
        if len(self.q) >= self.capacity:
            self.evict()
        self.q.append(b)
        return False


@pytest.mark.parametrize("name,touch,ring", [("lru", True, True), ("fifo", False, True),
                                             ("fifo", False, False)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ring_order_matches_a_list(name: str, touch: bool, ring: bool, seed: int) -> None:
    rng = random.Random(seed)
    cap = 7
    old = set_ring_min_slots(0 if ring else 1 << 40)
    try:
        p = make_policy(name, cap)
    finally:
        set_ring_min_slots(old)
    assert getattr(p, "uses_ring", True) == ring
    m = ListModel(cap, touch)
    for step in range(4000):
        op = rng.random()
        if op < 0.6:
            b = rng.randint(1, 12)
            assert p.py_get(b) == m.get(b), step
        elif op < 0.75 and m.q:
            b = rng.choice(m.q)
            if m.pins.get(b, 0) > 0 and rng.random() < 0.5:
                p.py_pin(b, -1)
                m.pins[b] -= 1
            else:
                p.py_pin(b)
                m.pins[b] = m.pins.get(b, 0) + 1
        elif op < 0.9:
            assert p.py_evict() == m.evict(), step
        elif m.q:
            b = rng.choice(m.q)
            p.py_remove(b)
            m.q.remove(b)
            m.pins.pop(b, None)
        assert p.order() == m.q[::-1], step


def test_fifo_order_form_by_size() -> None:
    """fifo: a list below LR_RING_MIN (32768) slots, a ring from there on."""
    assert not make_policy("fifo", 32767).uses_ring
    assert make_policy("fifo", 32768).uses_ring
