# cython: language_level=3
"""The QDLP class, its queues and the CLOCK walk its main cache shares with s3fifod's subclass."""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport DList, dl_push_head, dl_unlink, dl_move_head
from shadow.sim.policies._shared.ghost cimport GhostRing, SlotFIFO, sf_next_pos, sf_push, sf_tail


cdef class QDLP(Policy):
    cdef SlotFIFO fifo
    cdef int32_t* qpos          # FIFO ring position of a slot, -1 when it is not on the FIFO
    cdef DList main
    cdef uint8_t* freq          # FIFO hit count (saturating at 255) or main CLOCK counter
    cdef GhostRing ghost
    cdef uint8_t max_freq
    cdef readonly int64_t fifo_size, main_size, ghost_size, threshold

    cdef inline int64_t main_n(self) noexcept nogil:
        return self.n_resident - self.fifo.n

    cdef inline void _to_main(self, int32_t s) noexcept nogil:
        self.freq[s] = 0
        dl_push_head(&self.main, s)

    cdef inline int64_t _insert_main(self, int64_t block_id) noexcept nogil:
        """A ghost hit: the block goes straight into main (the caller made room there)."""
        cdef int64_t slot = self._take_slot(block_id)
        self._to_main(<int32_t>slot)
        return slot

    cdef inline int64_t _insert_fifo(self, int64_t block_id) noexcept nogil:
        """A new block: onto the FIFO with no hits."""
        cdef int64_t slot = self._take_slot(block_id)
        self.freq[slot] = 0
        sf_push(&self.fifo, slot)
        return slot

    cdef inline void _count(self, int64_t slot) noexcept nogil:
        """A hit's ``freq += 1``: up to 255 on the FIFO, up to the counter's max in main."""
        if self.qpos[slot] >= 0:
            if self.freq[slot] < 255:
                self.freq[slot] += 1
        elif self.freq[slot] < self.max_freq:
            self.freq[slot] += 1

    cdef inline int32_t _clock_victim(self, bint honour_pins) noexcept nogil:
        """Main's CLOCK victim, unlinked but still resident, passing pinned blocks with counter
        0 in place (``honour_pins``); -1 when every main block is pinned (counters lowered on
        the way) or main is empty."""
        cdef int32_t s = self.main.tail, nxt
        while s >= 0:
            if self.freq[s] >= 1:
                self.freq[s] -= 1
                nxt = self.main.prev[s]
                dl_move_head(&self.main, s)
                # NOTE: the head itself moves nowhere; look at it again with its lowered counter.
                s = nxt if nxt >= 0 else s
            elif honour_pins and self.pins[s] > 0:
                s = self.main.prev[s]
            else:
                dl_unlink(&self.main, s)
                return s
        return -1

    cdef inline int32_t _fifo_oldest_unpinned(self) noexcept nogil:
        """The FIFO's oldest unpinned block, else its oldest, -1 when it is empty."""
        cdef int64_t p = self.fifo.tail if self.fifo.n > 0 else -1
        while p >= 0:
            if self.pins[self.fifo.q[p]] <= 0:
                return self.fifo.q[p]
            p = sf_next_pos(&self.fifo, p)
        return sf_tail(&self.fifo)
