"""random reference: the same splitmix64 draws over the same dense population as
``policies/recency/random.pyx`` (libCacheSim ``Random``, libCacheSim/cache/eviction/Random.c), so both
evict the same blocks in the same order."""

from __future__ import annotations

from shadow.sim.reference.random_compute import DenseSet, SplitMix64

DEFAULTS = "seed=1"
HONOURS_PINS = True

#: draws per wanted candidate while some but not all resident blocks are pinned
DRAWS_PER_CANDIDATE = 64


class Random:
    """Resident ids in ``dense`` (an insert appends, a removal moves the last into the hole); a
    hit changes nothing; the victim is a uniform draw."""

    def __init__(self, capacity: int, seed: int = 1) -> None:
        self.capacity = capacity
        self.rng = SplitMix64(seed)
        self.dense = DenseSet()

    def __len__(self) -> int:
        return self.dense.n

    def find(self, b: int) -> bool:
        return b in self.dense

    def hit(self, b: int, acc: object) -> None:
        pass

    def insert(self, b: int, acc: object) -> None:
        self.dense.add(b)

    def draws(self, k: int, pinned: set[int]) -> list[int]:
        """Up to ``k`` drawn ids: nothing or everything pinned, ``k`` plain draws; otherwise the
        unpinned ones of at most ``k * DRAWS_PER_CANDIDATE`` draws, or if there are none the first
        unpinned id in population order."""
        n = self.dense.n
        if n == 0:
            return []
        n_pinned = sum(1 for b in pinned if b in self.dense)
        if n_pinned == 0 or n_pinned >= n:
            return [self.dense.items[self.rng.below(n)] for _ in range(k)]
        out: list[int] = []
        for _ in range(k * DRAWS_PER_CANDIDATE):
            if len(out) == k:
                break
            b = self.dense.items[self.rng.below(n)]
            if b not in pinned:
                out.append(b)
        return out or [next(b for b in self.dense.live() if b not in pinned)]

    def evict(self, acc: object, pinned: set[int]) -> int:
        got = self.draws(1, pinned)
        if not got:
            return 0
        self.remove(got[0])
        return got[0]

    def remove(self, b: int) -> None:
        self.dense.remove(b)

    def on_request(self, ctx: object) -> None:
        pass


def make(capacity: int, params: dict) -> Random:
    return Random(capacity, int(params["seed"]))
