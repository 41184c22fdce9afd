# cython: language_level=3
"""Ghost FIFOs of block ids (shared by s3fifo, twoq and arc), and the S3FIFO class.

A :c:type:`GhostPool` holds ghost entries for one policy: a node pool (id int64, prev/next int32:
16 B per node) and an :c:type:`IdMap` id -> node.  A :c:type:`GhostQ` is one FIFO over the pool
(head = newest, tail = oldest); a policy with two ghost lists (ARC's B1/B2) shares one pool and
tags nodes with ``which``.

Invariant: ``map`` holds exactly the ids of the nodes on some GhostQ; a free node is on the free
list (``next`` chain from ``free_head``); ``n_used <= cap`` and the map's load stays <= map_pct/200
(1/2 for s3fifo and twoq, whose ghost probes are mostly misses; 3/8 more for ARC's larger pool).
Ghost entries are never resident: the base table knows nothing of them.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.idtable cimport IdMap, idmap_get, idmap_put, idmap_del
from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies._dlist cimport DList


cdef struct GhostPool:
    IdMap map
    int64_t* ids
    int32_t* prev      # towards the head (newer)
    int32_t* next      # towards the tail (older); free-list link for free nodes
    uint8_t* which     # which GhostQ a node is on (ARC: 1 = B1, 2 = B2)
    int32_t free_head
    int64_t cap
    int64_t n_used
    int64_t map_pct    # the map is sized for map_pct% of cap ids (its load <= map_pct/200 full)


cdef struct GhostQ:
    int32_t head
    int32_t tail
    int64_t n


cdef int gp_init(GhostPool* g, int64_t cap, int64_t map_pct=*) except -1
cdef void gp_free(GhostPool* g) noexcept nogil
cdef int gp_grow(GhostPool* g) noexcept nogil


cdef inline int32_t gp_find(const GhostPool* g, int64_t block_id) noexcept nogil:
    """Node of ``block_id`` or -1."""
    if g.n_used == 0:
        return -1
    return idmap_get(&g.map, block_id)


cdef inline void gq_unlink(GhostPool* g, GhostQ* q, int32_t node) noexcept nogil:
    """Take ``node`` off ``q`` and return it to the free list (its id leaves the map)."""
    cdef int32_t p = g.prev[node], x = g.next[node]
    if p >= 0:
        g.next[p] = x
    else:
        q.head = x
    if x >= 0:
        g.prev[x] = p
    else:
        q.tail = p
    q.n -= 1
    idmap_del(&g.map, g.ids[node])
    g.ids[node] = 0
    g.which[node] = 0
    g.prev[node] = -1
    g.next[node] = g.free_head
    g.free_head = node
    g.n_used -= 1


cdef inline int64_t gq_pop_tail(GhostPool* g, GhostQ* q) noexcept nogil:
    """Drop the oldest ghost of ``q``; return its id (0 if ``q`` is empty)."""
    cdef int32_t node = q.tail
    cdef int64_t block_id
    if node < 0:
        return 0
    block_id = g.ids[node]
    gq_unlink(g, q, node)
    return block_id


cdef inline int gq_push_head(GhostPool* g, GhostQ* q, int64_t block_id, uint8_t which) noexcept nogil:
    """Add ``block_id`` (not a ghost yet) as the newest ghost of ``q``; -1 if out of memory."""
    cdef int32_t node
    if g.free_head < 0:
        if gp_grow(g) < 0:
            return -1
    node = g.free_head
    g.free_head = g.next[node]
    g.ids[node] = block_id
    g.which[node] = which
    g.prev[node] = -1
    g.next[node] = q.head
    if q.head >= 0:
        g.prev[q.head] = node
    else:
        q.tail = node
    q.head = node
    q.n += 1
    g.n_used += 1
    idmap_put(&g.map, block_id, node)
    return 0


cdef inline int32_t dl_first_unpinned(const DList* d, const int32_t* pins) noexcept nogil:
    """The slot nearest ``d``'s tail with no pin, or -1."""
    cdef int32_t s = d.tail
    while s >= 0 and pins[s] > 0:
        s = d.prev[s]
    return s


cdef class S3FIFO(Policy):
    cdef DList small
    cdef DList main
    cdef uint8_t* freq
    cdef uint8_t* in_main
    cdef GhostPool gpool
    cdef GhostQ ghost
    cdef readonly int64_t small_size, main_size, ghost_size, threshold
    cdef readonly bint has_evicted

    cdef int64_t _evict_small(self) noexcept nogil
    cdef int64_t _evict_main(self) noexcept nogil
    cdef void _ghost_add(self, int64_t block_id) noexcept nogil
