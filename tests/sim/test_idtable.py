"""The resident table (SlotMap), with and without fp_home, against a dict, through idtable.SlotTable."""

import random

import pytest

from shadow.sim.idtable import SlotTable


def test_home_from_fingerprint_only_in_small_tables() -> None:
    # NOTE: 4-byte entries at load 1/4 (16 B per slot); the fingerprint alone gives the home
    # only while it has 2 bits more than the table size needs (up to ~11k slots).
    for capacity, fp_home in ((1, True), (8192, True), (11000, True), (20000, False), (1 << 19, False)):
        t = SlotTable(capacity)
        assert t.fp_home is fp_home, capacity
        assert t.size * 4 <= 16 * max(capacity, 4)


@pytest.mark.parametrize("capacity", [5, 300, 8192, 20000, 70000])
def test_random_churn_matches_dict(capacity: int) -> None:
    rng = random.Random(capacity)
    t = SlotTable(capacity)
    ref: dict[int, int] = {}
    free = list(range(capacity))
    rng.shuffle(free)
    # NOTE: keys from a small range (so deletes and re-inserts of the same key happen) plus
    # huge and negative ones; the table stays at or near full most of the time.
    universe = 3 * capacity
    steps = 6 * capacity + 2000
    for step in range(steps):
        key = rng.randrange(1, universe)
        if rng.random() < 0.1:
            key = rng.choice((key << 40, -key, (1 << 63) - key))
        slot = t.get(key)
        assert slot == ref.get(key, -1)
        if slot >= 0:
            if rng.random() < 0.5:
                t.delete(slot)
                del ref[key]
                free.append(slot)
        elif free:
            s = free.pop()
            t.put(key, s)
            ref[key] = s
        else:
            victim = rng.choice(list(ref)) if capacity < 1000 else next(iter(ref))
            s = ref.pop(victim)
            t.delete(s)
            free.append(s)
        if step % (capacity + 1) == 0:
            t.check()
    t.check()
    assert len(t) == len(ref)
    for key, slot in ref.items():
        assert t.get(key) == slot


def test_full_large_table_drains() -> None:
    capacity = 40000
    t = SlotTable(capacity)
    keys = random.Random(1).sample(range(1, 1 << 62), capacity)
    for s, key in enumerate(keys):
        t.put(key, s)
    t.check()
    assert len(t) == capacity
    for s in range(0, capacity, 2):
        t.delete(s)
    t.check()
    for s, key in enumerate(keys):
        assert t.get(key) == (s if s % 2 else -1)
    for s in range(1, capacity, 2):
        t.delete(s)
    assert len(t) == 0
    t.check()


def test_bad_arguments_raise() -> None:
    t = SlotTable(16)
    t.put(7, 3)
    with pytest.raises(ValueError):
        t.put(7, 4)
    with pytest.raises(ValueError):
        t.put(8, 3)
    with pytest.raises(ValueError):
        t.delete(5)
    with pytest.raises(ValueError):
        SlotTable(0)
