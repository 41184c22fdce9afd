"""randomlru reference: ``random``'s draws (reference/random.py), ``n-samples`` per eviction, and
the least recently used drawn block goes, equal stamps to the earliest draw (libCacheSim
``RandomLRU``, libCacheSim/cache/eviction/RandomLRU.c); the same decisions as
``policies/recency/randomlru.pyx``."""

from __future__ import annotations

from shadow.sim.reference.randomtwo import RandomTwo

DEFAULTS = "n-samples=64,seed=1"
HONOURS_PINS = True


class RandomLRU(RandomTwo):
    TIES_LATER = False

    def __init__(self, capacity: int, n_samples: int = 64, seed: int = 1) -> None:
        super().__init__(capacity, seed)
        self.K = n_samples


def make(capacity: int, params: dict) -> RandomLRU:
    return RandomLRU(capacity, int(params["n-samples"]), int(params["seed"]))
