# cython: language_level=3
"""GDSF, greedy dual size frequency (libCacheSim 0.3.5 ``cpp/GDSF.cpp``): a priority min-heap.

Every resident block has a priority ``L + freq * 1e6 / size`` (size 1), set on insert (freq 1)
and on each hit (freq + 1); ``L`` is the priority of the last evicted block.  Evict takes the
lowest priority; equal priorities go by the time of the last insert/hit, oldest first (libCacheSim
orders by ``n_req`` at that time; a per-cache counter gives the same order).  Cost is ignored,
as in libCacheSim; ``cost-aware=true`` (off by default, not libCacheSim) uses ``freq * cost`` with
the access's integer cost instead of ``freq * 1e6``.

Pins: honoured.  The victim is the lowest-priority unpinned block (found by walking the pinned
region at the top of the heap); if every block is pinned the plain minimum is taken.  ``L``
becomes the victim's priority.

Memory: base 26 B/slot + heap entry 24 (priority, stamp, slot) + position 4 + freq 4 = 32 B/slot
of GDSF's own state, plus a 4 B/slot scratch stack for the pinned walk: 36 B/slot.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, free

from shadow.sim.policy cimport Policy, Access

DEFAULTS = "cost-aware=false"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "greedy dual size frequency: priority L + freq*1e6/size (libCacheSim GDSF)"


cdef struct HeapEnt:
    double pri
    int64_t stamp
    int64_t slot


cdef class GDSF(Policy):
    """See the module docstring.  ``heap[0]`` holds the lowest (priority, stamp); keys live in the
    heap entries themselves so a sift touches contiguous memory."""

    cdef HeapEnt* heap
    cdef int32_t* pos
    cdef int32_t* freq
    cdef int32_t* stack
    cdef int64_t n_heap
    cdef int64_t clock
    cdef readonly double L
    cdef readonly bint cost_aware

    def __cinit__(self, int64_t capacity, bint cost_aware=False, *args, **kwargs):
        self.heap = <HeapEnt*>malloc(capacity * sizeof(HeapEnt))
        self.pos = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.freq = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.stack = <int32_t*>malloc(capacity * sizeof(int32_t))
        if self.heap == NULL or self.pos == NULL or self.freq == NULL or self.stack == NULL:
            raise MemoryError(f"cannot allocate a GDSF cache of {capacity} slots")
        self.n_heap = 0
        self.clock = 0
        self.L = 0.0
        self.cost_aware = cost_aware

    def __dealloc__(self):
        free(self.heap)
        free(self.pos)
        free(self.freq)
        free(self.stack)

    @staticmethod
    cdef inline bint _less(const HeapEnt* a, const HeapEnt* b) noexcept nogil:
        if a.pri != b.pri:
            return a.pri < b.pri
        return a.stamp < b.stamp

    cdef void _up(self, int64_t i, HeapEnt e) noexcept nogil:
        """Place ``e`` at hole ``i``, sifting it towards the root."""
        cdef int64_t parent
        while i > 0:
            parent = (i - 1) >> 1
            if not GDSF._less(&e, &self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            self.pos[self.heap[i].slot] = <int32_t>i
            i = parent
        self.heap[i] = e
        self.pos[e.slot] = <int32_t>i

    cdef void _down(self, int64_t i, HeapEnt e) noexcept nogil:
        """Place ``e`` at hole ``i``, sifting it towards the leaves."""
        cdef int64_t child, n = self.n_heap
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and GDSF._less(&self.heap[child + 1], &self.heap[child]):
                child += 1
            if not GDSF._less(&self.heap[child], &e):
                break
            self.heap[i] = self.heap[child]
            self.pos[self.heap[i].slot] = <int32_t>i
            i = child
        self.heap[i] = e
        self.pos[e.slot] = <int32_t>i

    cdef inline void _push(self, HeapEnt e) noexcept nogil:
        self.n_heap += 1
        self._up(self.n_heap - 1, e)

    cdef inline HeapEnt _pop(self) noexcept nogil:
        cdef HeapEnt top = self.heap[0]
        self.n_heap -= 1
        if self.n_heap > 0:
            self._down(0, self.heap[self.n_heap])
        self.pos[top.slot] = -1
        return top

    cdef inline void _delete(self, int64_t slot) noexcept nogil:
        cdef int64_t i = self.pos[slot]
        cdef HeapEnt last
        self.n_heap -= 1
        if i != self.n_heap:
            last = self.heap[self.n_heap]
            self._down(i, last)
            i = self.pos[last.slot]
            self._up(i, self.heap[i])
        self.pos[slot] = -1

    cdef inline double _weight(self, const Access* acc) noexcept nogil:
        if self.cost_aware:
            return <double>(acc.cost if acc.cost > 1 else 1)
        return 1.0e6

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int64_t i = self.pos[slot]
        cdef HeapEnt e
        self.freq[slot] += 1
        self.clock += 1
        e.pri = self.L + <double>self.freq[slot] * self._weight(acc)
        e.stamp = self.clock
        e.slot = slot
        # NOTE: without cost-aware the key only grows (L never falls), so only _down moves it.
        self._down(i, e)
        i = self.pos[slot]
        self._up(i, self.heap[i])

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        cdef HeapEnt e
        self.freq[slot] = 1
        self.clock += 1
        e.pri = self.L + self._weight(acc)
        e.stamp = self.clock
        e.slot = slot
        self._push(e)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t n = self.n_heap, top = 0, best = -1, i, c, k
        cdef HeapEnt e
        if n == 0:
            return 0
        if self.pins[self.heap[0].slot] > 0:
            # NOTE: the lowest unpinned key is an unpinned child of a pinned node reachable from
            # the root through pinned nodes only; walk that pinned region (the request's own
            # blocks, usually few) instead of popping it aside.
            self.stack[0] = 0
            top = 1
            while top > 0:
                top -= 1
                i = self.stack[top]
                for k in range(2):
                    c = 2 * i + 1 + k
                    if c >= n:
                        break
                    if self.pins[self.heap[c].slot] > 0:
                        self.stack[top] = <int32_t>c
                        top += 1
                    elif best < 0 or GDSF._less(&self.heap[c], &self.heap[best]):
                        best = c
        if best < 0:
            e = self._pop()          # the minimum (best effort when everything is pinned)
        else:
            e = self.heap[best]
            self._delete(e.slot)
        self.L = e.pri
        return self._drop_slot(e.slot)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._delete(slot)
        self._drop_slot(slot)

    def order(self) -> list[tuple[int, float]]:
        """(id, priority) of the resident blocks from the next victim on (heap sorted; tests)."""
        cdef int64_t i
        items = [(self.heap[i].pri, self.heap[i].stamp, self.slot_ids[self.heap[i].slot])
                 for i in range(self.n_heap)]
        items.sort()
        return [(b, p) for p, _, b in items]


def make(capacity: int, params: dict) -> GDSF:
    return GDSF(capacity, bool(params.get("cost-aware", False)))
