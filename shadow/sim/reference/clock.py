"""CLOCK reference: a list (index 0 = tail, the next to examine) with per-block counters."""

from __future__ import annotations

DEFAULTS = "n-bit-counter=1,init-freq=0"
HONOURS_PINS = True


class Clock:
    def __init__(self, capacity: int, n_bit_counter: int = 1, init_freq: int = 0) -> None:
        self.max_freq = (1 << n_bit_counter) - 1
        self.init_freq = init_freq
        self.q: list[int] = []          # q[0] = tail, q[-1] = head
        self.freq: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.q)

    def find(self, b: int) -> bool:
        return b in self.freq

    def hit(self, b: int, acc) -> None:
        self.freq[b] = min(self.freq[b] + 1, self.max_freq)

    def insert(self, b: int, acc) -> None:
        self.q.append(b)
        self.freq[b] = self.init_freq

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        i = 0                     # scan position from the tail
        first_pinned = None
        while True:
            if i >= len(self.q):
                victim = first_pinned
                break
            b = self.q[i]
            if self.freq[b] >= 1:
                self.freq[b] -= 1
                del self.q[i]
                self.q.append(b)            # to the head; the scan continues at the same index
            elif b in pinned:
                if first_pinned is None:
                    first_pinned = b
                i += 1
            else:
                victim = b
                break
        self.q.remove(victim)
        del self.freq[victim]
        return victim

    def remove(self, b: int) -> None:
        self.q.remove(b)
        del self.freq[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> Clock:
    return Clock(capacity, int(params["n-bit-counter"]), int(params["init-freq"]))
