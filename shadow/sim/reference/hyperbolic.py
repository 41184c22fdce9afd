"""hyperbolic reference: ``randomtwo``'s draws and stamps (reference/randomtwo.py), ``n-sample``
draws per eviction, the stamp kept at the insert's vtime, and the drawn block of lowest
``1e8 * freq / (now - enter)`` goes (the first draw of strictly lowest score below 1e16; none
below it: the first draw), as libCacheSim ``Hyperbolic`` (libCacheSim/cache/eviction/Hyperbolic.c)
scores; the same decisions as ``policies/frequency/hyperbolic.pyx``."""

from __future__ import annotations

from shadow.sim.reference.randomtwo import RandomTwo

DEFAULTS = "n-sample=64,seed=1"
HONOURS_PINS = True


def score(freq: int, age: int) -> float:
    """libCacheSim's score in IEEE double (+inf at age 0, as C gives it for freq >= 1)."""
    return float("inf") if age == 0 else 1.0e8 * float(freq) / float(age)


class Hyperbolic(RandomTwo):
    """``stamp[b]``: vtime of b's insert (``enter``); ``freq[b]``: 1 + its hits."""

    def __init__(self, capacity: int, n_sample: int = 64, seed: int = 1) -> None:
        super().__init__(capacity, seed)
        self.K = n_sample
        self.freq: dict[int, int] = {}

    def hit(self, b: int, acc: object) -> None:
        self.freq[b] += 1

    def insert(self, b: int, acc: object) -> None:
        super().insert(b, acc)
        self.freq[b] = 1

    def evict(self, acc: object, pinned: set[int]) -> int:
        cands = self.draws(self.K, pinned)
        if not cands:
            return 0
        victim, best = cands[0], 1.0e16
        for b in cands:
            sc = score(self.freq[b], acc.vtime - self.stamp[b])
            if best > sc:
                victim, best = b, sc
        self.remove(victim)
        return victim

    def remove(self, b: int) -> None:
        super().remove(b)
        del self.freq[b]


def make(capacity: int, params: dict) -> Hyperbolic:
    return Hyperbolic(capacity, int(params["n-sample"]), int(params["seed"]))
