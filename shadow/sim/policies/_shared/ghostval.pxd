# cython: language_level=3
"""A bounded ghost FIFO whose ids each carry one int64 value (lecar: the eviction's vtime;
cacheus: the block's frequency), C-level, on :c:type:`~shadow.sim.policies._shared.ghost.GhostRing`.

``val[pos]`` is the value of the live id at ring position ``pos``.  Pushes go through
:c:func:`gv_push` only, which pops the oldest ids while ``limit`` are live and compacts a full
span itself, moving the values with their ids, before :c:func:`gr_push` (which then never
compacts or grows: after the pops fewer than ``limit < cap`` ids are live), so positions and
values stay paired.  Memory: the ring's 13 B per id + 8 B x 1.25 (the value array has ``cap``
entries) = about 23 B per id.

Invariant: for each live id at position ``pos``, ``val[pos]`` is the value it was pushed with.
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport calloc, free

from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove, gr_pop,
                                         gr_push, gr_compact, gr_at)


cdef struct GhostVals:
    GhostRing g
    int64_t* val        # per ring position (``g.cap`` entries)


cdef inline int gv_init(GhostVals* v, int64_t limit, int* nomem) except -1:
    """Room for ``limit`` ids (``limit`` < 1: the ghost stays empty)."""
    gr_init(&v.g, limit, nomem)
    v.val = <int64_t*>calloc(v.g.cap, sizeof(int64_t))
    if v.val == NULL:
        gr_free(&v.g)
        raise MemoryError(f"cannot allocate a ghost queue of {limit} ids")
    return 0


cdef inline void gv_free(GhostVals* v) noexcept nogil:
    gr_free(&v.g)
    free(v.val)
    v.val = NULL


cdef inline void _gv_compact(GhostVals* v) noexcept nogil:
    """gr_compact with the values moved along: the same walk, live entries slid to the tail."""
    cdef GhostRing* g = &v.g
    cdef int64_t r = g.tail, w = g.tail, k
    for k in range(g.span):
        if gr_at(g, r) != 0:
            v.val[w] = v.val[r]
            w = w + 1 if w + 1 < g.cap else 0
        r = r + 1 if r + 1 < g.cap else 0
    gr_compact(g)


cdef inline void gv_push(GhostVals* v, int64_t key, int64_t value) noexcept nogil:
    """Pop the oldest ids while ``limit`` are live, then add ``key`` (not live here) with
    ``value`` as the newest (nothing if ``limit`` < 1; out of memory: not added, ``nomem``)."""
    cdef GhostRing* g = &v.g
    cdef int64_t pos
    if g.limit < 1:
        return
    while g.n >= g.limit:
        gr_pop(g)
    if g.span == g.cap:
        _gv_compact(v)
    pos = g.head
    if gr_push(g, key) == 0:
        v.val[pos] = value


cdef inline bint gv_take(GhostVals* v, int64_t key, int64_t* value) noexcept nogil:
    """If ``key`` is live: write its value to ``value``, take it out, return True."""
    cdef int64_t pos = gr_find(&v.g, key)
    if pos < 0:
        return False
    value[0] = v.val[pos]
    gr_remove(&v.g, pos)
    return True
