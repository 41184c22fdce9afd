# cython: language_level=3
"""Allocation of :c:type:`DList` (see dlist.pxd)."""

from libc.stdlib cimport malloc, free

from shadow.sim.core.idtable cimport shadow_big_malloc


cdef int dl_init(DList* d, int64_t capacity) except -1:
    cdef int64_t i
    d.prev = <int32_t*>shadow_big_malloc(capacity * sizeof(int32_t))
    d.next = <int32_t*>shadow_big_malloc(capacity * sizeof(int32_t))
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


cdef int lr_init(LRing* L, int64_t capacity) except -1:
    cdef int64_t i, size = 2 * capacity + 16
    cdef int64_t huge = (2 << 20) // sizeof(uint32_t)      # entries in a 2 MiB page
    # NOTE: a ring in huge pages (see shadow_big_malloc) ends on a 2 MiB boundary: rounded down
    # while that leaves at least half the capacity spare (an untouched part of a huge page still
    # costs its memory), else up (the rest of the last page is spare entries).
    if size >= huge:
        if size // huge * huge >= capacity + capacity // 2 + 16:
            size = size // huge * huge
        else:
            size = (size + huge - 1) // huge * huge
    # NOTE: ring indices are uint32 and LR_NONE is taken; a capacity is below 2**31, so a
    # clamped ring still has more than ``capacity`` spare entries.
    if size > <int64_t>0xFFFFFFF0:
        size = <int64_t>0xFFFFFFF0
    L.r = <uint32_t*>shadow_big_malloc(size * sizeof(uint32_t))
    L.pos = <uint32_t*>shadow_big_malloc(capacity * sizeof(uint32_t))
    if L.r == NULL or L.pos == NULL:
        free(L.r)
        free(L.pos)
        L.r = NULL
        L.pos = NULL
        raise MemoryError(f"cannot allocate a ring of {capacity} slots")
    for i in range(capacity):
        L.pos[i] = LR_NONE
    L.t = 0
    L.w = 0
    L.size = size
    L.n = 0
    L.pf_data = 0
    L.pf_table = 0
    # NOTE: a small cache's state stays in the L2 (8k slots: ~300 KB), where the prefetches
    # only cost time; from 32k slots (~1.2 MB) on they pay.
    L.ahead = capacity >= LR_RING_MIN
    return 0


cdef void lr_free(LRing* L) noexcept nogil:
    free(L.r)
    free(L.pos)
    L.r = NULL
    L.pos = NULL


cdef void lr_compact(LRing* L) noexcept nogil:
    """Move the live entries, in order, to the start of the ring (``w`` = ``n`` after).

    NOTE: amortised O(1) per append: at most ``capacity`` entries are live, so a compacted ring
    has at least ``size - capacity`` (about ``capacity``) free entries again.
    """
    cdef int64_t i, k = 0, w = L.w
    cdef uint32_t* r = L.r
    cdef uint32_t* pos = L.pos
    cdef uint32_t s
    for i in range(L.t, w):
        if i + 16 < w:
            SHADOW_PREFETCH(&pos[r[i + 16]])
        s = r[i]
        if pos[s] == <uint32_t>i:
            r[k] = s
            pos[s] = <uint32_t>k
            k += 1
    L.t = 0
    L.w = k
    L.pf_data = 0
    L.pf_table = 0


cdef int64_t lr_unpinned_scan(LRing* L, const uint16_t* pins, int64_t first) noexcept nogil:
    """:func:`lr_unpinned_first` past a pinned oldest entry ``first``."""
    cdef int64_t i = first + 1, w = L.w
    cdef const uint32_t* r = L.r
    cdef const uint32_t* pos = L.pos
    cdef uint32_t s
    while i < w:
        s = r[i]
        if pos[s] == <uint32_t>i and pins[s] == 0:
            return i
        i += 1
    return first


cdef void lr_take_behind(LRing* L, int64_t i) noexcept nogil:
    """:func:`lr_take` of an entry behind the oldest live one (past pinned entries).

    NOTE: the pinned entries (and the stale ones among them) would be passed again by every
    later eviction, and the stale ones pile up there (a FIFO's hot old blocks are pinned by most
    requests).  The live ones are shifted up into the victim's entry and the stale ones dropped,
    so the next scan passes the pinned entries only, as a list walk does.
    """
    cdef int64_t j, k
    cdef uint32_t s
    L.pos[L.r[i]] = LR_NONE
    L.n -= 1
    k = i
    j = i - 1
    while j >= L.t:
        s = L.r[j]
        if L.pos[s] == <uint32_t>j:
            L.r[k] = s
            L.pos[s] = <uint32_t>k
            k -= 1
        j -= 1
    L.t = k + 1


cdef void lr_prefetch_ahead(LRing* L, const SlotIds* slot_ids, const uint16_t* pins,
                            const SlotMap* table) noexcept nogil:
    """Prefetch the next victims' data: slot data ``LR_AHEAD_DATA`` entries ahead of ``t``,
    then (once it has arrived) the table entry of the live ones ``LR_AHEAD_TABLE`` ahead."""
    cdef int64_t j, end, w = L.w
    cdef uint32_t s
    j = L.pf_data
    if j < L.t:
        j = L.t
    end = L.t + LR_AHEAD_DATA
    if end > w:
        end = w
    while j < end:
        s = L.r[j]
        SHADOW_PREFETCH(&L.pos[s])
        SHADOW_PREFETCH(sids_addr(slot_ids, s))
        SHADOW_PREFETCH(&pins[s])
        j += 1
    L.pf_data = j
    j = L.pf_table
    if j < L.t:
        j = L.t
    end = L.t + LR_AHEAD_TABLE
    if end > w:
        end = w
    while j < end:
        s = L.r[j]
        if L.pos[s] == <uint32_t>j:
            slotmap_prefetch(table, sids_get(slot_ids, s))
        j += 1
    L.pf_table = j


# NOTE: the production threshold is LR_RING_MIN; tests lower it (to 0: every order a ring) or
# raise it (every order a list) to run the exact differentials on both forms.
cdef int64_t _ring_min_slots = LR_RING_MIN


def set_ring_min_slots(n: int) -> int:
    """Set the capacity from which an :c:type:`SOrder` is a ring (tests); return the old one."""
    global _ring_min_slots
    old = _ring_min_slots
    _ring_min_slots = max(0, int(n))
    return old


cdef int so_init(SOrder* o, int64_t capacity) except -1:
    """A list below ``_ring_min_slots`` (LR_RING_MIN) slots, a ring from there on."""
    o.ring = capacity >= _ring_min_slots
    o.d.prev = NULL
    o.d.next = NULL
    o.q.r = NULL
    o.q.pos = NULL
    if o.ring:
        lr_init(&o.q, capacity)
    else:
        dl_init(&o.d, capacity)
    return 0


cdef void so_free(SOrder* o) noexcept nogil:
    if o.ring:
        lr_free(&o.q)
    else:
        dl_free(&o.d)


cdef list so_slots_oldest_first(SOrder* o):
    """The slots in the order, oldest (next victim) first."""
    cdef list out = []
    cdef int64_t i
    cdef int32_t s
    if o.ring:
        for i in range(o.q.t, o.q.w):
            if o.q.pos[o.q.r[i]] == <uint32_t>i:
                out.append(o.q.r[i])
    else:
        s = o.d.tail
        while s >= 0:
            out.append(s)
            s = o.d.prev[s]
    return out


cdef int64_t so_ring_take_victim(LRing* q, const SlotIds* slot_ids, const uint16_t* pins,
                                 const SlotMap* table) noexcept nogil:
    """:func:`so_take_victim` of a ring.

    NOTE: the same steps as LRU's and VLLM's inline ``fast_evict``; kept apart on purpose: one
    shared inline function for the three changed gcc's inlining of the serve loop (more
    instructions for vllm and lru: docs/performance.md, "Measured choices"), so it was not kept.
    """
    cdef int64_t i = lr_unpinned_first(q, pins), s
    if i < 0:
        return -1
    s = q.r[i]
    lr_take(q, i)
    lr_maybe_prefetch_ahead(q, slot_ids, pins, table)
    return s
