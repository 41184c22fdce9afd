# cython: language_level=3
"""vLLM BlockPool order: the class and its operations as inline methods (serve loop ``K_VLLM``)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policy cimport Policy
from shadow.sim.policies._dlist cimport DList, dl_push_head, dl_unlink, dl_unpinned_tail


cdef class VLLM(Policy):
    cdef DList q           # head: most recently released; tail: next victim
    cdef int32_t* ref

    cdef inline bint _queued(self, int64_t slot) noexcept nogil:
        return self.q.head == slot or self.q.prev[slot] >= 0

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.ref[slot] == 0 and self._queued(slot):
            dl_unlink(&self.q, slot)
        self.ref[slot] += 1

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        self.ref[slot] = 1
        return slot

    cdef inline void fast_release(self, int64_t slot) noexcept nogil:
        if self.ref[slot] > 0:
            self.ref[slot] -= 1
            if self.ref[slot] == 0:
                dl_push_head(&self.q, slot)

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int32_t s = self.q.tail
        if s < 0:
            return 0
        s = dl_unpinned_tail(&self.q, self.pins)
        dl_unlink(&self.q, s)
        self.ref[s] = 0
        return self._drop_slot(s)
