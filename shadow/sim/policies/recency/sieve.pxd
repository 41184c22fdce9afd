# cython: language_level=3
"""SIEVE's class and its operations as inline methods (called directly by the serve loop, ``K_SIEVE``)."""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport DList, dl_push_head, dl_unlink


cdef class Sieve(Policy):
    cdef DList q
    cdef uint8_t* visited
    cdef int32_t hand          # -1: unset (start at the tail)

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        self.visited[slot] = 1

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        dl_push_head(&self.q, slot)
        self.visited[slot] = 0
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int32_t s, first_pinned = -1
        cdef int64_t pinned_passes = 0
        if self.q.tail < 0:
            return 0
        s = self.hand if self.hand >= 0 else self.q.tail
        while True:
            if self.visited[s]:
                self.visited[s] = 0
                pinned_passes = 0
            elif self.pins[s] > 0:
                if first_pinned < 0:
                    first_pinned = s
                pinned_passes += 1
                if pinned_passes > self.n_resident:
                    s = first_pinned
                    break
            else:
                break
            s = self.q.prev[s]
            if s < 0:
                s = self.q.tail
        self.hand = self.q.prev[s]
        dl_unlink(&self.q, s)
        return self._drop_slot(s)
