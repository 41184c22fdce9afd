# cython: language_level=3
"""MRU: one recency list; a hit moves the block to the head, inserts go to the head, and the head
(the most recently used block) is evicted (libCacheSim ``MRU``).

Pins: honoured.  Eviction walks from the head towards the tail past pinned slots and takes the
first unpinned one; if every resident block is pinned it takes the head (best effort).
Memory: base 22 B/slot + list 8 B/slot (``DList``, policies/_shared/dlist.pxd) = 30 B/slot.
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_unlink, dl_push_head,
                                         dl_move_head)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="most recently used: evict the block used last (libCacheSim MRU)",
    family="recency",
    strict_pins=True,
    weight=1.0,
)


cdef class MRU(Policy):
    cdef DList q        # head = most recently used = next victim

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        dl_init(&self.q, capacity)

    def __dealloc__(self):
        dl_free(&self.q)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        dl_move_head(&self.q, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        dl_push_head(&self.q, slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s = self.q.head
        while s >= 0 and self.pins[s] > 0:
            s = self.q.next[s]
        if s < 0:
            s = self.q.head          # NOTE: every resident block is pinned: best effort
        if s < 0:
            return 0
        dl_unlink(&self.q, s)
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.q, slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids from the head (most recent, next victim) to the tail."""
        out = []
        cdef int32_t s = self.q.head
        while s >= 0:
            out.append(self.slot_id(s))
            s = self.q.next[s]
        return out


def make(capacity: int, params: dict) -> MRU:
    return MRU(capacity)
