# cython: language_level=3
"""FIFO's class and its operations as inline methods (called directly by the serve loop, ``K_FIFO``)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policy cimport Policy
from shadow.sim.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._dlist cimport DList, dl_push_head, dl_unlink, dl_unpinned_tail


cdef class FIFO(Policy):
    cdef DList q

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        dl_push_head(&self.q, slot)
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int32_t s = self.q.tail
        cdef int64_t victim
        if s < 0:
            return 0
        s = dl_unpinned_tail(&self.q, self.pins)
        dl_unlink(&self.q, s)
        victim = self._drop_slot(s)
        # NOTE: as in LRU: the next victim is (almost always) the new tail.
        # Two deep: the next victim's table entry (its id was loaded by the previous call's
        # prefetch) and the slot data of the one after it.
        s = self.q.tail
        if s >= 0:
            self.prefetch(self.slot_ids[s])
            s = self.q.prev[s]
            if s >= 0:
                SHADOW_PREFETCH(&self.slot_ids[s])
                SHADOW_PREFETCH(&self.pins[s])
                SHADOW_PREFETCH(&self.q.prev[s])
        return victim
