# cython: language_level=3
"""FIFO's class and its operations as inline methods (called directly by the serve loop, ``K_FIFO``)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport SOrder, so_push, so_take_victim


cdef class FIFO(Policy):
    cdef SOrder q     # insertion order (a list or, from LR_RING_MIN slots, a ring): oldest = victim

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        so_push(&self.q, slot)
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        # NOTE: as in LRU: pinned blocks are passed over (left in place); all pinned: the oldest.
        cdef int64_t s = so_take_victim(&self.q, &self.slot_ids, self.pins, &self.table)
        if s < 0:
            return 0
        return self._drop_slot(s)
