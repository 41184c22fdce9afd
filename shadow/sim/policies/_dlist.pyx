# cython: language_level=3
"""Allocation of :c:type:`DList` (see _dlist.pxd)."""

from libc.stdlib cimport malloc, free


cdef int dl_init(DList* d, int64_t capacity) except -1:
    cdef int64_t i
    d.prev = <int32_t*>malloc(capacity * sizeof(int32_t))
    d.next = <int32_t*>malloc(capacity * sizeof(int32_t))
    if d.prev == NULL or d.next == NULL:
        free(d.prev)
        free(d.next)
        raise MemoryError(f"cannot allocate a list of {capacity} slots")
    for i in range(capacity):
        d.prev[i] = -1
        d.next[i] = -1
    d.head = -1
    d.tail = -1
    d.n = 0
    return 0


cdef void dl_free(DList* d) noexcept nogil:
    free(d.prev)
    free(d.next)
    d.prev = NULL
    d.next = NULL
