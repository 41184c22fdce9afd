# cython: language_level=3
"""CLOCK's class and its operations as inline methods (called directly by the serve loop, ``K_CLOCK``)."""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport DList, dl_push_head, dl_unlink, dl_move_head


cdef class Clock(Policy):
    cdef DList q
    cdef uint8_t* freq
    cdef uint8_t max_freq
    cdef uint8_t init_freq

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.freq[slot] < self.max_freq:
            self.freq[slot] += 1

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        dl_push_head(&self.q, slot)
        self.freq[slot] = self.init_freq
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int32_t s = self.q.tail, nxt, first_pinned = -1
        if s < 0:
            return 0
        while True:
            if s < 0:
                # NOTE: every block with counter 0 is pinned: best effort, take the first one met.
                s = first_pinned
                break
            if self.freq[s] >= 1:
                self.freq[s] -= 1
                nxt = self.q.prev[s]
                dl_move_head(&self.q, s)
                # NOTE: the head itself moves nowhere; look at it again with its lowered counter.
                s = nxt if nxt >= 0 else s
            elif self.pins[s] > 0:
                if first_pinned < 0:
                    first_pinned = s
                s = self.q.prev[s]
            else:
                break
        dl_unlink(&self.q, s)
        return self._drop_slot(s)
