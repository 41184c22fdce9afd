"""randomtwo reference: ``random``'s draws (reference/random.py), two per eviction, and the less
recently used of the two goes (libCacheSim ``RandomTwo``, libCacheSim/cache/eviction/RandomTwo.c);
the same decisions as ``policies/recency/randomtwo.pyx``."""

from __future__ import annotations

from shadow.sim.reference.random import Random

DEFAULTS = "seed=1"
HONOURS_PINS = True


class RandomTwo(Random):
    """``stamp[b]``: vtime of b's last get.  The victim is the least ``stamp`` of ``K`` draws;
    equal stamps go to the later draw if ``TIES_LATER`` (libCacheSim's ``<``), else the earlier."""

    K = 2
    TIES_LATER = True

    def __init__(self, capacity: int, seed: int = 1) -> None:
        super().__init__(capacity, seed)
        self.stamp: dict[int, int] = {}

    def hit(self, b: int, acc: object) -> None:
        self.stamp[b] = acc.vtime

    def insert(self, b: int, acc: object) -> None:
        super().insert(b, acc)
        self.stamp[b] = acc.vtime

    def evict(self, acc: object, pinned: set[int]) -> int:
        cands = self.draws(self.K, pinned)
        if not cands:
            return 0
        victim = cands[0]
        for b in cands[1:]:
            if self.stamp[b] < self.stamp[victim] or (
                    self.TIES_LATER and self.stamp[b] == self.stamp[victim]):
                victim = b
        self.remove(victim)
        return victim

    def remove(self, b: int) -> None:
        super().remove(b)
        del self.stamp[b]


def make(capacity: int, params: dict) -> RandomTwo:
    return RandomTwo(capacity, int(params["seed"]))
