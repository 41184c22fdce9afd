# cython: language_level=3
"""The S3FIFO class and its operations as inline methods (called directly by the serve loop,
``K_S3FIFO``), and ``dl_first_unpinned`` (shared by arc and twoq).

The small and main FIFOs are :c:type:`~shadow.sim.policies._shared.ghost.SlotFIFO` rings sharing one
``qpos`` array; the ghost is a :c:type:`~shadow.sim.policies._shared.ghost.GhostRing`.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t

from shadow.sim.core.idtable cimport SHADOW_PREFETCH, sids_addr
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport DList
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_find, gr_remove, gr_push_bounded,
                                         gr_prefetch, SlotFIFO, sf_push, sf_remove, sf_tail,
                                         sf_next_pos, sf_ahead, sf_at, sf_remove_at, sf_pos)


cdef enum:
    PF_NEAR = 2     # evictions ahead whose table entries are prefetched
    PF_FAR = 8      # evictions ahead whose per-slot data are prefetched
    PF_WALK = 4     # ring entries ahead of main's walk whose per-slot data are prefetched


cdef inline int32_t dl_first_unpinned(const DList* d, const uint16_t* pins) noexcept nogil:
    """The slot nearest ``d``'s tail with no pin, or -1."""
    cdef int32_t s = d.tail
    while s >= 0 and pins[s] > 0:
        s = d.prev[s]
    return s


cdef class S3FIFO(Policy):
    cdef SlotFIFO small
    cdef SlotFIFO main
    cdef int32_t* qpos          # ring position of a slot in small or main (shared), -1 none
    cdef uint8_t* freq
    cdef uint8_t* in_main
    cdef GhostRing ghost
    cdef readonly int64_t small_size, main_size, ghost_size, threshold
    cdef readonly bint has_evicted


    # NOTE: the operations live here as inline methods: ``hit``/``insert``/``evict`` run them,
    # and the serve loop (``K_S3FIFO``) calls them directly, inlined, with no virtual call.

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.freq[slot] < 255:
            self.freq[slot] += 1

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, block_id)
        cdef int64_t slot = self._take_slot(block_id)
        self.freq[slot] = 0
        if pos >= 0:
            gr_remove(&self.ghost, pos)
            self.in_main[slot] = 1
            sf_push(&self.main, slot)
        elif not self.has_evicted and self.small.n >= self.small_size:
            self.in_main[slot] = 1
            sf_push(&self.main, slot)
        else:
            self.in_main[slot] = 0
            sf_push(&self.small, slot)
        return slot

    cdef inline void _ghost_add(self, int64_t block_id) noexcept nogil:
        gr_push_bounded(&self.ghost, block_id)

    cdef inline int64_t _evict_small(self) noexcept nogil:
        cdef int64_t p = self.small.tail if self.small.n > 0 else -1, nxt
        cdef int32_t s
        cdef int64_t block_id
        while p >= 0:
            s = self.small.q[p]
            # NOTE: found before the removal; small's positions hold (only a push compacts).
            nxt = sf_next_pos(&self.small, p)
            if self.freq[s] >= self.threshold:
                sf_remove_at(&self.small, p, s)
                self.freq[s] = 0
                self.in_main[s] = 1
                sf_push(&self.main, s)
            elif self.pins[s] <= 0:
                sf_remove_at(&self.small, p, s)
                block_id = self._drop_slot(s)
                self._ghost_add(block_id)
                return block_id
            p = nxt
        return 0

    cdef inline int64_t _evict_main(self) noexcept nogil:
        cdef int64_t p = self.main.tail if self.main.n > 0 else -1, nxt
        cdef int32_t s, t
        cdef uint8_t f
        while p >= 0:
            s = self.main.q[p]
            # NOTE: the walk reads the per-slot data of blocks in ring order: load them ahead.
            t = sf_at(&self.main, p, PF_WALK)
            if t >= 0:
                SHADOW_PREFETCH(&self.freq[t])
                SHADOW_PREFETCH(&self.pins[t])
                SHADOW_PREFETCH(sids_addr(&self.slot_ids, t))
            f = self.freq[s]
            if f >= 1:
                self.freq[s] = (f if f < 3 else 3) - 1
                # NOTE: the next candidate is found before the move; a reinserted block is met
                # again after the blocks ahead of it, exactly as libCacheSim's repeated "take
                # the tail".  The newest block stays where it is (it is met again at once).
                nxt = sf_next_pos(&self.main, p)
                if nxt >= 0:
                    t = self.main.q[nxt]
                    sf_remove_at(&self.main, p, s)
                    sf_push(&self.main, s)
                    p = sf_pos(&self.main, t)   # NOTE: the push may have compacted the ring
            elif self.pins[s] > 0:
                p = sf_next_pos(&self.main, p)
            else:
                sf_remove_at(&self.main, p, s)
                return self._drop_slot(s)
        return 0

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int64_t victim
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        self.has_evicted = True
        if self.main.n > self.main_size or self.small.n == 0:
            victim = self._evict_main()
            if victim == 0:
                victim = self._evict_small()
        else:
            victim = self._evict_small()
            if victim == 0:
                victim = self._evict_main()
        if victim == 0:
            # best effort: every candidate is pinned
            if self.small.n > 0:
                s = sf_tail(&self.small)
                sf_remove(&self.small, s)
                victim = self._drop_slot(s)
                self._ghost_add(victim)
            else:
                s = sf_tail(&self.main)
                sf_remove(&self.main, s)
                victim = self._drop_slot(s)
        # NOTE: the next victims are most often small's oldest blocks: load the per-slot data of
        # the one PF_FAR places ahead, and the table entries (resident delete, ghost insert) of the
        # one PF_NEAR ahead, whose id the earlier prefetch brought in.
        s = sf_ahead(&self.small, PF_FAR)
        if s >= 0:
            SHADOW_PREFETCH(sids_addr(&self.slot_ids, s))
            SHADOW_PREFETCH(&self.freq[s])
            SHADOW_PREFETCH(&self.pins[s])
        s = sf_ahead(&self.small, PF_NEAR)
        if s >= 0:
            self.prefetch(self.slot_id(s))
            gr_prefetch(&self.ghost, self.slot_id(s))
        return victim
