"""vLLM BlockPool reference: reference counts and a free queue (first = next victim)."""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = ""
HONOURS_PINS = True
WANTS_RELEASE = True


class VLLM:
    WANTS_RELEASE = True

    def __init__(self, capacity: int) -> None:
        self.ref: dict[int, int] = {}
        self.free: OrderedDict[int, None] = OrderedDict()   # first = least recently released

    def __len__(self) -> int:
        return len(self.ref)

    def find(self, b: int) -> bool:
        return b in self.ref

    def hit(self, b: int, acc) -> None:
        if self.ref[b] == 0:
            self.free.pop(b, None)
        self.ref[b] += 1

    def insert(self, b: int, acc) -> None:
        self.ref[b] = 1

    def on_release(self, b: int) -> None:
        if self.ref.get(b, 0) > 0:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.free:
            return 0
        victim = next((b for b in self.free if b not in pinned), next(iter(self.free)))
        del self.free[victim]
        del self.ref[victim]
        return victim

    def remove(self, b: int) -> None:
        self.free.pop(b, None)
        del self.ref[b]

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> VLLM:
    return VLLM(capacity)
