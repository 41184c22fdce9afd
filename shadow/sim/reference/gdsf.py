"""Pure-Python GDSF (libCacheSim 0.3.5 ``cpp/GDSF.cpp``): the differential oracle for policies/cost_aware/gdsf.pyx.

Every resident block has a priority ``L + freq * 1e6 / size`` (size 1 here), set on insert
(freq 1) and on every hit (freq + 1); ``L`` is the priority of the last evicted block.  Evict takes
the lowest priority; equal priorities go by the vtime of the last insert/hit (oldest first).
Cost is ignored unless ``cost-aware=true`` (off by default; not libCacheSim): then the priority is
``L + freq * cost / size`` with the integer cost of the access (insert or hit).

Pins: the lowest-priority unpinned block is the victim; if every block is pinned the plain
minimum is taken.  ``L`` becomes the victim's priority either way.
"""

from __future__ import annotations

import heapq

from shadow.sim.params import parse_params

DEFAULTS = "cost-aware=false"
HONOURS_PINS = True


class GDSF:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = {**parse_params(None, DEFAULTS), **params} if isinstance(params, dict) else parse_params(params, DEFAULTS, where="policy gdsf")
        self.capacity = capacity
        self.cost_aware = bool(p["cost-aware"])
        self.L = 0.0
        self.clock = 0
        self.freq: dict[int, int] = {}
        self.key: dict[int, tuple[float, int]] = {}
        # NOTE: a lazy heap: an entry is current iff it equals key[bid].
        self.heap: list[tuple[float, int, int]] = []

    def __len__(self) -> int:
        return len(self.key)

    def find(self, bid: int) -> bool:
        return bid in self.key

    def _stamp(self, bid: int, acc) -> None:
        weight = float(max(int(acc.cost), 1)) if self.cost_aware else 1.0e6
        self.clock += 1
        self.key[bid] = k = (self.L + float(self.freq[bid]) * weight, self.clock)
        heapq.heappush(self.heap, (k[0], k[1], bid))

    def hit(self, bid: int, acc=None) -> None:
        self.freq[bid] += 1
        self._stamp(bid, acc)

    def insert(self, bid: int, acc=None) -> None:
        self.freq[bid] = 1
        self._stamp(bid, acc)

    def evict(self, acc=None, pinned=frozenset()) -> int:
        skipped = []
        victim = None
        while self.heap:
            pri, clk, bid = entry = heapq.heappop(self.heap)
            if self.key.get(bid) != (pri, clk):
                continue
            if bid in pinned:
                skipped.append(entry)
                continue
            victim = bid
            break
        if victim is None:
            victim = skipped.pop(0)[2]
        for entry in skipped:
            heapq.heappush(self.heap, entry)
        self.L = self.key[victim][0]
        del self.key[victim], self.freq[victim]
        return victim

    def remove(self, bid: int) -> bool:
        if bid not in self.key:
            return False
        del self.key[bid], self.freq[bid]
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> GDSF:
    return GDSF(capacity, params if params is not None else {})
