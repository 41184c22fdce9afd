# cython: language_level=3
"""Rings with tombstones, C-level: a ghost FIFO of block ids with its id -> position table
(:c:type:`GhostRing`), and a FIFO of resident slots (:c:type:`SlotFIFO`).

A :c:type:`GhostRing` holds up to ``limit`` ids (the caller pops before pushing past it), oldest
at ``tail``, newest just before ``head``:

* the ring: ``cap`` entries (``cap`` about 1.25 x ``limit``), read with :c:func:`gr_at`; entry 0
  is a free entry or a *tombstone* (an id taken out of the middle by a ghost hit: ids are >= 1).
  It is ``ids32`` (int32 entries) while every value pushed so far fits (``|v| <= INT32_MAX``,
  ARC's negated ids included), and ``ids64`` for good from the first push of a larger one
  (:c:func:`gr_widen`: same ``cap``, every entry copied in place, so the table stays valid); the
  other pointer is NULL;
* the live span ``tail, tail+1, .., head-1`` (mod ``cap``) has ``span`` entries, ``n`` of them
  live; a push at a full span first compacts it (the live ids slide towards the tail, in order);
* ``e``: ``size`` 4-byte entries, open addressing with linear probing and backward-shift
  deletion: 0 empty, else ``(fingerprint << sbits) | (position + 1)``; home = the id's hash's
  top 32 bits scaled to ``size`` (Lemire); the key is verified against the ring.  ``size`` is
  2 x ``limit`` (load 1/2: the memory target) from LR_RING_MIN ids on and 8 x ``limit`` below
  (load 1/8: shorter probes and shifts where memory does not matter; ``_table_size``).

Invariant: ``e`` holds exactly one entry for each live id, pointing at its ring position; a
probe meets no empty entry between an id's home and its entry; ``n <= limit < cap``.

NOTE: why a ring and not linked nodes: a pop is a sequential read (the next pops' table entries
are prefetched from the ring ahead of the tail, no pointer chase), and an entry costs 4 B in the
ring x 1.25 + 4 B / load in the table (about 13 B at load 1/2; 18 B once an id needed 64 bits)
instead of a 17 B node + 16 B of map.  Block ids are dense from 1 in first-appearance order (the
trace format), so the 32-bit ring is the one that runs in practice; the 64-bit one keeps the
results exact for any id the format allows.  Tombstones cost ring room only until the tail
passes them; compaction is needed only when more than ``cap - limit`` of them are in the span at
once (ghost hits on over 1/5 of the ids).
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, INT32_MAX

from shadow.sim.core.idtable cimport SHADOW_PREFETCH, BS_EMPTY, bs_close
from shadow.sim.policies._shared.dlist cimport LR_RING_MIN


cdef struct GhostRing:
    int32_t* ids32      # the ring while every value pushed fits 32 bits; NULL once widened
    int64_t* ids64      # NULL until a value past 32 bits is pushed; then the only ring
    uint32_t* e         # the position table
    int64_t cap         # ring entries
    int64_t limit       # most live ids (the policy's ghost size)
    int64_t head        # next push position
    int64_t tail        # oldest position of the span
    int64_t span        # entries from tail to head (live + tombstones)
    int64_t n           # live ids
    uint64_t size       # table entries
    uint32_t sbits      # bits of ``position + 1``
    uint32_t smask
    int* nomem          # the owner's flag, set when a widening or growth finds no memory


cdef int gr_init(GhostRing* g, int64_t limit, int* nomem, int64_t ring_cap=*) except -1
cdef void gr_free(GhostRing* g) noexcept nogil
cdef void gr_compact(GhostRing* g, int64_t* off_a=*, int64_t* off_b=*) noexcept nogil
cdef int gr_grow(GhostRing* g) noexcept nogil
cdef int gr_widen(GhostRing* g) noexcept nogil
cdef list gr_ids(const GhostRing* g)


cdef inline uint64_t gr_hash(int64_t key) noexcept nogil:
    return (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL


cdef inline int64_t gr_key(int64_t v) noexcept nogil:
    """The id of a ring entry: a policy with two ghost lists in one ring (ARC) stores the
    second list's ids negated."""
    return v if v >= 0 else -v


cdef inline int64_t gr_at(const GhostRing* g, int64_t pos) noexcept nogil:
    """The ring entry at ``pos`` (an id, negated for ARC's second list, or 0)."""
    if g.ids64 != NULL:
        return g.ids64[pos]
    return g.ids32[pos]


cdef inline void gr_set(GhostRing* g, int64_t pos, int64_t v) noexcept nogil:
    """Store ``v`` at ``pos``: 0, or a value already pushed (it fits the ring's width)."""
    if g.ids64 != NULL:
        g.ids64[pos] = v
    else:
        g.ids32[pos] = <int32_t>v


cdef inline uint64_t gr_home(const GhostRing* g, uint64_t h) noexcept nogil:
    return ((h >> 32) * g.size) >> 32


cdef inline uint32_t gr_fp(const GhostRing* g, uint64_t h) noexcept nogil:
    return (<uint32_t>h) >> g.sbits


cdef inline void gr_prefetch(const GhostRing* g, int64_t key) noexcept nogil:
    """Prefetch ``key``'s home entry in the table (a find, push or pop of it comes soon)."""
    SHADOW_PREFETCH(&g.e[gr_home(g, gr_hash(key))])


cdef inline int64_t gr_find(const GhostRing* g, int64_t key) noexcept nogil:
    """Ring position of ``key`` or -1.  Read-only."""
    cdef uint64_t h, i
    cdef uint32_t fp, x
    cdef int64_t pos
    if g.n == 0:
        return -1
    h = gr_hash(key)
    fp = gr_fp(g, h)
    i = gr_home(g, h)
    while True:
        x = g.e[i]
        if x == 0:
            return -1
        if (x >> g.sbits) == fp:
            pos = <int64_t>(x & g.smask) - 1
            if gr_key(gr_at(g, pos)) == key:
                return pos
        i += 1
        if i == g.size:
            i = 0


cdef inline uint64_t _gr_bs_home(const void* t, uint64_t j) noexcept nogil:
    cdef const GhostRing* g = <const GhostRing*>t
    cdef uint32_t x = g.e[j]
    if x == 0:
        return BS_EMPTY
    return gr_home(g, gr_hash(gr_key(gr_at(g, <int64_t>(x & g.smask) - 1))))


cdef inline void _gr_bs_move(void* t, uint64_t src, uint64_t dst) noexcept nogil:
    cdef GhostRing* g = <GhostRing*>t
    g.e[dst] = g.e[src]


cdef inline void _gr_table_del(GhostRing* g, int64_t key, int64_t pos) noexcept nogil:
    """Remove the table entry of ``key`` at ring position ``pos`` (present); backward shift.
    Reads the keys of the entries it moves from ``ids`` (``pos``'s own is not read)."""
    cdef uint64_t h = gr_hash(key)
    cdef uint64_t i = gr_home(g, h)
    cdef uint32_t want = (gr_fp(g, h) << g.sbits) | <uint32_t>(pos + 1)
    while g.e[i] != want:
        i += 1
        if i == g.size:
            i = 0
    i = bs_close(g, g.size, i, _gr_bs_home, _gr_bs_move)
    g.e[i] = 0


cdef inline void gr_remove(GhostRing* g, int64_t pos) noexcept nogil:
    """Take the live id at ``pos`` out of the middle (a ghost hit): it leaves a tombstone."""
    _gr_table_del(g, gr_key(gr_at(g, pos)), pos)
    gr_set(g, pos, 0)
    g.n -= 1


cdef inline int64_t gr_pop(GhostRing* g) noexcept nogil:
    """Drop the oldest live entry and return it (an id, negated if ARC's second list stored it
    so; 0 if none); tombstones at the tail are passed."""
    cdef int64_t key, pos
    if g.n == 0:
        return 0
    while True:
        pos = g.tail
        key = gr_at(g, pos)
        g.tail = pos + 1 if pos + 1 < g.cap else 0
        g.span -= 1
        if key != 0:
            break
    _gr_table_del(g, gr_key(key), pos)
    gr_set(g, pos, 0)
    g.n -= 1
    return key


cdef inline int gr_push(GhostRing* g, int64_t key) noexcept nogil:
    """Add ``key`` (not live here; negated for ARC's second list) as the newest id; 0, or -1 if
    it found no memory to widen or grow the ring (``key`` then not added, ``nomem`` set).  A full
    ring is compacted, and grown if nothing is freed (ARC's lists have no fixed bound)."""
    cdef uint64_t h = gr_hash(gr_key(key)), i
    cdef int64_t pos
    if g.ids64 == NULL and (key > INT32_MAX or key < -INT32_MAX):
        if gr_widen(g) < 0:
            return -1
    if g.span == g.cap:
        gr_compact(g)
        if g.span == g.cap:
            if gr_grow(g) < 0:
                return -1
    i = gr_home(g, h)          # NOTE: after a growth, which resizes the table
    pos = g.head
    gr_set(g, pos, key)
    g.head = pos + 1 if pos + 1 < g.cap else 0
    g.span += 1
    g.n += 1
    while g.e[i] != 0:
        i += 1
        if i == g.size:
            i = 0
    g.e[i] = (gr_fp(g, h) << g.sbits) | <uint32_t>(pos + 1)
    return 0


cdef inline void gr_push_bounded(GhostRing* g, int64_t key) noexcept nogil:
    """Pop the oldest ids while ``limit`` are live, then push ``key`` (nothing if ``limit`` < 1);
    prefetch what the next pops read."""
    cdef int64_t pos, v
    if g.limit < 1:
        return
    while g.n >= g.limit:
        gr_pop(g)
    gr_push(g, key)
    # NOTE: the pop after next reads the table entry of the id two places ahead of the tail
    # (the ring read itself is sequential); start loading it now.
    if g.span > 2:
        pos = g.tail + 2
        if pos >= g.cap:
            pos -= g.cap
        v = gr_at(g, pos)
        if v != 0:
            gr_prefetch(g, v)


# ---- SlotFIFO: a FIFO of resident slots as a ring (s3fifo's small and main, rcsq's small) ----

# A FIFO of slots: ring ``q`` (-1 = free entry or tombstone), oldest at ``tail``.
#
# Invariant: ``pos[slot] ^ pxor`` is the ring position of every slot on the FIFO (``pos[slot]`` is
# -1 for a slot on none; FIFOs of one policy may share ``pos``, a slot being on at most one); the span
# ``tail .. head-1`` holds ``n`` live slots and tombstones; ``q[tail]`` is live unless ``n == 0``.
# NOTE: why a ring: the next victims are known ahead (``sf_ahead``), so their per-slot data and
# table entries can be prefetched several evictions early; a linked list only knows the tail.
# NOTE: ``pxor`` lets a FIFO keep its positions in an array that means something else for slots
# off the FIFO: with ``pxor = INT32_MIN`` every stored position is negative (and never -1), so
# random_compute_small_queue keeps them in its sampling set's ``pos`` (``>= 0``: index in main)
# instead of a 4-byte-a-slot array of their own.  0 stores them as they are.
cdef struct SlotFIFO:
    int32_t* q
    int32_t* pos
    int32_t pxor
    int64_t cap
    int64_t head
    int64_t tail
    int64_t span
    int64_t n
    int* nomem          # the owner's flag, set when a full ring finds no memory to grow


cdef int sf_init(SlotFIFO* f, int64_t hint, int32_t* pos, int* nomem, int32_t pxor=*) except -1
cdef void sf_free(SlotFIFO* f) noexcept nogil
cdef int sf_make_room(SlotFIFO* f) noexcept nogil
cdef list sf_slots(const SlotFIFO* f)


cdef inline void _sf_skip_tombstones(SlotFIFO* f) noexcept nogil:
    while f.span > 0 and f.q[f.tail] < 0:
        f.tail = f.tail + 1 if f.tail + 1 < f.cap else 0
        f.span -= 1
    if f.span == 0:
        f.head = f.tail = 0


cdef inline void sf_push(SlotFIFO* f, int64_t slot) noexcept nogil:
    """Append ``slot`` (on no FIFO) as the newest.  NOTE: may compact the ring (positions move).

    Out of memory with every entry live (``nomem`` set, the cache is failing): ``slot`` is not
    put on the ring; its position is recorded as ``cap``, which :func:`sf_remove` ignores."""
    cdef int64_t p
    if f.span == f.cap:
        if sf_make_room(f) < 0:
            f.pos[slot] = <int32_t>f.cap ^ f.pxor
            return
    p = f.head
    f.q[p] = <int32_t>slot
    f.pos[slot] = <int32_t>p ^ f.pxor
    f.head = p + 1 if p + 1 < f.cap else 0
    f.span += 1
    f.n += 1


cdef inline void sf_remove_at(SlotFIFO* f, int64_t p, int64_t slot) noexcept nogil:
    """:func:`sf_remove` of ``slot`` known to be at position ``p`` (saves reading ``pos``)."""
    f.q[p] = -1
    f.pos[slot] = -1
    f.n -= 1
    if p == f.tail:
        _sf_skip_tombstones(f)


cdef inline void sf_remove(SlotFIFO* f, int64_t slot) noexcept nogil:
    """Take ``slot`` (on this FIFO) out: a tombstone, passed at once if it is the tail."""
    cdef int64_t p = f.pos[slot] ^ f.pxor
    if p >= f.cap:
        f.pos[slot] = -1        # NOTE: a push that found no memory (see sf_push)
        return
    f.q[p] = -1
    f.pos[slot] = -1
    f.n -= 1
    if p == f.tail:
        _sf_skip_tombstones(f)


cdef inline int64_t sf_pos(const SlotFIFO* f, int64_t slot) noexcept nogil:
    """The ring position of ``slot`` (on this FIFO)."""
    return f.pos[slot] ^ f.pxor


cdef inline int32_t sf_tail(const SlotFIFO* f) noexcept nogil:
    """The oldest slot, or -1."""
    return f.q[f.tail] if f.n > 0 else -1


cdef inline int64_t sf_next_pos(const SlotFIFO* f, int64_t p) noexcept nogil:
    """The position of the next live slot after position ``p`` (towards the head), or -1."""
    while True:
        p = p + 1 if p + 1 < f.cap else 0
        if p == f.head:
            return -1
        if f.q[p] >= 0:
            return p


cdef inline int32_t sf_at(const SlotFIFO* f, int64_t p, int64_t d) noexcept nogil:
    """The ring entry ``d`` places after position ``p`` (a slot, or -1 for a tombstone or past
    the head)."""
    cdef int64_t off = p - f.tail
    if off < 0:
        off += f.cap
    if off + d >= f.span:
        return -1
    p += d
    if p >= f.cap:
        p -= f.cap
    return f.q[p]


cdef inline int32_t sf_ahead(const SlotFIFO* f, int64_t d) noexcept nogil:
    """The ring entry ``d`` places after the tail (a slot, or -1 for a tombstone or past the
    head); for prefetching the next pops."""
    cdef int64_t p
    if d >= f.span:
        return -1
    p = f.tail + d
    if p >= f.cap:
        p -= f.cap
    return f.q[p]
