"""The resident table (SlotMap), with and without fp_home, against a dict, through idtable.SlotTable."""

import random

import numpy as np

import pytest

from shadow.sim.core.idtable import SlotTable


def test_home_from_fingerprint_only_in_small_tables() -> None:
    # NOTE: 4-byte entries at load 1/4 (16 B per slot); the fingerprint alone gives the home
    # only while it has 2 bits more than the table size needs (up to ~11k slots).
    for capacity, fp_home in ((1, True), (8192, True), (11000, True), (20000, False), (1 << 19, False)):
        t = SlotTable(capacity)
        assert t.fp_home is fp_home, capacity
        assert t.size * 4 <= 16 * max(capacity, 4)


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lru", "gdsf", "s3fifo", "arc", "random_compute",
                                  "random_compute_small_queue"])
def test_compact_resident_table_only_from_32k_slots(name) -> None:
    """gdsf, s3fifo, arc and random_compute(_small_queue) keep 3 table entries a slot (12 B) from
    32k slots, 4 below; every other policy 4 at any size.  A compacted table still finds every
    resident id after churn."""
    from shadow.sim.registry import make_policy

    compact = name != "lru"
    assert make_policy(name, 32767).table_entries == 4 * 32767
    p = make_policy(name, 32768)
    assert p.table_entries == (3 if compact else 4) * 32768
    rng = np.random.default_rng(3)
    for t, b in enumerate(rng.integers(1, 100_000, 150_000).tolist()):
        p.py_get(b, vtime=t + 1)
    ids = p.resident_ids()
    assert len(ids) == 32768
    assert all(p.py_find(b) >= 0 for b in ids)
    absent = set(range(1, 100_000)) - set(ids)
    assert all(p.py_find(b) == -1 for b in list(absent)[:20000])
