"""Pure-Python S3-FIFO (libCacheSim 0.3.5 ``S3FIFO.c``): the differential oracle for policies/adaptive/s3fifo.pyx.

A small FIFO (``small-size-ratio`` of the cache), a main FIFO with reinsertion (the rest) and a
ghost FIFO of ids (``ghost-size-ratio``).  Sizes are truncated: ``small = int(C * ratio)``.

* insert: an id found in the ghost leaves the ghost and goes to main; before the first eviction a
  full small queue sends new ids to main; otherwise new ids go to small.  freq starts at 0.
* hit: ``freq += 1`` (libCacheSim's counter is unbounded; only ``min(freq, 3)`` is ever used).
* evict: from main if main is over its size or small is empty, else from small.
  Small: the tail with ``freq >= move-to-main-threshold`` moves to main's head (freq 0); the first
  tail below it is evicted into the ghost.  Main: the tail with ``freq >= 1`` is reinserted at the
  head with ``min(freq, 3) - 1``; the first tail with freq 0 is evicted.  One ``evict`` call removes
  exactly one block (libCacheSim's ``get`` loops over ``evict`` until one leaves; so does this).
* ghost: FIFO of ids; inserting into a full ghost drops its oldest id.

Pins: a pinned block is never the victim while an unpinned candidate exists; it is still
promoted/reinserted as it would be unpinned.  When a queue has only pinned candidates left, the
other queue is tried, then the plain tail is taken (best effort).
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.params import parse_params

DEFAULTS = "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2"
HONOURS_PINS = True


class S3FIFO:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = {**parse_params(None, DEFAULTS), **params} if isinstance(params, dict) else parse_params(params, DEFAULTS, where="policy s3fifo")
        self.capacity = capacity
        self.threshold = int(p["move-to-main-threshold"])
        self.small_size = max(1, int(capacity * float(p["small-size-ratio"])))
        self.main_size = capacity - self.small_size
        self.ghost_size = int(capacity * float(p["ghost-size-ratio"]))
        # NOTE: OrderedDict order is insertion order: the first key is the tail (next victim).
        self.small: OrderedDict[int, int] = OrderedDict()
        self.main: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.has_evicted = False

    def __len__(self) -> int:
        return len(self.small) + len(self.main)

    def find(self, bid: int) -> bool:
        return bid in self.small or bid in self.main

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.small:
            self.small[bid] += 1
        else:
            self.main[bid] += 1

    def insert(self, bid: int, acc=None) -> None:
        if bid in self.ghost:
            del self.ghost[bid]
            self.main[bid] = 0
        elif not self.has_evicted and len(self.small) >= self.small_size:
            self.main[bid] = 0
        else:
            self.small[bid] = 0

    def _ghost_add(self, bid: int) -> None:
        if self.ghost_size <= 0:
            return
        while len(self.ghost) >= self.ghost_size:
            self.ghost.popitem(last=False)
        self.ghost[bid] = None

    def _evict_small(self, pinned) -> int | None:
        for bid in list(self.small):
            freq = self.small[bid]
            if freq >= self.threshold:
                del self.small[bid]
                self.main[bid] = 0
            elif bid in pinned:
                continue
            else:
                del self.small[bid]
                self._ghost_add(bid)
                return bid
        return None

    def _evict_main(self, pinned) -> int | None:
        skipped: set[int] = set()
        while True:
            bid = next((b for b in self.main if b not in skipped), None)
            if bid is None:
                return None
            freq = self.main[bid]
            if freq >= 1:
                del self.main[bid]
                self.main[bid] = min(freq, 3) - 1
            elif bid in pinned:
                skipped.add(bid)
            else:
                del self.main[bid]
                return bid

    def evict(self, acc=None, pinned=frozenset()) -> int:
        self.has_evicted = True
        if len(self.main) > self.main_size or not self.small:
            victim = self._evict_main(pinned)
            if victim is None:
                victim = self._evict_small(pinned)
        else:
            victim = self._evict_small(pinned)
            if victim is None:
                victim = self._evict_main(pinned)
        if victim is None:
            # best effort: every candidate is pinned
            if self.small:
                victim, _ = self.small.popitem(last=False)
                self._ghost_add(victim)
            else:
                victim, _ = self.main.popitem(last=False)
        return victim

    def remove(self, bid: int) -> bool:
        if bid in self.small:
            del self.small[bid]
        elif bid in self.main:
            del self.main[bid]
        else:
            return False
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> S3FIFO:
    return S3FIFO(capacity, params if params is not None else {})
