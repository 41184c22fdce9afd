"""Pure-Python LFU (libCacheSim 0.3.5 ``LFU.c``): the differential oracle for policies/frequency/lfu.pyx.

Frequency buckets.  An insert enters bucket 1; a hit moves the block from bucket f to the *tail*
of bucket f+1.  Evict takes the *head* of the lowest non-empty bucket, i.e. among the least
frequently used blocks the one that reached that frequency first.

Pins: the first unpinned block of the lowest bucket (in bucket order), then of the buckets above,
is the victim; if every block is pinned the plain candidate is taken.
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.params import parse_params

DEFAULTS = ""
HONOURS_PINS = True


class LFU:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        if not isinstance(params, dict):
            parse_params(params, DEFAULTS, where="policy lfu")
        self.capacity = capacity
        self.freq: dict[int, int] = {}
        # NOTE: freq -> ids in the order they entered the bucket (first = next victim).
        self.buckets: dict[int, OrderedDict[int, None]] = {}

    def __len__(self) -> int:
        return len(self.freq)

    def find(self, bid: int) -> bool:
        return bid in self.freq

    def _leave(self, bid: int) -> int:
        f = self.freq.pop(bid)
        bucket = self.buckets[f]
        del bucket[bid]
        if not bucket:
            del self.buckets[f]
        return f

    def _enter(self, bid: int, f: int) -> None:
        self.freq[bid] = f
        self.buckets.setdefault(f, OrderedDict())[bid] = None

    def hit(self, bid: int, acc=None) -> None:
        self._enter(bid, self._leave(bid) + 1)

    def insert(self, bid: int, acc=None) -> None:
        self._enter(bid, 1)

    def candidate(self, pinned=frozenset()) -> int:
        """The victim, left in place: the first unpinned id of the lowest bucket, then of the
        buckets above; the lowest bucket's first if every id is pinned; 0 if empty."""
        order = sorted(self.buckets)
        for f in order:
            for bid in self.buckets[f]:
                if bid not in pinned:
                    return bid
        return next(iter(self.buckets[order[0]])) if order else 0

    def evict(self, acc=None, pinned=frozenset()) -> int:
        bid = self.candidate(pinned)
        if bid:
            self._leave(bid)
        return bid

    def remove(self, bid: int) -> bool:
        if bid not in self.freq:
            return False
        self._leave(bid)
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> LFU:
    return LFU(capacity, params if params is not None else {})
