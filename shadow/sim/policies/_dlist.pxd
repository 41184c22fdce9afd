# cython: language_level=3
"""An intrusive doubly linked list over slot indices (int32 prev/next arrays), C-level.

Invariant: ``head`` is the most recently inserted end, ``tail`` the eviction end; -1 is null;
a slot not on the list has ``prev == next == -1`` and is neither head nor tail (unless it is the
only element).  8 bytes per slot.  Shared by lru, fifo, clock, sieve, vllm (and free to reuse).
"""

from libc.stdint cimport int32_t, int64_t, uint16_t

cdef struct DList:
    int32_t* prev     # towards the head
    int32_t* next     # towards the tail
    int32_t head
    int32_t tail
    int64_t n


cdef inline void dl_push_head(DList* d, int64_t s) noexcept nogil:
    d.prev[s] = -1
    d.next[s] = d.head
    if d.head >= 0:
        d.prev[d.head] = <int32_t>s
    else:
        d.tail = <int32_t>s
    d.head = <int32_t>s
    d.n += 1


cdef inline void dl_push_tail(DList* d, int64_t s) noexcept nogil:
    d.next[s] = -1
    d.prev[s] = d.tail
    if d.tail >= 0:
        d.next[d.tail] = <int32_t>s
    else:
        d.head = <int32_t>s
    d.tail = <int32_t>s
    d.n += 1


cdef inline void dl_unlink(DList* d, int64_t s) noexcept nogil:
    cdef int32_t p = d.prev[s], q = d.next[s]
    if p >= 0:
        d.next[p] = q
    else:
        d.head = q
    if q >= 0:
        d.prev[q] = p
    else:
        d.tail = p
    d.prev[s] = -1
    d.next[s] = -1
    d.n -= 1


cdef inline void dl_move_head(DList* d, int64_t s) noexcept nogil:
    if d.head != s:
        dl_unlink(d, s)
        dl_push_head(d, s)


cdef int dl_init(DList* d, int64_t capacity) except -1
cdef void dl_free(DList* d) noexcept nogil


cdef inline int32_t dl_unpinned_tail(const DList* d, const uint16_t* pins) noexcept nogil:
    """The slot nearest the tail whose pin count is 0; the tail itself if every slot is pinned.

    NOTE: pinned blocks belong to requests being served (an engine's reference counts keep them);
    when all are pinned the plain tail is the best-effort victim.  -1 only for an empty list.
    """
    cdef int32_t s = d.tail
    while s >= 0 and pins[s] > 0:
        s = d.prev[s]
    return s if s >= 0 else d.tail
