"""lru_prob reference: the LRU reference's list, where a hit moves the block to the most recent
end only when a splitmix64 draw ``% threshold`` is 0 (see ``policies/recency/lru_prob.pyx``)."""

from __future__ import annotations

import struct

from shadow.sim.reference.lru import LRU
from shadow.sim.reference.random_compute import SplitMix64

DEFAULTS = "prob=0.5,seed=1"
HONOURS_PINS = True


def threshold_of(prob: float) -> int:
    """``floor(1 / float32(prob))`` (libCacheSim parses ``prob`` with ``strtof``)."""
    p32 = struct.unpack("f", struct.pack("f", prob))[0]
    if not (0.0 < prob <= 1.0) or p32 <= 0.0:
        raise ValueError(f"prob must be in (0, 1], got {prob}")
    return int(1.0 / p32)


class LRUProb(LRU):
    """``q``'s first item is the victim end (tail), its last the head.  An insert goes to the head;
    a hit draws once and goes to the head iff the draw ``% threshold == 0``; the victim is the
    first unpinned item from the tail (all pinned: the tail)."""

    def __init__(self, capacity: int, threshold: int, seed: int) -> None:
        super().__init__(capacity)
        self.threshold = threshold
        self.rng = SplitMix64(seed)

    def hit(self, b: int, acc) -> None:
        if self.rng.next() % self.threshold == 0:
            self.q.move_to_end(b)


def make(capacity: int, params: dict) -> LRUProb:
    return LRUProb(capacity, threshold_of(float(params["prob"])), int(params["seed"]))
