# cython: language_level=3
"""GDSF, greedy dual size frequency (libCacheSim 0.3.5 ``cpp/GDSF.cpp``): a priority min-heap.

Every resident block has a priority ``L + freq * 1e6 / size`` (size 1), set on insert (freq 1)
and on each hit (freq + 1); ``L`` is the priority of the last evicted block.  Evict takes the
lowest priority; equal priorities go by the time of the last insert/hit, oldest first (libCacheSim
orders by ``n_req`` at that time; a per-cache counter gives the same order).  Cost is ignored,
as in libCacheSim; ``cost-aware=true`` (off by default, not libCacheSim) uses ``freq * cost`` with
the access's integer cost instead of ``freq * 1e6``.

Pins: honoured.  Pinned minima are popped aside until an unpinned block is found, then pushed
back; if every block is pinned the plain minimum is taken.  ``L`` becomes the victim's priority.

Memory: base 36 B/slot + heap 4 + position 4 + priority 8 + stamp 8 + freq 4 = 28 B/slot of
GDSF's own state, plus a 4 B/slot scratch list for pinned minima.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, free

from shadow.sim.policy cimport Policy, Access

DEFAULTS = "cost-aware=false"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "greedy dual size frequency: priority L + freq*1e6/size (libCacheSim GDSF)"


cdef class GDSF(Policy):
    """See the module docstring.  ``heap[0]`` is the slot with the lowest (priority, stamp)."""

    cdef int32_t* heap
    cdef int32_t* pos
    cdef double* pri
    cdef int64_t* stamp
    cdef int32_t* freq
    cdef int32_t* aside
    cdef int64_t n_heap
    cdef int64_t clock
    cdef readonly double L
    cdef readonly bint cost_aware

    def __cinit__(self, int64_t capacity, bint cost_aware=False, *args, **kwargs):
        self.heap = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.pos = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.pri = <double*>malloc(capacity * sizeof(double))
        self.stamp = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.freq = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.aside = <int32_t*>malloc(capacity * sizeof(int32_t))
        if (self.heap == NULL or self.pos == NULL or self.pri == NULL or self.stamp == NULL
                or self.freq == NULL or self.aside == NULL):
            raise MemoryError(f"cannot allocate a GDSF cache of {capacity} slots")
        self.n_heap = 0
        self.clock = 0
        self.L = 0.0
        self.cost_aware = cost_aware

    def __dealloc__(self):
        free(self.heap)
        free(self.pos)
        free(self.pri)
        free(self.stamp)
        free(self.freq)
        free(self.aside)

    cdef inline bint _less(self, int32_t a, int32_t b) noexcept nogil:
        if self.pri[a] != self.pri[b]:
            return self.pri[a] < self.pri[b]
        return self.stamp[a] < self.stamp[b]

    cdef inline void _place(self, int64_t i, int32_t s) noexcept nogil:
        self.heap[i] = s
        self.pos[s] = <int32_t>i

    cdef void _up(self, int64_t i) noexcept nogil:
        cdef int32_t s = self.heap[i], p
        cdef int64_t parent
        while i > 0:
            parent = (i - 1) >> 1
            p = self.heap[parent]
            if not self._less(s, p):
                break
            self._place(i, p)
            i = parent
        self._place(i, s)

    cdef void _down(self, int64_t i) noexcept nogil:
        cdef int32_t s = self.heap[i], c
        cdef int64_t child, n = self.n_heap
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and self._less(self.heap[child + 1], self.heap[child]):
                child += 1
            c = self.heap[child]
            if not self._less(c, s):
                break
            self._place(i, c)
            i = child
        self._place(i, s)

    cdef inline void _push(self, int32_t s) noexcept nogil:
        self._place(self.n_heap, s)
        self.n_heap += 1
        self._up(self.n_heap - 1)

    cdef inline int32_t _pop(self) noexcept nogil:
        cdef int32_t top = self.heap[0]
        self.n_heap -= 1
        if self.n_heap > 0:
            self._place(0, self.heap[self.n_heap])
            self._down(0)
        self.pos[top] = -1
        return top

    cdef inline void _delete(self, int32_t s) noexcept nogil:
        cdef int64_t i = self.pos[s]
        cdef int32_t last
        self.n_heap -= 1
        if i != self.n_heap:
            last = self.heap[self.n_heap]
            self._place(i, last)
            self._down(i)
            self._up(self.pos[last])
        self.pos[s] = -1

    cdef inline double _weight(self, const Access* acc) noexcept nogil:
        if self.cost_aware:
            return <double>(acc.cost if acc.cost > 1 else 1)
        return 1.0e6

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.freq[slot] += 1
        self.clock += 1
        self.pri[slot] = self.L + <double>self.freq[slot] * self._weight(acc)
        self.stamp[slot] = self.clock
        # NOTE: without cost-aware the key only grows (L never falls), so only _down moves it.
        self._down(self.pos[slot])
        self._up(self.pos[slot])

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self.freq[slot] = 1
        self.clock += 1
        self.pri[slot] = self.L + self._weight(acc)
        self.stamp[slot] = self.clock
        self._push(<int32_t>slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t n_aside = 0, i
        cdef int32_t s = -1
        if self.n_heap == 0:
            return 0
        while self.n_heap > 0:
            s = self._pop()
            if self.pins[s] <= 0:
                break
            self.aside[n_aside] = s
            n_aside += 1
            s = -1
        if s < 0:
            # best effort: everything is pinned; the first set aside is the plain minimum
            s = self.aside[0]
            for i in range(1, n_aside):
                self._push(self.aside[i])
        else:
            for i in range(n_aside):
                self._push(self.aside[i])
        self.L = self.pri[s]
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._delete(<int32_t>slot)
        self._drop_slot(slot)

    def order(self) -> list[tuple[int, float]]:
        """(id, priority) of the resident blocks from the next victim on (heap sorted; tests)."""
        cdef int64_t i
        items = [(self.pri[self.heap[i]], self.stamp[self.heap[i]], self.slot_ids[self.heap[i]])
                 for i in range(self.n_heap)]
        items.sort()
        return [(b, p) for p, _, b in items]


def make(capacity: int, params: dict) -> GDSF:
    return GDSF(capacity, bool(params.get("cost-aware", False)))
