# cython: language_level=3
"""SIEVE (libCacheSim ``Sieve``): a FIFO queue with a visited bit and a moving hand.

A hit sets visited; inserts go to the head unvisited.  The hand starts at the tail (when unset)
and walks towards the head, wrapping to the tail: a visited block is cleared and passed, the
first unvisited block is evicted and the hand stays at its predecessor (towards the head).

Pins: honoured.  A pinned unvisited block is passed without change; after more consecutive
pinned passes than resident blocks, the first pinned candidate met is evicted (best effort).
Memory: base 40 B/slot + list 8 B/slot + bit 1 B/slot = 49 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies._dlist cimport DList, dl_init, dl_free, dl_push_head, dl_unlink

DEFAULTS = ""
HONOURS_PINS = True
STRICT_PINS = True      # never a pinned victim while an unpinned block exists
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "SIEVE: FIFO with a visited bit and a hand (libCacheSim Sieve)"


cdef class Sieve(Policy):
    cdef DList q
    cdef uint8_t* visited
    cdef int32_t hand          # -1: unset (start at the tail)

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
        self.visited[slot] = 1

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        dl_push_head(&self.q, slot)
        self.visited[slot] = 0
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s, first_pinned = -1
        cdef int64_t pinned_passes = 0
        if self.q.tail < 0:
            return 0
        s = self.hand if self.hand >= 0 else self.q.tail
        while True:
            if self.visited[s]:
                self.visited[s] = 0
                pinned_passes = 0
            elif self.pins[s] > 0:
                if first_pinned < 0:
                    first_pinned = s
                pinned_passes += 1
                if pinned_passes > self.n_resident:
                    s = first_pinned
                    break
            else:
                break
            s = self.q.prev[s]
            if s < 0:
                s = self.q.tail
        self.hand = self.q.prev[s]
        dl_unlink(&self.q, s)
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.hand == slot:
            self.hand = self.q.prev[slot]
        dl_unlink(&self.q, slot)
        self._drop_slot(slot)


def make(capacity: int, params: dict) -> Sieve:
    return Sieve(capacity)
