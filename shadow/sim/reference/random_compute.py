"""random_compute reference, plus the sampling helpers the other sampled references share.

Same decisions as ``policies/cost_aware/random_compute.pyx``, draw for draw: the same splitmix64 stream, the
same dense population order (append on insert, swap-with-last on removal) and the same choice of
the ``evict-batch`` lowest distinct candidates (ties: earlier draw).  See that module for the
policy itself.
"""

from __future__ import annotations

import math
from typing import Callable

DEFAULTS = "n-sample=128,evict-batch=8,timestamp=request,seed=1"
HONOURS_PINS = True

M64 = (1 << 64) - 1
DECAY = 20000.0


class SplitMix64:
    """splitmix64 with the Cython side's range reduction: ``((x >> 32) * n) >> 32``."""

    def __init__(self, seed: int) -> None:
        self.state = seed & M64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return ((self.next() >> 32) * n) >> 32


class DenseSet:
    """Items in ``items[0:n]``; removal moves the last item into the hole.

    ``full=True`` starts as the permutation ``0 .. cap-1`` with every item absent and parks a
    removed item at index n (a free list of node ids, as the Cython side uses it).
    """

    def __init__(self, cap: int = 0, full: bool = False) -> None:
        self.full = full
        self.items: list = list(range(cap)) if full else []
        self.pos: dict = {i: i for i in range(cap)} if full else {}
        self.n = 0

    def __contains__(self, x) -> bool:
        i = self.pos.get(x, -1)
        return 0 <= i < self.n

    def add(self, x) -> None:
        if self.full:
            i = self.pos[x]
            y = self.items[self.n]
            self.items[i] = y
            self.pos[y] = i
            self.items[self.n] = x
        elif self.n == len(self.items):
            self.items.append(x)
        else:
            self.items[self.n] = x
        self.pos[x] = self.n
        self.n += 1

    def remove(self, x) -> None:
        i = self.pos[x]
        self.n -= 1
        y = self.items[self.n]
        self.items[i] = y
        self.pos[y] = i
        if self.full:
            self.items[self.n] = x
            self.pos[x] = self.n
        else:
            del self.pos[x]
            self.items.pop()

    def live(self) -> list:
        return self.items[:self.n]


def draw(rng: SplitMix64, population: DenseSet, n_sample: int, pinned: Callable[[object], bool]) -> tuple[list, bool]:
    """One sample: up to ``n_sample`` unpinned draws with replacement (``4 * n_sample`` tries), else
    the first unpinned items in population order, else (all pinned) the first items; the flag says
    whether the sample is that last, best-effort kind."""
    n = population.n
    if n == 0:
        return [], False
    out = []
    attempts = 0
    while len(out) < n_sample and attempts < 4 * n_sample:
        attempts += 1
        x = population.items[rng.below(n)]
        if pinned(x):
            continue
        out.append(x)
    if not out:
        out = [x for x in population.live() if not pinned(x)][:n_sample]
    if not out:
        return population.live()[:n_sample], True
    return out, False


def pick_best(cands: list, scores: list[float], b: int) -> list:
    """The up to ``b`` distinct candidates of lowest score, ascending; ties: earlier draw first."""
    first: dict = {}
    for i, c in enumerate(cands):
        if c not in first:
            first[c] = (scores[i], i)
    ranked = sorted(first.items(), key=lambda kv: kv[1])
    return [c for c, _ in ranked[:b]]


class RandomCompute:
    def __init__(self, capacity: int, n_sample: int = 128, evict_batch: int = 8, seed: int = 1,
                 per_request: bool = True) -> None:
        self.capacity = capacity
        self.n_sample = n_sample
        self.evict_batch = evict_batch
        self.per_request = per_request
        self.rng = SplitMix64(seed)
        self.dense = DenseSet()
        self.last: dict[int, int] = {}
        self.freq: dict[int, float] = {}
        self.cost: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.last)

    def find(self, b: int) -> bool:
        return b in self.last

    def _stamp(self, acc) -> int:
        return acc.req_vtime if self.per_request else acc.vtime

    def _init(self, b: int, acc) -> None:
        self.last[b] = self._stamp(acc)
        self.freq[b] = 1.0
        self.cost[b] = acc.cost

    def _touch(self, b: int, acc) -> None:
        stamp = self._stamp(acc)
        d = stamp - self.last[b]
        if d > 0:
            self.freq[b] = self.freq[b] * math.exp(-d / DECAY) + 1.0
        else:
            self.freq[b] += 1.0
        self.last[b] = stamp
        self.cost[b] = acc.cost

    def score(self, b: int, now: int) -> float:
        r = max(1, now - self.last[b])
        return self.cost[b] * self.freq[b] * math.exp(-r / DECAY) / r

    def hit(self, b: int, acc) -> None:
        self._touch(b, acc)

    def insert(self, b: int, acc) -> None:
        self._init(b, acc)
        self.dense.add(b)

    def _forget(self, b: int) -> None:
        del self.last[b], self.freq[b], self.cost[b]

    def sample_evict(self, acc, n: int, pinned: set[int]) -> list[int]:
        """Up to ``n`` victims from the dense population, ``evict_batch`` per sample."""
        out: list[int] = []
        while len(out) < n and self.dense.n > 0:
            cands, _ = draw(self.rng, self.dense, self.n_sample, lambda x: x in pinned)
            scores = [self.score(c, acc.vtime) for c in cands]
            for b in pick_best(cands, scores, min(n - len(out), self.evict_batch)):
                self.dense.remove(b)
                self._forget(b)
                out.append(b)
        return out

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        return self.sample_evict(acc, n, pinned)

    def evict(self, acc, pinned: set[int]) -> int:
        got = self.evict_n(acc, 1, pinned)
        return got[0] if got else 0

    def remove(self, b: int) -> None:
        if b in self.dense:
            self.dense.remove(b)
        self._forget(b)

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> RandomCompute:
    return RandomCompute(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                         int(params["seed"]), params["timestamp"] == "request")
