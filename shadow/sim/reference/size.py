"""size reference: libCacheSim ``Size`` (libCacheSim/cache/eviction/Size.c) with unit sizes, whose
heap (``pqueue.c``, strict ``<``) never reorders tied entries: a plain list in heap-array order.
An insert appends; a hit changes nothing; the victim is the first unpinned entry (all pinned:
the first), and the last entry takes its place.  The same decisions as ``policies/frequency/size.pyx``."""

from __future__ import annotations

DEFAULTS = ""
HONOURS_PINS = True


class Size:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.heap: list[int] = []

    def __len__(self) -> int:
        return len(self.heap)

    def find(self, b: int) -> bool:
        return b in self.heap

    def hit(self, b: int, acc: object) -> None:
        pass

    def insert(self, b: int, acc: object) -> None:
        self.heap.append(b)

    def _take(self, i: int) -> int:
        b = self.heap[i]
        last = self.heap.pop()
        if i < len(self.heap):
            self.heap[i] = last
        return b

    def evict(self, acc: object, pinned: set[int]) -> int:
        if not self.heap:
            return 0
        i = next((j for j, b in enumerate(self.heap) if b not in pinned), 0)
        return self._take(i)

    def remove(self, b: int) -> None:
        self._take(self.heap.index(b))

    def on_request(self, ctx: object) -> None:
        pass


def make(capacity: int, params: dict) -> Size:
    return Size(capacity)
