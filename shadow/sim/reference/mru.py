"""MRU reference: an OrderedDict whose last item is the most recent (and the next victim)."""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = ""
HONOURS_PINS = True


class MRU:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.q: OrderedDict[int, None] = OrderedDict()   # last = most recent

    def __len__(self) -> int:
        return len(self.q)

    def find(self, b: int) -> bool:
        return b in self.q

    def hit(self, b: int, acc) -> None:
        self.q.move_to_end(b)

    def insert(self, b: int, acc) -> None:
        self.q[b] = None

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        newest = next(reversed(self.q))
        victim = next((b for b in reversed(self.q) if b not in pinned), newest)
        del self.q[victim]
        return victim

    def remove(self, b: int) -> None:
        del self.q[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> MRU:
    return MRU(capacity)
