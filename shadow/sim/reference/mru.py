"""MRU reference: the LRU reference's list, evicted from the most recent end."""

from __future__ import annotations

from shadow.sim.reference.lru import LRU

DEFAULTS = ""
HONOURS_PINS = True


class MRU(LRU):
    """As :class:`~shadow.sim.reference.lru.LRU` (``q``'s last item is the most recent), but the
    victim is the most recent unpinned block (all pinned: the most recent)."""

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        newest = next(reversed(self.q))
        victim = next((b for b in reversed(self.q) if b not in pinned), newest)
        del self.q[victim]
        return victim


def make(capacity: int, params: dict) -> MRU:
    return MRU(capacity)
