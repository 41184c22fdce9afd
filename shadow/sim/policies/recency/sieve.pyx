# cython: language_level=3
"""SIEVE (libCacheSim ``Sieve``): a FIFO queue with a visited bit and a moving hand.

A hit sets visited; inserts go to the head unvisited.  The hand starts at the tail (when unset)
and walks towards the head, wrapping to the tail: a visited block is cleared and passed, the
first unvisited block is evicted and the hand stays at its predecessor (towards the head).

Pins: honoured.  A pinned unvisited block is passed without change; after more consecutive
pinned passes than resident blocks, the first pinned candidate met is evicted (best effort).
Memory: base 22 B/slot + list 8 B/slot + bit 1 B/slot = 31 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport DList, dl_init, dl_free, dl_unlink
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="SIEVE: FIFO with a visited bit and a hand (libCacheSim Sieve)",
    family="recency",
    strict_pins=True,
    libcachesim="Sieve",
    prefixsim_evictions=True,
)


cdef class Sieve(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of sieve.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        dl_init(&self.q, capacity)
        self.visited = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.visited == NULL:
            raise MemoryError()
        self.hand = -1

    def __dealloc__(self):
        dl_free(&self.q)
        free(self.visited)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.hand == slot:
            self.hand = self.q.prev[slot]
        dl_unlink(&self.q, slot)
        self._drop_slot(slot)


def make(capacity: int, params: dict) -> Sieve:
    return Sieve(capacity)
