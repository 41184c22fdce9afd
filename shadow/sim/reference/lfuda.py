"""Pure-Python LFUDA (libCacheSim 0.3.5 ``LFUDA.c``): the differential oracle for policies/frequency/lfuda.pyx.

``L`` starts at 0; buckets map a key to the ids in the order they entered it.  Insert: key
``L + 1``.  Hit: key ``f + L``; if the block emptied bucket ``L``, ``L`` first moves up to the
lowest non-empty key above it (so a block may land below ``L``).  Evict: the front of bucket
``L`` (key 1 while ``L`` is 0), or of the lowest bucket if bucket ``L`` is empty (libCacheSim
crashes there); ``L`` becomes that bucket's key and moves up if the bucket is emptied.  Keys
saturate at 2**63 - 1.

Pins: the victim is the first unpinned id of the ordinary victim's bucket, then of the buckets
above it, then of those below it, in key order; all pinned: the ordinary victim.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = ""
HONOURS_PINS = True
KEY_MAX = 2**63 - 1


class LFUDA:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.L = 0
        self.key: dict[int, int] = {}
        self.buckets: dict[int, OrderedDict[int, None]] = {}

    def __len__(self) -> int:
        return len(self.key)

    def find(self, bid: int) -> bool:
        return bid in self.key

    def _leave(self, bid: int) -> None:
        f = self.key.pop(bid)
        del self.buckets[f][bid]
        if not self.buckets[f]:
            del self.buckets[f]
            if f == self.L:
                self.L = min((k for k in self.buckets if k > f), default=self.L)

    def _enter(self, bid: int, f: int) -> None:
        self.key[bid] = f
        self.buckets.setdefault(f, OrderedDict())[bid] = None

    def hit(self, bid: int, acc=None) -> None:
        nf = min(self.key[bid] + self.L, KEY_MAX)      # NOTE: with L before the move below
        self._leave(bid)
        self._enter(bid, nf)

    def insert(self, bid: int, acc=None) -> None:
        self._enter(bid, min(self.L + 1, KEY_MAX))

    def evict(self, acc=None, pinned: set[int] = frozenset()) -> int:
        if not self.key:
            return 0
        m = max(self.L, 1)
        if m not in self.buckets:
            m = min(self.buckets)
        self.L = m
        order = [m] + sorted(k for k in self.buckets if k > m) + sorted(k for k in self.buckets if k < m)
        victim = next((b for k in order for b in self.buckets[k] if b not in pinned),
                      next(iter(self.buckets[m])))
        self._leave(victim)
        return victim

    def remove(self, bid: int) -> bool:
        if bid not in self.key:
            return False
        self._leave(bid)
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> LFUDA:
    return LFUDA(capacity)
