"""SIEVE reference: a list (index 0 = tail) with visited bits and a hand (an id or None)."""

from __future__ import annotations

DEFAULTS = ""
HONOURS_PINS = True


class Sieve:
    def __init__(self, capacity: int) -> None:
        self.q: list[int] = []          # q[0] = tail (oldest), q[-1] = head (newest)
        self.visited: dict[int, bool] = {}
        self.hand: int | None = None    # id the next scan starts at

    def __len__(self) -> int:
        return len(self.q)

    def find(self, b: int) -> bool:
        return b in self.visited

    def hit(self, b: int, acc) -> None:
        self.visited[b] = True

    def insert(self, b: int, acc) -> None:
        self.q.append(b)
        self.visited[b] = False

    def _towards_head(self, i: int) -> int | None:
        return i + 1 if i + 1 < len(self.q) else None

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        i = self.q.index(self.hand) if self.hand is not None else 0
        first_pinned = None
        passes = 0
        while True:
            b = self.q[i]
            if self.visited[b]:
                self.visited[b] = False
                passes = 0
            elif b in pinned:
                if first_pinned is None:
                    first_pinned = i
                passes += 1
                if passes > len(self.q):
                    i = first_pinned
                    break
            else:
                break
            nxt = self._towards_head(i)
            i = 0 if nxt is None else nxt
        victim = self.q[i]
        nxt = self._towards_head(i)
        self.hand = self.q[nxt] if nxt is not None else None
        del self.q[i]
        del self.visited[victim]
        return victim

    def remove(self, b: int) -> None:
        i = self.q.index(b)
        if self.hand == b:
            nxt = self._towards_head(i)
            self.hand = self.q[nxt] if nxt is not None else None
        del self.q[i]
        del self.visited[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> Sieve:
    return Sieve(capacity)
