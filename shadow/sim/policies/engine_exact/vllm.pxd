# cython: language_level=3
"""vLLM BlockPool order: the class and its operations as inline methods (serve loop ``K_VLLM``)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport (LRing, LR_NONE, lr_push, lr_drop, lr_unpinned_first,
                                         lr_take, lr_maybe_prefetch_ahead)


cdef class VLLM(Policy):
    cdef LRing q           # the free queue: oldest live entry = next victim; appends = releases
    cdef int32_t* ref

    cdef inline bint _queued(self, int64_t slot) noexcept nogil:
        return self.q.pos[slot] != LR_NONE

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.ref[slot] == 0 and self._queued(slot):
            lr_drop(&self.q, slot)
        self.ref[slot] += 1

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        self.ref[slot] = 1
        return slot

    cdef inline void fast_release(self, int64_t slot) noexcept nogil:
        if self.ref[slot] > 0:
            self.ref[slot] -= 1
            if self.ref[slot] == 0:
                lr_push(&self.q, slot)

    cdef inline int64_t fast_evict(self) noexcept nogil:
        # NOTE: as in LRU: pinned blocks still queued are passed over; all pinned: the oldest.
        cdef int64_t i = lr_unpinned_first(&self.q, self.pins)
        cdef int64_t s
        if i < 0:
            return 0
        s = self.q.r[i]
        lr_take(&self.q, i)
        lr_maybe_prefetch_ahead(&self.q, &self.slot_ids, self.pins, &self.table)
        self.ref[s] = 0
        return self._drop_slot(s)
