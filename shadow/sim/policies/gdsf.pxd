# cython: language_level=3
"""The GDSF class and its heap entry, C-level, so that ``gdsf_compute`` subclasses it (the heap,
its pinned walk and the stamp renumbering) instead of copying it; see gdsf.pyx."""

from libc.stdint cimport int64_t, int32_t, uint32_t

from shadow.sim.policy cimport Policy, Access


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
    cdef HeapEnt _pop(self) noexcept nogil
    cdef void _delete(self, int64_t slot) noexcept nogil
    cdef void _renumber(self) noexcept nogil
    cdef uint32_t _next_stamp(self) noexcept nogil
    cdef double _weight(self, const Access* acc) noexcept nogil
    cdef void _place(self, int64_t slot, double pri) noexcept nogil
    cdef int64_t _min_unpinned(self) noexcept nogil
