"""cacheus reference: SR and R as OrderedDicts with adaptive sizes, CR-LFU as reference/lfu.py's
buckets with the victim taken from the back, H and the two ghosts as bounded OrderedDicts,
splitmix64 draws: the same decisions as ``policies/adaptive/cacheus.pyx`` (libCacheSim ``Cacheus``,
libCacheSim/cache/eviction/Cacheus.c, SR_LRU.c, CR_LFU.c)."""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import chain

from shadow.sim.reference.lfu import LFU
from shadow.sim.reference.random_compute import SplitMix64

DEFAULTS = "seed=1"
HONOURS_PINS = True


def _push(fifo: OrderedDict, key: int, value, limit: int) -> None:
    """Add ``key`` as the newest, dropping the oldest while ``limit`` are there (none kept if
    ``limit`` < 1)."""
    if limit < 1:
        return
    while len(fifo) >= limit:
        fifo.popitem(last=False)
    fifo[key] = value


def cdiv(a: int, b: int) -> int:
    """C's integer division (truncated); 0 for ``b == 0``."""
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def step(q: int) -> float:
    """SR-LRU's resize step: ``max(1.0, q + 0.5)``."""
    return 1.0 if 1.0 > q + 0.5 else q + 0.5


class CRLFU(LFU):
    """lfu's buckets; the victim is the newest arrival of the lowest bucket."""

    def candidate(self, pinned=frozenset()) -> int:
        order = sorted(self.buckets)
        for f in order:
            for bid in reversed(self.buckets[f]):
                if bid not in pinned:
                    return bid
        return next(reversed(self.buckets[order[0]])) if order else 0


class Cacheus:
    """``sr``/``r``: first = least recent; ``new``/``demoted``: the resident ids with SR-LRU's
    flags; ``hist``: H, evicted id -> (frequency, new, demoted), first = oldest;
    ``ghost['lru'|'lfu']``: ids each expert evicted, first = oldest."""

    def __init__(self, capacity: int, seed: int = 1, eager_spill: bool = False) -> None:
        """``eager_spill``: libCacheSim's own timing (tests only): the insert that overfills SR
        evicts SR's tail at once, reported in ``spilled`` (the loop counts it as unexpected)."""
        self.capacity = capacity
        self.half = capacity // 2
        self.sr_size = self.r_size = capacity // 2
        self.c_new = self.c_demoted = 0
        self.sr: OrderedDict[int, None] = OrderedDict()
        self.r: OrderedDict[int, None] = OrderedDict()
        self.new: set[int] = set()
        self.demoted: set[int] = set()
        self.lfu = CRLFU(capacity, {})
        self.hist: OrderedDict[int, int] = OrderedDict()
        self.ghost = {"lru": OrderedDict(), "lfu": OrderedDict()}
        self.w = {"lru": 0.5, "lfu": 0.5}
        self.rng = SplitMix64(seed)
        self.lr = 0.001 + (self.rng.next() % 1000) / 1000.0
        self.lr_prev = 0.0
        self.hit_rate_prev = 0.0
        self.unlearn = 0
        self.num_hit = 0
        self.eager_spill = eager_spill
        if eager_spill:
            self.spilled: list[int] = []

    def __len__(self) -> int:
        return len(self.sr) + len(self.r)

    def find(self, b: int) -> bool:
        return b in self.sr or b in self.r

    # ---- SR-LRU ----

    def _to_r(self, b: int) -> None:
        """``b`` to R's head; R's tails demoted to SR's head while R is over its size."""
        self.r[b] = None
        while len(self.r) > self.r_size:
            t, _ = self.r.popitem(last=False)
            self.sr[t] = None
            if t not in self.demoted:
                self.c_demoted += 1
                self.demoted.add(t)

    def _resize(self, sr_size: int) -> None:
        self.sr_size = sr_size
        self.r_size = self.capacity - sr_size

    def _leave(self, b: int, keep_demoted: bool) -> int:
        """Evict ``b``: into H with its frequency and flags (``keep_demoted``: libCacheSim's
        evict keeps the demoted mark in H, its spill and remove clear it)."""
        freq, was_new, was_demoted = self.lfu.freq[b], b in self.new, b in self.demoted
        self.remove(b)
        self.c_new += was_new
        self.c_demoted -= was_demoted
        _push(self.hist, b, (freq, was_new, was_demoted and keep_demoted), self.capacity - 1)
        return b

    # ---- learning ----

    def _update_lr(self) -> None:
        hit_rate = float(self.num_hit // self.capacity)     # libCacheSim divides integers
        d_hit = hit_rate - self.hit_rate_prev
        d_lr = self.lr - self.lr_prev
        self.lr_prev, self.hit_rate_prev = self.lr, hit_rate
        if d_lr != 0:
            sign = 1 if d_hit / d_lr > 0 else -1
            cand = self.lr + sign * abs(self.lr * d_lr)
            self.lr = cand if cand > 0.001 else 0.0001
            self.unlearn = 0
        elif hit_rate == 0 or d_hit <= 0:
            self.unlearn += 1
        elif self.unlearn >= 10:
            self.unlearn = 0
            self.lr = 0.001 + (self.rng.next() % 1000) / 1000.0
        self.num_hit = 0

    def _after_get(self, acc) -> None:
        if acc.vtime % self.capacity == 0:
            self._update_lr()

    # ---- the policy ----

    def hit(self, b: int, acc) -> None:
        self.num_hit += 1
        if b in self.r:
            self.r.move_to_end(b)
        else:
            del self.sr[b]
            # NOTE: no shrink of SR here (see policies/adaptive/cacheus.pyx: libCacheSim's never fires)
            self._to_r(b)
        self.lfu.hit(b)
        self._after_get(acc)

    def insert(self, b: int, acc) -> None:
        for expert, ghost in self.ghost.items():
            if b in ghost:
                self.w[expert] *= math.exp(-self.lr)
                break
        self.w["lru"] = self.w["lru"] / (self.w["lru"] + self.w["lfu"])
        self.w["lfu"] = 1.0 - self.w["lru"]
        for ghost in self.ghost.values():
            ghost.pop(b, None)
        if b in self.hist:
            freq, was_new, was_demoted = self.hist.pop(b)
            self.lfu._enter(b, freq + 1)
            if was_demoted:
                self.demoted.add(b)
            self._to_r(b)
            if was_new:
                # a new block evicted too early came back: SR was too small
                delta = step(cdiv(self.c_demoted, self.c_new))
                top = len(self) - 1
                self._resize(top if self.sr_size + delta > top else int(self.sr_size + delta))
        else:
            self.lfu.insert(b)
            self.sr[b] = None
            self.new.add(b)
        while self.eager_spill and len(self.sr) > self.sr_size:
            self.spilled.append(self._leave(next(iter(self.sr)), False))
        self._after_get(acc)

    def evict(self, acc, pinned: set[int]) -> int:
        if not len(self):
            return 0
        if len(self.sr) > self.sr_size:
            victim = next((b for b in self.sr if b not in pinned), 0)
            if victim:
                return self._leave(victim, False)
        a = next((b for b in chain(self.sr, self.r) if b not in pinned),
                 next(iter(self.sr or self.r)))
        c = self.lfu.candidate(pinned)
        x = (self.rng.next() % 100) / 100.0
        if a == c:
            return self._leave(a, True)
        if x < self.w["lru"]:
            _push(self.ghost["lru"], self._leave(a, True), None, self.half)
            return a
        _push(self.ghost["lfu"], self._leave(c, False), None, self.half)
        return c

    def remove(self, b: int) -> None:
        if b in self.r:
            del self.r[b]
        else:
            del self.sr[b]
        self.lfu.remove(b)
        self.new.discard(b)
        self.demoted.discard(b)

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> Cacheus:
    return Cacheus(capacity, int(params["seed"]))
