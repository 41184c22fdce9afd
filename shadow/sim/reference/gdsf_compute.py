"""Pure-Python gdsf_compute (the PrefixSim fork's ``cpp/GDSF_compute.cpp``): the differential
oracle for policies/cost_aware/gdsf_compute.pyx.

Each resident block keeps ``freq``, the cost its insert saw, and a key ``(priority, stamp)``:
insert sets ``freq = 1`` and priority ``L + cost``; a hit sets ``freq += 1`` and priority
``L + freq * cost`` (the cost kept at insert); each insert/hit takes the next stamp.  Evict takes
the smallest key among the unpinned blocks (the smallest of all if every block is pinned) and sets
``L`` to its priority.  ``find`` changes nothing.
"""

from __future__ import annotations

DEFAULTS = ""
HONOURS_PINS = True


class GDSFCompute:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.L = 0.0
        self.clock = 0
        self.freq: dict[int, int] = {}
        self.cost: dict[int, int] = {}
        self.key: dict[int, tuple[float, int]] = {}

    def __len__(self) -> int:
        return len(self.key)

    def find(self, bid: int) -> bool:
        return bid in self.key

    def _set(self, bid: int, pri: float) -> None:
        self.clock += 1
        self.key[bid] = (pri, self.clock)

    def insert(self, bid: int, acc) -> None:
        self.freq[bid] = 1
        self.cost[bid] = int(acc.cost)
        self._set(bid, self.L + float(self.cost[bid]))

    def hit(self, bid: int, acc=None) -> None:
        self.freq[bid] += 1
        self._set(bid, self.L + float(self.freq[bid]) * float(self.cost[bid]))

    def evict(self, acc=None, pinned=frozenset()) -> int:
        free = [b for b in self.key if b not in pinned] or list(self.key)
        victim = min(free, key=self.key.__getitem__)
        self.L = self.key[victim][0]
        self.remove(victim)
        return victim

    def remove(self, bid: int) -> bool:
        if bid not in self.key:
            return False
        del self.key[bid], self.freq[bid], self.cost[bid]
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> GDSFCompute:
    return GDSFCompute(capacity)
