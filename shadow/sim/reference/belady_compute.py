"""belady_compute reference: same draws and decisions as ``policies/oracle/belady_compute.pyx``."""

from __future__ import annotations

import math

from shadow.sim.reference.random_compute import DenseSet, SplitMix64, draw, pick_best

DEFAULTS = "n-sample=128,evict-batch=8,seed=1"
HONOURS_PINS = True

DBL_MAX = 1.7976931348623157e308


class BeladyCompute:
    def __init__(self, capacity: int, n_sample: int = 128, evict_batch: int = 8, seed: int = 1) -> None:
        self.capacity = capacity
        self.n_sample = n_sample
        self.evict_batch = evict_batch
        self.rng = SplitMix64(seed)
        self.dense = DenseSet()
        self.next: dict[int, int] = {}
        self.cost: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.next)

    def find(self, b: int) -> bool:
        return b in self.next

    def score(self, b: int, now: int) -> float:
        """The negated BeladyCompute score (lowest is evicted)."""
        nxt, c = self.next[b], self.cost[b]
        if nxt < 0:
            return -math.inf
        if nxt <= now:
            return DBL_MAX / 2
        return -(math.log(nxt - now) - math.log(max(c, 1)))

    def hit(self, b: int, acc) -> None:
        self.next[b] = acc.next_access
        self.cost[b] = acc.cost

    def insert(self, b: int, acc) -> None:
        self.hit(b, acc)
        self.dense.add(b)

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        out: list[int] = []
        while len(out) < n and self.dense.n > 0:
            cands, _ = draw(self.rng, self.dense, self.n_sample, lambda x: x in pinned)
            scores = [self.score(c, acc.vtime) for c in cands]
            for b in pick_best(cands, scores, min(n - len(out), self.evict_batch)):
                self.remove(b)
                out.append(b)
        return out

    def evict(self, acc, pinned: set[int]) -> int:
        got = self.evict_n(acc, 1, pinned)
        return got[0] if got else 0

    def remove(self, b: int) -> None:
        self.dense.remove(b)
        del self.next[b], self.cost[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> BeladyCompute:
    return BeladyCompute(capacity, int(params["n-sample"]), int(params["evict-batch"]), int(params["seed"]))
