"""FIFO reference: LRU's queue without the move on a hit, so insertion order only."""

from __future__ import annotations

from shadow.sim.reference.lru import LRU

DEFAULTS = ""
HONOURS_PINS = True


class FIFO(LRU):
    """The queue's first item is the oldest insert; a hit changes nothing."""

    def hit(self, b: int, acc) -> None:
        pass


def make(capacity: int, params: dict) -> FIFO:
    return FIFO(capacity)
