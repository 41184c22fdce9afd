# cython: language_level=3
"""FIFO: insertion order only; a hit changes nothing; the oldest block is evicted.

Pins: honoured (walk from the oldest towards the newest past pinned blocks; all pinned: the
oldest).  Memory: base 22 B/slot + insertion ring 12 B/slot (``LRing``, policies/_shared/dlist.pxd) = 34 B/slot
from 32768 slots (LR_RING_MIN) on; below, the order is a linked list, 8 B/slot (``SOrder``: the
ring's compactions, one per about ``capacity`` inserts since no hit appends, and its shifts
behind pinned blocks cost more than its prefetches save while the state sits in the L2).
"""

from libc.stdint cimport int64_t, int32_t, uint32_t

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport (SOrder, so_init, so_free, so_drop,
                                         so_slots_oldest_first)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="first in, first out (libCacheSim FIFO)",
    family="recency",
    strict_pins=True,
    libcachesim="FIFO",
    prefixsim_evictions=True,
)


cdef class FIFO(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of fifo.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        # NOTE: a list below LR_RING_MIN slots, a ring from there on (see SOrder in policies/_shared/dlist.pxd).
        so_init(&self.q, capacity)

    def __dealloc__(self):
        so_free(&self.q)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        so_drop(&self.q, slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids from the newest to the oldest (next victim)."""
        return [self.slot_id(s) for s in reversed(so_slots_oldest_first(&self.q))]

    @property
    def uses_ring(self) -> bool:
        """Whether the order is kept as a ring (else a list; see SOrder in policies/_shared/dlist.pxd)."""
        return bool(self.q.ring)


def make(capacity: int, params: dict) -> FIFO:
    return FIFO(capacity)
