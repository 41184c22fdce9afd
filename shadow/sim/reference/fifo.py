"""FIFO reference: insertion order only."""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = ""
HONOURS_PINS = True


class FIFO:
    def __init__(self, capacity: int) -> None:
        self.q: OrderedDict[int, None] = OrderedDict()   # first = oldest

    def __len__(self) -> int:
        return len(self.q)

    def find(self, b: int) -> bool:
        return b in self.q

    def hit(self, b: int, acc) -> None:
        pass

    def insert(self, b: int, acc) -> None:
        self.q[b] = None

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        victim = next((b for b in self.q if b not in pinned), next(iter(self.q)))
        del self.q[victim]
        return victim

    def remove(self, b: int) -> None:
        del self.q[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> FIFO:
    return FIFO(capacity)
