# cython: language_level=3
"""LRU: one recency list; a hit moves the block to the head, inserts go to the head, the tail is evicted.

Pins: honoured.  Eviction walks from the tail towards the head past pinned slots and takes the
first unpinned one; if every resident block is pinned it takes the tail (best effort).
Memory: base 22 B/slot + recency ring 12 B/slot (see ``LRing`` in policies/_shared/dlist.pxd) = 34 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport LRing, lr_init, lr_free, lr_drop
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="least recently used (libCacheSim LRU)",
    family="recency",
    strict_pins=True,
    libcachesim="LRU",
    prefixsim_evictions=True,
)


cdef class LRU(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of lru.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        lr_init(&self.q, capacity)

    def __dealloc__(self):
        lr_free(&self.q)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        lr_drop(&self.q, slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids from the head (most recent) to the tail (next victim)."""
        out = []
        cdef int64_t i
        for i in range(self.q.w - 1, self.q.t - 1, -1):
            if self.q.pos[self.q.r[i]] == <uint32_t>i:
                out.append(self.slot_id(self.q.r[i]))
        return out


def make(capacity: int, params: dict) -> LRU:
    return LRU(capacity)
