# cython: language_level=3
"""The GDSF class and its heap entry, C-level, so that ``gdsf_compute`` subclasses it (the heap,
its pinned walk and the stamp renumbering) instead of copying it; see gdsf.pyx."""

from libc.stdint cimport int64_t, int32_t, uint32_t

from shadow.sim.core.policy cimport Policy, Access


cdef struct HeapEnt:
    double pri
    uint32_t stamp
    int32_t slot


cdef inline bint ent_less(const HeapEnt* a, const HeapEnt* b) noexcept nogil:
    return a.pri < b.pri or (a.pri == b.pri and a.stamp < b.stamp)


cdef class GDSF(Policy):
    cdef HeapEnt* heap_raw
    cdef HeapEnt* heap
    cdef int32_t* pos
    cdef int32_t* freq
    cdef int64_t n_heap
    cdef int64_t clock
    cdef int64_t stamp_limit
    cdef readonly int64_t n_renumber
    cdef readonly double L
    cdef readonly bint cost_aware

    cdef void _up(self, int64_t i, HeapEnt e) noexcept nogil
    cdef void _down(self, int64_t i, HeapEnt e) noexcept nogil
    cdef void _renumber(self) noexcept nogil
    cdef int64_t _min_unpinned(self) noexcept nogil

    # NOTE: inline here (not virtual): they run on every hit, insert and eviction; a subclass
    # (gdsf_compute) calls them with priorities of its own rather than overriding them.

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

    cdef inline uint32_t _next_stamp(self) noexcept nogil:
        if self.clock >= self.stamp_limit:
            self._renumber()
        self.clock += 1
        return <uint32_t>self.clock

    cdef inline double _weight(self, const Access* acc) noexcept nogil:
        if self.cost_aware:
            return <double>(acc.cost if acc.cost > 1 else 1)
        return 1.0e6

    cdef inline void _place(self, int64_t slot, double pri) noexcept nogil:
        """Give the resident ``slot`` the priority ``pri`` and a new stamp (an access)."""
        cdef int64_t i
        cdef HeapEnt e
        e.stamp = self._next_stamp()
        e.pri = pri
        e.slot = <int32_t>slot
        # NOTE: without cost-aware the key only grows (L never falls), so only _down moves it.
        self._down(self.pos[slot], e)
        i = self.pos[slot]
        self._up(i, self.heap[i])

    cdef inline int64_t _add(self, int64_t block_id, double pri) noexcept nogil:
        """Insert ``block_id`` with freq 1 and the priority ``pri``; return its slot."""
        cdef int64_t slot = self._take_slot(block_id)
        cdef HeapEnt e
        self.freq[slot] = 1
        e.stamp = self._next_stamp()
        e.pri = pri
        e.slot = <int32_t>slot
        self.n_heap += 1
        self._up(self.n_heap - 1, e)
        return slot
