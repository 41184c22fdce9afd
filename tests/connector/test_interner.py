"""BlockInterner: dense ids, forgetting of cold ids after the horizon unless a shadow cache
holds them, and memory bounded by what was seen within one horizon (driven by a fake clock)."""

from __future__ import annotations

from shadow.connector.interner import BlockInterner


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_dense_ids_in_first_seen_order():
    it = BlockInterner(600.0)
    assert it.intern([b"a", b"b", b"a"]) == [1, 2, 1]
    assert it.intern([b"c", b"b"]) == [3, 2]
    assert it.intern([]) == []
    assert len(it) == 3 and it.next_id == 4
    assert it.intern([7, 8]) == [4, 5]  # ints are fine too (opaque keys)


def test_unseen_for_a_horizon_is_forgotten_and_gets_a_new_id():
    clock = Clock()
    it = BlockInterner(10.0, clock=clock)
    assert it.intern([b"a", b"b"]) == [1, 2]
    clock.t += 5  # half a horizon: rotate, a and b move to the old generation
    assert it.maybe_rotate() == 0
    assert it.intern([b"b"]) == [2]  # b seen again: promoted, keeps its id
    clock.t += 5
    assert it.maybe_rotate() == 1  # a not seen for a whole horizon and held by nobody
    assert it.n_forgotten == 1 and it.n_rotations == 2
    assert it.intern([b"b"]) == [2]
    assert it.intern([b"a"]) == [3]  # a new id: ids are never reused


def test_no_rotation_before_half_a_horizon():
    clock = Clock()
    it = BlockInterner(10.0, clock=clock)
    it.intern([b"a"])
    clock.t += 4.9
    assert it.maybe_rotate() == 0 and it.n_rotations == 0
    clock.t += 0.2
    it.maybe_rotate()
    assert it.n_rotations == 1


def test_held_ids_are_kept_until_no_cache_holds_them():
    clock = Clock()
    held = {1}
    it = BlockInterner(10.0, is_held=lambda i: i in held, clock=clock)
    it.intern([b"a", b"b"])
    for _ in range(4):  # two horizons: b is forgotten, a is held
        clock.t += 5
        it.maybe_rotate()
    assert it.intern([b"a"]) == [1]
    assert it.intern([b"b"]) == [3]
    held.clear()
    for _ in range(2):
        clock.t += 5
        it.maybe_rotate()
    assert it.intern([b"a"]) == [4]


def test_memory_is_bounded_by_one_horizon_of_traffic():
    """A week of traffic with no reuse: the table never holds more than ~a horizon's hashes."""
    clock = Clock()
    it = BlockInterner(60.0, clock=clock)
    per_second = 50
    peak = 0
    for s in range(3600):  # an hour at 50 new hashes/s, rotating every 30 s
        it.intern([(s, k) for k in range(per_second)])
        clock.t += 1.0
        it.maybe_rotate()
        peak = max(peak, len(it))
    assert peak <= 60 * per_second + per_second
    assert it.next_id == 3600 * per_second + 1
    assert it.n_forgotten >= (3600 - 60) * per_second


def test_clear_keeps_ids_growing():
    it = BlockInterner(10.0)
    it.intern([b"a", b"b"])
    it.clear()
    assert len(it) == 0
    assert it.intern([b"a"]) == [3]
