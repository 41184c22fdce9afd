"""belady reference: evict the unpinned resident block of greatest ``(next access, id)``.

Never reused (-1) is +infinity; the id breaks ties among never-reused blocks, exactly as
``policies/oracle/belady.pyx`` does, so both pick the same victim.  A linear scan: obviously correct.
"""

from __future__ import annotations

DEFAULTS = ""
HONOURS_PINS = True

INF = float("inf")


class Belady:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.next: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.next)

    def find(self, b: int) -> bool:
        return b in self.next

    def hit(self, b: int, acc) -> None:
        self.next[b] = acc.next_access if acc.next_access >= 0 else INF

    def insert(self, b: int, acc) -> None:
        self.hit(b, acc)

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.next:
            return 0
        free = [b for b in self.next if b not in pinned] or list(self.next)
        victim = max(free, key=lambda b: (self.next[b], b))
        del self.next[victim]
        return victim

    def remove(self, b: int) -> None:
        del self.next[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> Belady:
    return Belady(capacity)
