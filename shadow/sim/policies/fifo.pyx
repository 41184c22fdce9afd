# cython: language_level=3
"""FIFO: insertion order only; a hit changes nothing; the oldest block is evicted.

Pins: honoured (walk from the oldest towards the newest past pinned blocks; all pinned: the
oldest).  Memory: base 26 B/slot + insertion ring 12 B/slot (``LRing``, _dlist.pxd) = 38 B/slot.
(No hit appends, so the ring compacts once per about ``capacity`` inserts.)
"""

from libc.stdint cimport int64_t, int32_t, uint32_t

from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies._dlist cimport LRing, lr_init, lr_free, lr_drop

DEFAULTS = ""
HONOURS_PINS = True
STRICT_PINS = True      # never a pinned victim while an unpinned block exists
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "first in, first out (libCacheSim FIFO)"


cdef class FIFO(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of fifo.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        lr_init(&self.q, capacity)

    def __dealloc__(self):
        lr_free(&self.q)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        lr_drop(&self.q, slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids from the newest to the oldest (next victim)."""
        out = []
        cdef int64_t i
        for i in range(self.q.w - 1, self.q.t - 1, -1):
            if self.q.pos[self.q.r[i]] == <uint32_t>i:
                out.append(self.slot_ids[self.q.r[i]])
        return out


def make(capacity: int, params: dict) -> FIFO:
    return FIFO(capacity)
