"""lecar reference: an LRU OrderedDict and reference/lfu.py's buckets as the two experts, a ghost
OrderedDict per expert (id -> vtime of its eviction, oldest first, ``C // 2`` ids), splitmix64
draws: the same decisions as ``policies/adaptive/lecar.pyx`` (libCacheSim ``LeCaR``,
libCacheSim/cache/eviction/LeCaR.c)."""

from __future__ import annotations

import math
from collections import OrderedDict

from shadow.sim.reference.lfu import LFU
from shadow.sim.reference.random_compute import SplitMix64

DEFAULTS = "update-weight=1,lru-weight=0.5,learning-rate=0.45,seed=1"
HONOURS_PINS = True

LRU_EXPERT, LFU_EXPERT = "lru", "lfu"


class LeCaR:
    """``lru``: resident ids, first = least recent; ``lfu``: the same ids in frequency buckets;
    ``ghost[e]``: ids expert ``e`` evicted -> the eviction's vtime; ``w[e]``: the weights."""

    def __init__(self, capacity: int, update_weight: int = 1, lru_weight: float = 0.5,
                 learning_rate: float = 0.45, seed: int = 1) -> None:
        self.capacity = capacity
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.lfu = LFU(capacity, {})
        self.ghost: dict[str, OrderedDict[int, int]] = {LRU_EXPERT: OrderedDict(),
                                                        LFU_EXPERT: OrderedDict()}
        self.ghost_limit = capacity // 2
        # NOTE: w_lfu starts at 0.5 whatever lru-weight is (libCacheSim's init)
        self.w = {LRU_EXPERT: lru_weight, LFU_EXPERT: 0.5}
        self.update = update_weight == 1
        self.lr = learning_rate
        self.dr = math.pow(0.005, 1.0 / capacity)
        self.rng = SplitMix64(seed)

    def __len__(self) -> int:
        return len(self.lru)

    def find(self, b: int) -> bool:
        return b in self.lru

    def hit(self, b: int, acc) -> None:
        self.lru.move_to_end(b)
        self.lfu.hit(b)

    def penalise(self, expert: str, t: int) -> None:
        """libCacheSim's update_weight: ``expert`` evicted an id that came back ``t`` gets later."""
        if not self.update:
            return
        other = LFU_EXPERT if expert == LRU_EXPERT else LRU_EXPERT
        w = self.w[expert] * math.exp(-self.lr * math.pow(self.dr, float(t))) + 1e-10
        s = w + self.w[other] + 2e-10
        self.w[expert] = w / s
        self.w[other] = (self.w[other] + 1e-10) / s

    def insert(self, b: int, acc) -> None:
        for expert, ghost in self.ghost.items():
            if b in ghost:
                self.penalise(expert, acc.vtime - ghost.pop(b))
                break
        self.lru[b] = None
        self.lfu.insert(b)

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.lru:
            return 0
        a = next((b for b in self.lru if b not in pinned), next(iter(self.lru)))
        c = self.lfu.candidate(pinned)
        expert = None
        if a == c:
            victim = a
        elif (self.rng.next() % 100) / 100.0 < self.w[LRU_EXPERT]:
            victim, expert = a, LRU_EXPERT
        else:
            victim, expert = c, LFU_EXPERT
        self.remove(victim)
        if expert is not None and self.ghost_limit >= 1:
            ghost = self.ghost[expert]
            while len(ghost) >= self.ghost_limit:
                ghost.popitem(last=False)
            ghost[victim] = acc.vtime
        return victim

    def remove(self, b: int) -> None:
        del self.lru[b]
        self.lfu.remove(b)

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> LeCaR:
    return LeCaR(capacity, int(params["update-weight"]), float(params["lru-weight"]),
                 float(params["learning-rate"]), int(params["seed"]))
