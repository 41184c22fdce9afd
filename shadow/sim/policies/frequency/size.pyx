# cython: language_level=3
"""size: evict the largest object (libCacheSim ``Size``, libCacheSim/cache/eviction/Size.c), here
with every block one unit.

libCacheSim keeps a binary max-heap on the object size (``dataStructure/pqueue.c``, whose
comparison is a strict ``<``).  With unit sizes every priority ties, so the heap never moves an
entry: an insert appends to the heap array, a hit changes nothing (``pqueue_change_priority`` to
the same size), an eviction pops the root (index 0 here) and the array's last entry takes its
place, a removal puts the last entry in the removed one's place.  This module keeps exactly that
array, so it follows libCacheSim's ``Size`` event by event.  NOTE: what that degenerates to: the
first victim is the first block inserted; after it the root holds whatever was appended last
before the previous eviction, so evictions take the newest arrivals (MRU-like), while the blocks
in the other positions stay until removed.

Pins: honoured strictly (``strict_pins``).  The victim is the first unpinned entry in array
order (the root first), removed as libCacheSim's ``pqueue_remove`` would (the last entry takes
its place); if every resident block is pinned the root is taken (best effort).

Memory: base 22 B/slot + heap array 4 + position 4 = 30 B/slot.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="evict the largest object; with unit sizes the root of a tied heap (libCacheSim Size)",
    family="frequency",
    strict_pins=True,
    weight=1.0,
    libcachesim="Size",
)


cdef class Size(Policy):
    """See the module docstring.  Invariants: ``heap[0 .. n_resident)`` holds each resident slot
    once and ``pos[heap[i]] == i``."""

    cdef int32_t* heap
    cdef int32_t* pos

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.heap = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        self.pos = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        if self.heap == NULL or self.pos == NULL:
            raise MemoryError(f"cannot allocate a Size cache of {capacity} slots")

    def __dealloc__(self):
        free(self.heap)
        free(self.pos)

    cdef inline int64_t _take(self, int64_t i) noexcept nogil:
        """Remove heap entry ``i`` (the last entry takes its place) and its block; its id."""
        cdef int32_t s = self.heap[i], last = self.heap[self.n_resident - 1]
        self.heap[i] = last
        self.pos[last] = <int32_t>i
        return self._drop_slot(s)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        pass

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t i = self.n_resident
        cdef int64_t slot = self._take_slot(acc.block_id)
        self.heap[i] = <int32_t>slot
        self.pos[slot] = <int32_t>i
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t i = 0, n = self.n_resident
        if n == 0:
            return 0
        if self.n_pinned > 0:
            while i < n and self.pins[self.heap[i]] > 0:
                i += 1
            if i == n:
                i = 0                   # NOTE: every resident block is pinned: best effort
        return self._take(i)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._take(self.pos[slot])

    def order(self) -> list[int]:
        """Resident ids in heap-array order (the root, the next victim, first)."""
        cdef int64_t i
        return [self.slot_id(self.heap[i]) for i in range(self.n_resident)]


def make(capacity: int, params: dict) -> Size:
    return Size(capacity)
