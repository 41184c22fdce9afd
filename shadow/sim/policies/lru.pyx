# cython: language_level=3
"""LRU: one recency list; a hit moves the block to the head, inserts go to the head, the tail is evicted.

Pins: honoured.  Eviction walks from the tail towards the head past pinned slots and takes the
first unpinned one; if every resident block is pinned it takes the tail (best effort).
Memory: base 32 B/slot + list 8 B/slot = 40 B/slot.
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policy cimport Policy, Access
from shadow.sim.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._dlist cimport DList, dl_init, dl_free, dl_push_head, dl_unlink, dl_move_head

DEFAULTS = ""
HONOURS_PINS = True
STRICT_PINS = True      # never a pinned victim while an unpinned block exists
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "least recently used (libCacheSim LRU)"


cdef class LRU(Policy):
    cdef DList q

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
        cdef int32_t s = self.q.tail
        cdef int64_t victim
        if s < 0:
            return 0
        # NOTE: pinned blocks belong to the request being served; skipping them is what a
        # real engine's reference counts do.  All pinned: fall back to the plain tail.
        while s >= 0 and self.pins[s] > 0:
            s = self.q.prev[s]
        if s < 0:
            s = self.q.tail
        dl_unlink(&self.q, s)
        victim = self._drop_slot(s)
        # NOTE: the next victim is (almost always) the new tail: start loading its slot data now,
        # while the loop does other work.
        if self.q.tail >= 0:
            SHADOW_PREFETCH(&self.slot_ids[self.q.tail])
            SHADOW_PREFETCH(&self.pins[self.q.tail])
            SHADOW_PREFETCH(&self.q.prev[self.q.tail])
        return victim

    cdef void remove(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.q, slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids from the head (most recent) to the tail (next victim)."""
        out = []
        cdef int32_t s = self.q.head
        while s >= 0:
            out.append(self.slot_ids[s])
            s = self.q.next[s]
        return out


def make(capacity: int, params: dict) -> LRU:
    return LRU(capacity)
