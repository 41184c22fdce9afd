# cython: language_level=3
"""LRU's class and its operations as inline methods, so the serve loop can call them directly.

NOTE: the ``fast_*`` methods are what ``hit``/``insert``/``evict`` run; being ``inline`` in this
file, they are compiled into (and inlined by) every module that cimports it, so the serve loop's
LRU specialisation costs no virtual call per block (see loop.pyx, ``K_LRU``).
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policy cimport Policy
from shadow.sim.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._dlist cimport DList, dl_push_head, dl_unlink, dl_unpinned_tail, dl_move_head


cdef class LRU(Policy):
    cdef DList q

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        dl_move_head(&self.q, slot)

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        dl_push_head(&self.q, slot)
        return slot

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int32_t s = self.q.tail
        cdef int64_t victim
        if s < 0:
            return 0
        # NOTE: pinned blocks belong to the request being served; skipping them is what a
        # real engine's reference counts do.  All pinned: fall back to the plain tail.
        s = dl_unpinned_tail(&self.q, self.pins)
        dl_unlink(&self.q, s)
        victim = self._drop_slot(s)
        # NOTE: the next victim is (almost always) the new tail: start loading its slot data now,
        # while the loop does other work.
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
