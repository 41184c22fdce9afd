# cython: language_level=3
"""Allocation and compaction of :c:type:`GhostRing` (the inline operations live in ghost.pxd)."""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, malloc, free

# NOTE: ring entries per ghost and table entries per ghost, chosen by measurement (see
# docs/performance.md): 4 B x 1.25 + 4 B x 2 = 13 B per ghost entry (8 B x 1.25, 18 B, once the
# ring is 64-bit: gr_widen; 4 B x 8 in the table below LR_RING_MIN ids: _table_size).
cdef enum:
    RING_NUM = 5
    RING_DEN = 4
    TABLE_PER_GHOST = 2
    TABLE_PER_GHOST_SMALL = 8   # below LR_RING_MIN ids (see _table_size)


cdef inline uint64_t _table_size(int64_t limit) noexcept nogil:
    """Table entries for ``limit`` ids: load 1/2 from LR_RING_MIN ids on (the memory target),
    1/8 below, where the 24 B more per id do not matter.  NOTE: nearly every probe is for an
    absent id (a miss) and ends at the first empty entry, and a pop's backward shift at the next
    one: both shorten with the load, which pays for itself in small caches (loop only,
    docs/performance.md, "Measured choices"); 1/16 would be a 2 MB table at 32k ids for a small
    gain: not taken."""
    if limit <= 4:
        return 16
    if limit < LR_RING_MIN:
        return <uint64_t>(TABLE_PER_GHOST_SMALL * limit)
    return <uint64_t>(TABLE_PER_GHOST * limit)


cdef int gr_init(GhostRing* g, int64_t limit, int* nomem, int64_t ring_cap=0) except -1:
    """Room for ``limit`` live ids; ``ring_cap`` ring entries if larger than the default
    1.25 x ``limit`` (fewer compactions where tombstones pile up: ARC).  ``nomem``: the owner's
    out-of-memory flag (a policy's ``nomem``), set by a widening or growth that fails."""
    cdef int64_t cap
    cdef uint64_t size
    cdef uint32_t sbits = 1
    if limit < 0:
        limit = 0
    cap = limit * RING_NUM // RING_DEN + 2
    if ring_cap > cap:
        cap = ring_cap
    size = _table_size(limit)
    while (<int64_t>1 << sbits) <= cap:
        sbits += 1
    if sbits > 30 or size > 0xFFFFFFFFULL:
        raise MemoryError(f"a ghost queue of {limit} ids is too large")
    g.nomem = nomem
    g.limit = limit
    g.cap = cap
    g.size = size
    g.sbits = sbits
    g.smask = <uint32_t>((1 << sbits) - 1)
    g.head = g.tail = g.span = g.n = 0
    g.ids32 = <int32_t*>calloc(cap, sizeof(int32_t))
    g.ids64 = NULL
    g.e = <uint32_t*>calloc(size, sizeof(uint32_t))
    if g.ids32 == NULL or g.e == NULL:
        gr_free(g)
        raise MemoryError(f"cannot allocate a ghost queue of {limit} ids")
    return 0


cdef void gr_free(GhostRing* g) noexcept nogil:
    free(g.ids32)
    free(g.ids64)
    free(g.e)
    g.ids32 = NULL
    g.ids64 = NULL
    g.e = NULL


cdef int gr_widen(GhostRing* g) noexcept nogil:
    """Move the ring to 64-bit entries for good (called once, at the first push of a value past
    32 bits): same ``cap``, every entry at its position, so the table is unchanged.  -1 if out of
    memory: the ring is unchanged and ``nomem`` set (the caller does not push; the owner's cache
    fails, so no result rests on the id it lost)."""
    cdef int64_t k
    cdef int64_t* ids64
    if g.ids64 != NULL:
        return 0
    ids64 = <int64_t*>malloc(g.cap * sizeof(int64_t))
    if ids64 == NULL:
        g.nomem[0] = 1
        return -1
    for k in range(g.cap):
        ids64[k] = g.ids32[k]
    free(g.ids32)
    g.ids32 = NULL
    g.ids64 = ids64
    return 0


cdef void gr_compact(GhostRing* g, int64_t* off_a=NULL, int64_t* off_b=NULL) noexcept nogil:
    """Slide the live ids of the span towards the tail, in order, and repoint their table entries.
    ``off_a``/``off_b`` (offsets from the tail, ARC's scan positions) are mapped to the same
    places among the live ids.

    NOTE: an entry's home and fingerprint depend on its key only, so only its position field
    changes; nothing is deleted, so no key is read from a moved-from position.
    """
    cdef int64_t r = g.tail, w = g.tail, k, key
    cdef uint64_t h, i
    cdef uint32_t old, fpbits
    cdef int64_t na = off_a[0] if off_a != NULL else -1, nb = off_b[0] if off_b != NULL else -1
    cdef int64_t live = 0
    for k in range(g.span):
        if k == na:
            off_a[0] = live
        if k == nb:
            off_b[0] = live
        key = gr_at(g, r)
        if key != 0:
            if w != r:
                h = gr_hash(gr_key(key))
                fpbits = gr_fp(g, h) << g.sbits
                old = fpbits | <uint32_t>(r + 1)
                i = gr_home(g, h)
                while g.e[i] != old:
                    i += 1
                    if i == g.size:
                        i = 0
                g.e[i] = fpbits | <uint32_t>(w + 1)
                gr_set(g, w, key)
                gr_set(g, r, 0)
            live += 1
            w += 1
            if w == g.cap:
                w = 0
        r += 1
        if r == g.cap:
            r = 0
    if na >= g.span:
        off_a[0] = live
    if nb >= g.span:
        off_b[0] = live
    g.head = w
    g.span = g.n


cdef list gr_ids(const GhostRing* g):
    """Live ids, newest first (tests)."""
    cdef list out = []
    cdef int64_t pos = g.head, k
    for k in range(g.span):
        pos = pos - 1 if pos > 0 else g.cap - 1
        if gr_at(g, pos) != 0:
            out.append(gr_at(g, pos))
    return out


cdef int gr_grow(GhostRing* g) noexcept nogil:
    """Move the live ids, in order, to a ring (of the same width) and table half as large again
    (positions from 0) and rebuild the table.  -1 if out of memory: the ring is unchanged (still
    full) and ``nomem`` set, as in :func:`gr_widen`."""
    cdef int64_t limit = g.limit + g.limit // 2 + 16, cap, k, r = g.tail, w = 0, key
    cdef uint64_t size, h, i
    cdef uint32_t sbits = 1
    cdef GhostRing old = g[0]      # NOTE: the old ring is read through this copy
    cdef void* ring
    cap = limit * RING_NUM // RING_DEN + 2
    size = _table_size(limit)
    while (<int64_t>1 << sbits) <= cap:
        sbits += 1
    if old.ids64 != NULL:
        g.ids64 = <int64_t*>calloc(cap, sizeof(int64_t))
        ring = g.ids64
    else:
        g.ids32 = <int32_t*>calloc(cap, sizeof(int32_t))
        ring = g.ids32
    cdef uint32_t* e = NULL
    if ring != NULL and sbits <= 30 and size <= 0xFFFFFFFFULL:
        e = <uint32_t*>calloc(size, sizeof(uint32_t))
    if e == NULL:
        free(ring)
        g[0] = old
        g.nomem[0] = 1
        return -1
    for k in range(old.span):
        key = gr_at(&old, r)
        if key != 0:
            gr_set(g, w, key)
            w += 1
        r += 1
        if r == old.cap:
            r = 0
    free(old.ids32)
    free(old.ids64)
    free(old.e)
    g.e = e
    g.cap = cap
    g.limit = limit
    g.size = size
    g.sbits = sbits
    g.smask = <uint32_t>((1 << sbits) - 1)
    g.tail = 0
    g.head = w
    g.span = w
    for k in range(w):
        h = gr_hash(gr_key(gr_at(g, k)))
        i = gr_home(g, h)
        while e[i] != 0:
            i += 1
            if i == size:
                i = 0
        e[i] = (gr_fp(g, h) << sbits) | <uint32_t>(k + 1)
    return 0


cdef class GhostFIFO:
    """A Python handle on one :c:type:`GhostRing` (tests and checks; policies embed the struct)."""

    cdef GhostRing g
    cdef readonly int nomem

    def __cinit__(self, int64_t limit):
        self.nomem = 0
        gr_init(&self.g, limit, &self.nomem)

    def __dealloc__(self):
        gr_free(&self.g)

    def add(self, int64_t key) -> None:
        """Push ``key`` (>= 1, not present), popping the oldest ids while ``limit`` are live."""
        if key < 1 or gr_find(&self.g, key) >= 0:
            raise ValueError(f"ghost id must be >= 1 and absent, got {key}")
        gr_push_bounded(&self.g, key)

    def push(self, int64_t key, bint second=False) -> None:
        """Push ``key`` (>= 1, not present) with no bound: a full ring grows (ARC's way);
        ``second``: stored negated, as ARC stores its B2 ids (:meth:`ids` shows it negated)."""
        if key < 1 or gr_find(&self.g, key) >= 0:
            raise ValueError(f"ghost id must be >= 1 and absent, got {key}")
        if gr_push(&self.g, -key if second else key) < 0:
            raise MemoryError(f"ghost ring of {self.g.cap} entries: no memory to grow or widen")

    def discard(self, int64_t key) -> bool:
        """Take ``key`` out if present (a ghost hit)."""
        cdef int64_t pos = gr_find(&self.g, key) if key >= 1 else -1
        if pos < 0:
            return False
        gr_remove(&self.g, pos)
        return True

    def pop(self) -> int:
        return gr_pop(&self.g)

    def __contains__(self, int64_t key) -> bool:
        return key >= 1 and gr_find(&self.g, key) >= 0

    def __len__(self) -> int:
        return self.g.n

    def ids(self) -> list[int]:
        """Live ids, newest first."""
        return gr_ids(&self.g)

    def check(self) -> None:
        """Assert the invariant: one table entry per live id, at its position; span accounting."""
        cdef int64_t live = 0, pos = self.g.tail, k, v
        cdef uint64_t i
        cdef int64_t n_entries = 0
        assert (self.g.ids32 == NULL) != (self.g.ids64 == NULL)
        for k in range(self.g.span):
            v = gr_at(&self.g, pos)
            if v != 0:
                live += 1
                assert gr_find(&self.g, gr_key(v)) == pos, (v, pos)
            pos = pos + 1 if pos + 1 < self.g.cap else 0
        assert pos == self.g.head, (pos, self.g.head)
        assert live == self.g.n, (live, self.g.n)
        for i in range(self.g.size):
            if self.g.e[i] != 0:
                n_entries += 1
        assert n_entries == self.g.n, (n_entries, self.g.n)
        for k in range(self.g.cap - self.g.span):
            assert gr_at(&self.g, pos) == 0, pos
            pos = pos + 1 if pos + 1 < self.g.cap else 0

    @property
    def capacity(self) -> tuple[int, int]:
        """(ring entries, table entries)."""
        return (self.g.cap, self.g.size)

    @property
    def id_bits(self) -> int:
        """32 or 64: the width of the ring's entries."""
        return 64 if self.g.ids64 != NULL else 32


# ---- SlotFIFO ----------------------------------------------------------------------------------

cdef int sf_init(SlotFIFO* f, int64_t hint, int32_t* pos, int* nomem, int32_t pxor=0) except -1:
    """An empty FIFO with room for about ``hint`` slots (it grows past them when needed);
    ``pos`` (the caller's, every entry -1) is shared with the policy's other FIFOs, which store
    ``position ^ pxor`` there (see the struct's NOTE); ``nomem``: the owner's out-of-memory flag."""
    if hint < 0:
        hint = 0
    f.cap = hint + hint // 4 + 16
    f.head = f.tail = f.span = f.n = 0
    f.pos = pos
    f.pxor = pxor
    f.nomem = nomem
    f.q = <int32_t*>malloc(f.cap * sizeof(int32_t))
    if f.q == NULL:
        raise MemoryError(f"cannot allocate a FIFO of {hint} slots")
    return 0


cdef void sf_free(SlotFIFO* f) noexcept nogil:
    free(f.q)
    f.q = NULL


cdef int sf_make_room(SlotFIFO* f) noexcept nogil:
    """Called on a full span: slide the live slots to the front of a ring (a new, larger one
    when more than 3/4 of it is live), in order, and repoint ``pos``.  Out of memory for the
    larger ring: compacted in place if that frees an entry; else -1 with the ring unchanged and
    ``nomem`` set (:func:`sf_push` then keeps the slot off the ring)."""
    cdef int64_t cap = f.cap, r = f.tail, w = 0, k
    cdef int32_t* q = f.q
    cdef int32_t* old = f.q
    cdef int32_t s
    # NOTE: no growth once ``nomem`` is set: a slot kept off the ring records the old ``cap``.
    if f.n * 4 > f.cap * 3 and not f.nomem[0]:
        cap = f.cap + f.cap // 2 + 16
        q = <int32_t*>malloc(cap * sizeof(int32_t))
        if q == NULL:
            cap = f.cap         # NOTE: exact still, if compacting in place frees an entry
            q = old
    if f.n == f.cap and q == old:
        f.nomem[0] = 1
        return -1
    if q == old:
        # NOTE: in place: w never passes r, so no live slot is overwritten before it is read;
        # w counts from the tail and wraps like r.
        w = f.tail
    for k in range(f.span):
        s = old[r]
        if s >= 0:
            q[w] = s
            f.pos[s] = <int32_t>w ^ f.pxor
            w += 1
            if w == cap:
                w = 0
        r += 1
        if r == f.cap:
            r = 0
    if q != old:
        free(old)
        f.q = q
        f.cap = cap
        f.tail = 0
    f.head = w if w < cap else 0
    f.span = f.n
    return 0


cdef list sf_slots(const SlotFIFO* f):
    """Slots newest first (tests and views)."""
    cdef list out = []
    cdef int64_t p = f.head, k
    for k in range(f.span):
        p = p - 1 if p > 0 else f.cap - 1
        if f.q[p] >= 0:
            out.append(f.q[p])
    return out
