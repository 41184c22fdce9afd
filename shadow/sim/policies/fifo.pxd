# cython: language_level=3
"""FIFO's class and its operations as inline methods (called directly by the serve loop, ``K_FIFO``)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policy cimport Policy
from shadow.sim.policies._dlist cimport (LRing, lr_push, lr_unpinned_first, lr_take,
                                         lr_maybe_prefetch_ahead)


cdef class FIFO(Policy):
    cdef LRing q      # insertion order: the oldest live entry is the next victim

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        lr_push(&self.q, slot)
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        # NOTE: as in LRU: pinned blocks are passed over (left in place); all pinned: the oldest.
        cdef int64_t i = lr_unpinned_first(&self.q, self.pins)
        cdef int64_t s
        if i < 0:
            return 0
        s = self.q.r[i]
        lr_take(&self.q, i)
        # NOTE: the next victims are the next live entries: their data is loaded ahead.
        lr_maybe_prefetch_ahead(&self.q, self.slot_ids, self.pins, &self.table)
        return self._drop_slot(s)
