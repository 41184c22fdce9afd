"""Pure-Python workload_aware (arXiv 2506.02634 §4.2, "KVCache Cache in the Wild"): the
differential oracle for policies/adaptive/workload_aware.pyx.

The victim is the resident block with the smallest ``(ReuseProb, -offset)``, where
``ReuseProb = exp(-t / mean_gap_w) * (1 - exp(-life / mean_gap_w))`` (written with ``lam =
1 / mean_gap_w``), ``t = now - last_access`` and ``w`` the block's category.  Within a category
``ReuseProb`` falls with ``t``, so only the front of each category's LRU list is a candidate;
the candidates are compared by ``(ReuseProb, -offset, seq)``, ``seq`` a counter given to each
candidate when it is (re)computed: once per category in first-seen order after anything changed,
and to a category's next candidate after its candidate is evicted.

Online fitting (the PrefixSim fork's streaming form of the paper's offline fit): every reuse of a
resident block seen in ``on_request`` with ``gap = now - last_access > 0`` updates the block's
category's ``mean_gap`` and the global ``life`` with the EWMA ``m <- 0.95 m + 0.05 gap``; both
start at 1e6.

Clock: ``now`` is the request's arrival seconds from ``set_request_ctx``, or its ``vtime`` (block
accesses before it) when the request has no timestamp; it never moves backwards.  A block's
category and offset are those of the request that inserts it (``acc.position``); ``last_access``
is set at insert and by ``on_request`` for reused blocks.

List order (reproduces the fork): ``on_request`` moves a request's reused blocks to the back of
their lists in prefix order (root first, only when ``gap > 0``); inserts append in access order
(deepest first under deepest-first replay).

Pins: a category's candidate is its first unpinned block from the front; if no category has one,
the smallest ``(ReuseProb, -offset, first-seen order)`` over the fronts is taken (best effort).
"""

from __future__ import annotations

import math
from collections import OrderedDict

DEFAULTS = ""
HONOURS_PINS = True

#: EWMA weight of a new reuse gap (the fork's kEwmaAlpha)
EWMA_ALPHA = 0.05
#: mean gap of a category (and ``life``) before any reuse is seen (the fork's kDefaultMeanGap)
PRIOR_MEAN_GAP = 1.0e6


class WorkloadAware:
    WANTS_REQUEST_CTX = True

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.now = 0.0
        self.cur = 0                                   # the arriving request's category
        self.life = PRIOR_MEAN_GAP
        # category -> its LRU list (first = front = least recent), in first-seen order
        self.lists: dict[int, OrderedDict[int, None]] = {}
        self.mean_gap: dict[int, float] = {}
        self.meta: dict[int, list] = {}                # id -> [category, offset, last_access]
        self.seq = 0
        # category -> (prob, -offset, seq, candidate id); None: recompute at the next evict
        self.keys: dict[int, tuple] | None = None
        self.keys_pinned: frozenset = frozenset()

    def __len__(self) -> int:
        return len(self.meta)

    def find(self, b: int) -> bool:
        return b in self.meta

    def _category(self, c: int) -> None:
        if c not in self.lists:
            self.lists[c] = OrderedDict()
            self.mean_gap[c] = PRIOR_MEAN_GAP

    def set_request_ctx(self, a) -> None:
        t = a.timestamp_s if a.timestamp_s >= 0 else float(a.vtime)
        self.now = max(self.now, t)
        self.cur = a.category
        self._category(a.category)
        self.keys = None

    def on_request(self, ctx) -> None:
        for b in ctx.block_ids:
            m = self.meta.get(b)
            if m is None:
                continue
            gap = self.now - m[2]
            if gap > 0.0:
                c = m[0]
                self.mean_gap[c] = (1.0 - EWMA_ALPHA) * self.mean_gap[c] + EWMA_ALPHA * gap
                self.life = (1.0 - EWMA_ALPHA) * self.life + EWMA_ALPHA * gap
                self.lists[c].move_to_end(b)
            m[2] = self.now
        self.keys = None

    def hit(self, b: int, acc) -> None:
        pass

    def insert(self, b: int, acc) -> None:
        self._category(self.cur)
        self.meta[b] = [self.cur, int(acc.position), self.now]
        self.lists[self.cur][b] = None
        self.keys = None

    def prob(self, b: int) -> float:
        c, _, last = self.meta[b]
        lam = 1.0 / self.mean_gap[c]
        return math.exp(-lam * (self.now - last)) * (1.0 - math.exp(-lam * self.life))

    def _key(self, b: int) -> tuple:
        self.seq += 1
        return (self.prob(b), -self.meta[b][1], self.seq, b)

    def _candidate(self, c: int, pinned, after: int | None = None) -> int | None:
        """The first unpinned block of ``c``'s list (after ``after`` if given)."""
        it = iter(self.lists[c])
        if after is not None:
            for b in it:
                if b == after:
                    break
        return next((b for b in it if b not in pinned), None)

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.meta:
            return 0
        pinned = frozenset(pinned)
        if self.keys is None or pinned != self.keys_pinned:
            self.keys = {}
            for c in self.lists:
                b = self._candidate(c, pinned)
                if b is not None:
                    self.keys[c] = self._key(b)
            self.keys_pinned = pinned
        if self.keys:
            c = min(self.keys, key=lambda k: self.keys[k])
            victim = self.keys[c][3]
            nxt = self._candidate(c, pinned, after=victim)
            self._drop(victim)
            if nxt is None:
                del self.keys[c]
            else:
                self.keys[c] = self._key(nxt)
            return victim
        # every resident block is pinned: the plain fronts, first-seen order on ties
        order = list(self.lists)
        fronts = [(self.prob(next(iter(q))), -self.meta[next(iter(q))][1], order.index(c),
                   next(iter(q))) for c, q in self.lists.items() if q]
        victim = min(fronts)[3]
        self._drop(victim)
        self.keys = None
        return victim

    def _drop(self, b: int) -> None:
        c = self.meta.pop(b)[0]
        del self.lists[c][b]

    def remove(self, b: int) -> None:
        self._drop(b)
        self.keys = None


def make(capacity: int, params: dict) -> WorkloadAware:
    return WorkloadAware(capacity)
