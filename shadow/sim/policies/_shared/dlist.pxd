# cython: language_level=3
"""An intrusive doubly linked list over slot indices (int32 prev/next arrays), C-level.

Invariant: ``head`` is the most recently inserted end, ``tail`` the eviction end; -1 is null;
a slot not on the list has ``prev == next == -1`` and is neither head nor tail (unless it is the
only element).  8 bytes per slot.  Shared by lru, fifo, clock, sieve, vllm (and free to reuse).
"""

from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t

from shadow.sim.core.idtable cimport (SlotMap, SlotIds, sids_get, sids_addr, slotmap_prefetch,
                                 SHADOW_PREFETCH)

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


cdef inline int32_t chain_prefetch_walk(const int32_t* link, int32_t s, const SlotIds* ids,
                                        const uint16_t* pins) noexcept nogil:
    """One step of a prefetch pipeline along a chain of slots (``link[s]`` the one after ``s``,
    -1 at the end), for a policy that evicts the chain's first slot ``s``: return the slot two
    after ``s`` (-1 if the chain is shorter), whose id was prefetched by the previous step, so
    the caller can start loading its table entries now (two evictions ahead); and prefetch the
    id, link and pin count of the slot three after ``s`` for the next step.

    NOTE: called once per eviction, every link read here was prefetched by the step before (as
    the next slot out then), so the walk is not a wait on memory; a chain changed in between
    only wastes prefetches (hints never change the state).  For caches too large for the L2
    (``LR_RING_MIN`` slots and more): below, the walk only costs instructions.
    """
    cdef int32_t p, q, r
    if s < 0:
        return -1
    p = link[s]
    if p < 0:
        return -1
    q = link[p]
    if q < 0:
        return -1
    r = link[q]
    if r >= 0:
        SHADOW_PREFETCH(sids_addr(ids, r))
        SHADOW_PREFETCH(&link[r])
        SHADOW_PREFETCH(&pins[r])
    return q


cdef inline int32_t dl_prefetch_walk(const DList* d, const SlotIds* ids,
                                     const uint16_t* pins) noexcept nogil:
    """:c:func:`chain_prefetch_walk` from ``d``'s tail towards its head (its victims' order)."""
    return chain_prefetch_walk(d.prev, d.tail, ids, pins)


cdef inline void chain_prefetch_victims(const int32_t* link, int32_t s, const SlotMap* table,
                                        const SlotIds* ids, const uint16_t* pins) noexcept nogil:
    """For a policy whose next victims are ``s`` and the slots after it along ``link``: start
    loading the resident-table entries (the delete) of ``s`` and, through
    :c:func:`chain_prefetch_walk`, of the slot two after it.  Nothing if ``s`` < 0."""
    cdef int32_t q
    if s < 0:
        return
    slotmap_prefetch(table, sids_get(ids, s))
    q = chain_prefetch_walk(link, s, ids, pins)
    if q >= 0:
        slotmap_prefetch(table, sids_get(ids, q))


# ---- LRing: an order of slots kept as an append-only ring with lazy deletion ----
#
# NOTE: why: at production cache sizes (128k+ slots) a list's state no longer sits in L2, and
# every list operation is a dependent random read (a hit reads and writes both neighbours; the
# next victim is ``prev[victim]``).  The ring appends at ``w`` (a hit re-appends: the block's old
# entry goes stale) and takes victims from ``t`` upwards in order, so the next victims are known
# many steps ahead and their slot data can be prefetched (:func:`lr_prefetch_ahead`).

cdef enum:
    LR_NONE = 0xFFFFFFFF      # ``pos`` of a slot that is not on the ring
    LR_AHEAD_DATA = 32        # entries ahead of ``t`` whose slot data is prefetched
    LR_AHEAD_TABLE = 12       # entries ahead of ``t`` whose table entry is prefetched


cdef struct LRing:
    uint32_t* r       # slot numbers in order of their last append, oldest first
    uint32_t* pos     # slot -> index of its live entry in ``r``; LR_NONE when not on the ring
    int64_t t         # every entry below ``t`` is stale
    int64_t w         # next entry to append
    int64_t size      # entries in ``r`` (about 2 * capacity)
    int64_t n         # live entries (slots on the ring)
    int64_t pf_data   # entries below this had their slot data prefetched
    int64_t pf_table  # entries below this had their table entry prefetched
    bint ahead        # prefetch the next victims (a cache too large for the L2; see lr_init)


# Invariant: entry ``i`` (``t <= i < w``) is live iff ``pos[r[i]] == i``; each slot on the ring has
# exactly one live entry; live entries in index order are the order oldest -> newest.  Memory:
# 4 B (``pos``) + about 8 B (``r``) per slot.

cdef int lr_init(LRing* L, int64_t capacity) except -1
cdef void lr_free(LRing* L) noexcept nogil
cdef void lr_compact(LRing* L) noexcept nogil


cdef inline void lr_append(LRing* L, int64_t s) noexcept nogil:
    """Put slot ``s`` at the newest end (its old entry, if any, goes stale)."""
    cdef int64_t w = L.w
    if w == L.size:
        lr_compact(L)
        w = L.w
    L.r[w] = <uint32_t>s
    L.pos[s] = <uint32_t>w
    L.w = w + 1


cdef inline void lr_push(LRing* L, int64_t s) noexcept nogil:
    """Add slot ``s`` (not on the ring) at the newest end."""
    lr_append(L, s)
    L.n += 1


cdef inline void lr_touch(LRing* L, int64_t s) noexcept nogil:
    """Move slot ``s`` (on the ring) to the newest end."""
    # NOTE: already the newest: nothing to do (and no stale entry to make).
    if L.pos[s] != <uint32_t>(L.w - 1):
        lr_append(L, s)


cdef inline void lr_drop(LRing* L, int64_t s) noexcept nogil:
    """Take slot ``s`` off the ring (its entry goes stale)."""
    L.pos[s] = LR_NONE
    L.n -= 1


cdef inline int64_t lr_first(LRing* L) noexcept nogil:
    """Index of the oldest live entry (stale entries below it are passed for good); -1 if none."""
    cdef int64_t i = L.t, w = L.w
    cdef const uint32_t* r = L.r
    cdef const uint32_t* pos = L.pos
    while i < w and pos[r[i]] != <uint32_t>i:
        i += 1
    L.t = i
    return i if i < w else -1


cdef int64_t lr_unpinned_scan(LRing* L, const uint16_t* pins, int64_t first) noexcept nogil
cdef void lr_take_behind(LRing* L, int64_t i) noexcept nogil


cdef inline int64_t lr_unpinned_first(LRing* L, const uint16_t* pins) noexcept nogil:
    """Index of the oldest live entry whose slot has no pin; the oldest live one if every slot is
    pinned; -1 for an empty ring (the ring form of :func:`dl_unpinned_tail`)."""
    cdef int64_t first = lr_first(L)
    if first < 0 or pins[L.r[first]] == 0:
        return first
    # NOTE: the walk past pinned entries is rare and out of line: these inline helpers are
    # compiled into every specialisation of the serve loop, and a larger loop body stopped the
    # compiler from inlining other policies' evictions.
    return lr_unpinned_scan(L, pins, first)


cdef inline void lr_take(LRing* L, int64_t i) noexcept nogil:
    """Take the live entry ``i`` (found by :func:`lr_unpinned_first`) off the ring."""
    if i == L.t:
        L.pos[L.r[i]] = LR_NONE
        L.n -= 1
        L.t = i + 1
    else:
        lr_take_behind(L, i)


# NOTE: out of line for the same reason as lr_unpinned_scan (a call per eviction is cheap
# next to the cache misses it saves at large sizes).
cdef void lr_prefetch_ahead(LRing* L, const SlotIds* slot_ids, const uint16_t* pins,
                            const SlotMap* table) noexcept nogil


cdef inline void lr_maybe_prefetch_ahead(LRing* L, const SlotIds* slot_ids, const uint16_t* pins,
                                         const SlotMap* table) noexcept nogil:
    """:func:`lr_prefetch_ahead` for a large ring (``ahead``); nothing for a small one."""
    if L.ahead:
        lr_prefetch_ahead(L, slot_ids, pins, table)


# ---- SOrder: a slot order kept as a list below LR_RING_MIN slots and as a ring from there on ----
#
# NOTE: why both (fifo): the ring pays for its extra work (a compaction per about ``capacity``
# inserts, pinned entries shifted up behind a victim, stale entries passed) only with its
# prefetches, and those only pay once a cache's state leaves the L2 (``LRing.ahead``): at 8k
# slots fifo runs fewer instructions on a list.  lru (a hit appends, so its ring is half stale)
# and vllm got slower on an SOrder (the larger serve loop, with both forms inlined, compiled
# worse), so they keep the ring at every size (docs/performance.md, "Measured choices").  The
# form is chosen once per cache (``ring``); every operation tests it, a branch that always goes
# the same way.  Both give the same order, so the same victims.

cdef enum:
    LR_RING_MIN = 32768       # slots from which an SOrder is a ring (and prefetches ahead)


cdef struct SOrder:
    bint ring         # which of the two below holds the order (the other is not allocated)
    DList d           # the list: head = newest, tail = oldest (next victim)
    LRing q           # the ring: oldest live entry = next victim


# Invariant: exactly one of ``d`` and ``q`` is in use; the slots on it are the slots in the
# order, oldest first from ``d.tail`` (list) or from ``q.t`` (ring).  Memory: 8 B per slot as a
# list, about 12 B as a ring (see LRing).

cdef int so_init(SOrder* o, int64_t capacity) except -1
cdef void so_free(SOrder* o) noexcept nogil
cdef list so_slots_oldest_first(SOrder* o)
cdef int64_t so_ring_take_victim(LRing* q, const SlotIds* slot_ids, const uint16_t* pins,
                                 const SlotMap* table) noexcept nogil


cdef inline void so_push(SOrder* o, int64_t s) noexcept nogil:
    """Add slot ``s`` (not in the order) at the newest end."""
    if o.ring:
        lr_push(&o.q, s)
    else:
        dl_push_head(&o.d, s)


cdef inline void so_drop(SOrder* o, int64_t s) noexcept nogil:
    """Take slot ``s`` (in the order) out of it."""
    if o.ring:
        lr_drop(&o.q, s)
    else:
        dl_unlink(&o.d, s)


cdef inline int64_t so_take_victim(SOrder* o, const SlotIds* slot_ids, const uint16_t* pins,
                                   const SlotMap* table) noexcept nogil:
    """Take the oldest slot whose pin count is 0 out of the order and return it; the oldest if
    every slot is pinned; -1 if the order is empty.

    NOTE: pinned blocks belong to requests being served; skipping them is what a real engine's
    reference counts do.  A ring also prefetches the next victims' data (``slot_ids``, ``pins``,
    ``table``: see :func:`lr_prefetch_ahead`) while the loop does other work.
    """
    cdef int64_t s
    if o.ring:
        # NOTE: out of line: with both forms inlined, the serve loop grew past the point where
        # gcc still inlined sieve's eviction into it; a call per eviction is cheap next to the
        # cache misses of a cache large enough for the ring.
        return so_ring_take_victim(&o.q, slot_ids, pins, table)
    s = dl_unpinned_tail(&o.d, pins)
    if s >= 0:
        dl_unlink(&o.d, s)
    return s
