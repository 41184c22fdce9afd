"""Pure-Python segmented LRU (libCacheSim 0.3.5 ``SLRU.c``): the differential oracle for policies/frequency/slru.pyx.

``n-seg`` LRU segments, 0 the lowest.  libCacheSim makes each ``C // n-seg`` blocks; here the
remainder ``C % n-seg`` goes one block each to the lowest segments, so the segments always cover
the cache (identical to libCacheSim when ``C`` is a multiple of ``n-seg``; otherwise libCacheSim's
segment 0 runs over its size and a *hit* can evict, which the serve loop cannot allow).

* insert: into the head of the lowest segment with room; if none has room, evict while the cache
  is full, then segment 0's head.
* hit: in the top segment the block moves to its head; otherwise it moves to the head of the next
  segment, and while that segment is over its size its tail is *cooled* to the head of the
  segment below (cascading); cooling segment 0 would evict its tail (cannot happen while the
  segments cover the cache; kept for fidelity, pins skipped within segment 0).
* evict: the tail of the lowest non-empty segment.

Pins: the first unpinned block from the tail of the lowest non-empty segment, then of the
segments above, is the victim; if every block is pinned the plain candidate is taken.
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.params import parse_params

DEFAULTS = "n-seg=4"
HONOURS_PINS = True


class SLRU:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = {**parse_params(None, DEFAULTS), **params} if isinstance(params, dict) else parse_params(params, DEFAULTS, where="policy slru")
        self.capacity = capacity
        self.n_seg = int(p["n-seg"])
        base, extra = divmod(capacity, self.n_seg)
        self.seg_sizes = [base + (1 if i < extra else 0) for i in range(self.n_seg)]
        # NOTE: the first key of each OrderedDict is its tail (LRU end).
        self.segs: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(self.n_seg)]
        self.where: dict[int, int] = {}
        self.spilled: list[int] = []
        self.pinned: set[int] | frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self.where)

    def find(self, bid: int) -> bool:
        return bid in self.where

    def _cool(self, i: int) -> None:
        if i == 0:
            # NOTE: libCacheSim evicts the lowest non-empty segment's tail, which is segment 0's
            # here; pins are skipped within segment 0 only, so the cascade always ends.
            seg = self.segs[0]
            bid = next((b for b in seg if b not in self.pinned), None)
            if bid is None:
                bid = next(iter(seg))
            del seg[bid]
            del self.where[bid]
            self.spilled.append(bid)
            return
        bid, _ = self.segs[i].popitem(last=False)
        self.segs[i - 1][bid] = None
        self.where[bid] = i - 1
        while len(self.segs[i - 1]) > self.seg_sizes[i - 1]:
            self._cool(i - 1)

    def hit(self, bid: int, acc=None) -> None:
        i = self.where[bid]
        if i == self.n_seg - 1:
            self.segs[i].move_to_end(bid)
            return
        del self.segs[i][bid]
        self.segs[i + 1][bid] = None
        self.where[bid] = i + 1
        while len(self.segs[i + 1]) > self.seg_sizes[i + 1]:
            self._cool(i + 1)

    def insert(self, bid: int, acc=None) -> None:
        for i in range(self.n_seg):
            if len(self.segs[i]) + 1 <= self.seg_sizes[i]:
                break
        else:
            while len(self.where) + 1 > self.capacity:
                self.spilled.append(self.evict(None, self.pinned))
            i = 0
        self.segs[i][bid] = None
        self.where[bid] = i

    def evict(self, acc=None, pinned=frozenset()) -> int:
        for seg in self.segs:
            for bid in seg:
                if bid not in pinned:
                    del seg[bid]
                    del self.where[bid]
                    return bid
        for seg in self.segs:
            if seg:
                bid, _ = seg.popitem(last=False)
                del self.where[bid]
                return bid
        raise RuntimeError("slru: evict from an empty cache")

    def remove(self, bid: int) -> bool:
        i = self.where.pop(bid, None)
        if i is None:
            return False
        del self.segs[i][bid]
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> SLRU:
    return SLRU(capacity, params if params is not None else {})
