# cython: language_level=3
"""LRU's class and its operations as inline methods, so the serve loop can call them directly.

NOTE: the ``fast_*`` methods are what ``hit``/``insert``/``evict`` run; being ``inline`` in this
file, they are compiled into (and inlined by) every module that cimports it, so the serve loop's
LRU specialisation costs no virtual call per block (see core/loop.pyx, ``K_LRU``).
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.core.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._shared.dlist cimport (LRing, lr_push, lr_touch, lr_unpinned_first, lr_take,
                                         lr_maybe_prefetch_ahead)


cdef class LRU(Policy):
    cdef LRing q      # recency order: the oldest live entry is the least recently used

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        lr_touch(&self.q, slot)

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t slot = self._take_slot(block_id)
        lr_push(&self.q, slot)
        return slot

    cdef inline void fast_prefetch_hit(self, int64_t slot) noexcept nogil:
        """Hint that ``fast_hit(slot)`` comes soon (its ``pos`` entry is written then)."""
        SHADOW_PREFETCH(&self.q.pos[slot])

    cdef inline int64_t fast_evict(self) noexcept nogil:
        # NOTE: pinned blocks belong to the request being served; skipping them is what a
        # real engine's reference counts do.  All pinned: fall back to the plain LRU block.
        cdef int64_t i = lr_unpinned_first(&self.q, self.pins)
        cdef int64_t s
        if i < 0:
            return 0
        s = self.q.r[i]
        lr_take(&self.q, i)
        # NOTE: the next victims are the next live entries of the ring: their slot data and
        # table entries are loaded ahead, while the loop does other work.
        lr_maybe_prefetch_ahead(&self.q, &self.slot_ids, self.pins, &self.table)
        return self._drop_slot(s)
