# cython: language_level=3
"""Open-addressing id -> slot hash map (linear probing, backward-shift deletion), C-level.

Invariant: ``keys[i] == 0`` marks an empty entry (block id 0 is reserved and never stored); an
id occupies at most one entry; every entry between an id's home position and its entry is
non-empty (so a probe stops at the first empty entry).  The table has ``2 * capacity`` entries
(load <= 0.5) and is indexed with a multiply-shift hash and Lemire's fast range reduction, so its
size need not be a power of two: 24 bytes per slot of capacity.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t

cdef struct IdMap:
    int64_t* keys      # 0 = empty
    int32_t* vals
    uint64_t size      # number of entries
    int64_t n          # number of stored ids


cdef inline uint64_t idmap_home(const IdMap* m, int64_t key) noexcept nogil:
    cdef uint64_t h = (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL
    return ((h >> 32) * m.size) >> 32


cdef extern from *:
    """
    #if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    /* NOTE: not __builtin_prefetch: gcc's IPA pure-const pass finds that a helper whose only
       effect is a prefetch (slotmap_prefetch, Policy.prefetch) has no side effect, marks it
       const and deletes its calls before inlining; a volatile asm is kept. */
    #define SHADOW_PREFETCH(p) __asm__ __volatile__("prefetcht0 %0" : : "m"(*(const char*)(p)))
    #else
    #define SHADOW_PREFETCH(p) __builtin_prefetch((const void*)(p))
    #endif
    """
    void SHADOW_PREFETCH(const void* p) noexcept nogil


# NOTE: why huge pages: a cache of 128k+ slots spreads its per-slot arrays and table over more
# 4 KiB pages than the TLB covers (~20 MB at 512k slots), so nearly every random access of the
# serve loop also missed the TLB and walked the page table (prefetches included).  Arrays of
# 2 MiB or more are therefore allocated 2 MiB-aligned, in whole 2 MiB units, and advised as
# transparent huge pages (the kernel default here is THP on ``madvise`` only).  They are freed
# with plain ``free``.
cdef extern from *:
    """
    #include <stdlib.h>
    #include <string.h>
    #include <sys/mman.h>
    #define SHADOW_HUGE ((size_t)2 << 20)
    #include <stdint.h>
    /* NOTE: static inline: every module that cimports idtable gets these, and a plain static
       function that a module does not call is a -Wunused-function warning there */
    static inline size_t shadow_big_bytes(size_t bytes) {
        return bytes < SHADOW_HUGE ? bytes : (bytes + SHADOW_HUGE - 1) & ~(SHADOW_HUGE - 1);
    }
    static inline void* shadow_big_malloc(size_t bytes) {
        size_t rounded = shadow_big_bytes(bytes);
        void* p;
        if (rounded < SHADOW_HUGE) return malloc(bytes ? bytes : 1);
        p = aligned_alloc(SHADOW_HUGE, rounded);
        if (p != NULL) madvise(p, rounded, MADV_HUGEPAGE);
        return p;
    }
    static inline void* shadow_big_calloc(size_t n, size_t size) {
        size_t bytes;
        void* p;
        if (size && n > SIZE_MAX / size) return NULL;  /* n * size would overflow */
        bytes = n * size;
        if (shadow_big_bytes(bytes) < SHADOW_HUGE) return calloc(n ? n : 1, size);
        p = shadow_big_malloc(bytes);
        if (p != NULL) memset(p, 0, bytes);
        return p;
    }
    """
    size_t shadow_big_bytes(size_t nbytes) noexcept nogil
    void* shadow_big_malloc(size_t nbytes) noexcept nogil
    void* shadow_big_calloc(size_t n, size_t size) noexcept nogil


# ---- backward-shift deletion: one implementation for every open-addressing table ----
# (IdMap and SlotMap here, GhostRing's position table in policies/_shared/ghost.pxd)

cdef extern from *:
    """
    #define SHADOW_BS_EMPTY ((uint64_t)-1)
    """
    # what a table's ``bs_home_fn`` returns for an empty entry
    const uint64_t BS_EMPTY "SHADOW_BS_EMPTY"

ctypedef uint64_t (*bs_home_fn)(const void* table, uint64_t j) noexcept nogil
ctypedef void (*bs_move_fn)(void* table, uint64_t src, uint64_t dst) noexcept nogil


cdef inline uint64_t bs_close(void* table, uint64_t size, uint64_t hole, bs_home_fn home,
                              bs_move_fn move) noexcept nogil:
    """Close the hole at ``hole`` of a linear-probing table of ``size`` entries; returns the
    entry left empty at the end (the caller clears it).

    ``home(table, j)`` is the home entry of the entry at ``j`` (``BS_EMPTY`` if it is empty);
    ``move(table, src, dst)`` copies entry ``src`` to ``dst``.  Invariant kept: no empty entry
    between any key's home and its entry, so probes need no tombstones.
    NOTE: both callbacks are constants at every call site, so the compiler inlines them.
    """
    cdef uint64_t i = hole, j = hole, hm
    while True:
        j += 1
        if j == size:
            j = 0
        hm = home(table, j)
        if hm == BS_EMPTY:
            return i
        # NOTE: the entry at j moves back to the hole at i unless its home is cyclically
        # within (i, j]: a probe from such a home starts past the hole and never crosses it.
        if i <= j:
            if i < hm and hm <= j:
                continue
        else:
            if i < hm or hm <= j:
                continue
        move(table, j, i)
        i = j


cdef inline void idmap_prefetch(const IdMap* m, int64_t key) noexcept nogil:
    """Prefetch ``key``'s home entry (keys and values) into the CPU cache."""
    cdef uint64_t i = idmap_home(m, key)
    SHADOW_PREFETCH(&m.keys[i])
    SHADOW_PREFETCH(&m.vals[i])


cdef inline int32_t idmap_get(const IdMap* m, int64_t key) noexcept nogil:
    """Value stored for ``key``, or -1."""
    cdef uint64_t i = idmap_home(m, key)
    cdef int64_t k
    while True:
        k = m.keys[i]
        if k == key:
            return m.vals[i]
        if k == 0:
            return -1
        i += 1
        if i == m.size:
            i = 0


cdef inline void idmap_put(IdMap* m, int64_t key, int32_t val) noexcept nogil:
    """Insert ``key`` (or overwrite its value).  The caller keeps ``n < size``."""
    cdef uint64_t i = idmap_home(m, key)
    cdef int64_t k
    while True:
        k = m.keys[i]
        if k == key:
            m.vals[i] = val
            return
        if k == 0:
            m.keys[i] = key
            m.vals[i] = val
            m.n += 1
            return
        i += 1
        if i == m.size:
            i = 0


cdef inline uint64_t _idmap_bs_home(const void* t, uint64_t j) noexcept nogil:
    cdef const IdMap* m = <const IdMap*>t
    cdef int64_t k = m.keys[j]
    return BS_EMPTY if k == 0 else idmap_home(m, k)


cdef inline void _idmap_bs_move(void* t, uint64_t src, uint64_t dst) noexcept nogil:
    cdef IdMap* m = <IdMap*>t
    m.keys[dst] = m.keys[src]
    m.vals[dst] = m.vals[src]


cdef inline uint64_t _idmap_probe(const IdMap* m, int64_t key) noexcept nogil:
    """The entry holding ``key``, or the empty entry where its probe ends (absent)."""
    cdef uint64_t i = idmap_home(m, key)
    cdef int64_t k
    while True:
        k = m.keys[i]
        if k == key or k == 0:
            return i
        i += 1
        if i == m.size:
            i = 0


cdef inline void _idmap_remove_at(IdMap* m, uint64_t i) noexcept nogil:
    """Empty entry ``i`` (it holds a key); backward-shift deletion keeps probes tombstone-free."""
    i = bs_close(m, m.size, i, _idmap_bs_home, _idmap_bs_move)
    m.keys[i] = 0
    m.n -= 1


cdef inline bint idmap_del(IdMap* m, int64_t key) noexcept nogil:
    """Remove ``key``; False if it was absent."""
    cdef uint64_t i = _idmap_probe(m, key)
    if m.keys[i] == 0:
        return False
    _idmap_remove_at(m, i)
    return True


cdef inline int32_t idmap_take(IdMap* m, int64_t key) noexcept nogil:
    """Remove ``key`` and return its value; 0 if it was absent (one probe sequence)."""
    cdef uint64_t i = _idmap_probe(m, key)
    cdef int32_t v
    if m.keys[i] == 0:
        return 0
    v = m.vals[i]
    _idmap_remove_at(m, i)
    return v


cdef inline int32_t idmap_add(IdMap* m, int64_t key, int32_t delta) noexcept nogil:
    """Add ``delta`` to ``key``'s value (an absent key counts 0 and is inserted); a key whose
    value comes to 0 is removed.  The new value; one probe sequence.  The caller keeps
    ``n < size``."""
    cdef uint64_t i = _idmap_probe(m, key)
    cdef int32_t v
    if m.keys[i] == 0:
        if delta != 0:
            m.keys[i] = key
            m.vals[i] = delta
            m.n += 1
        return delta
    v = m.vals[i] + delta
    if v == 0:
        _idmap_remove_at(m, i)
    else:
        m.vals[i] = v
    return v


# ---- SlotIds: a policy's per-slot block ids, 32 bits while every id fits, 64 bits for good after ----

cdef struct SlotIds:
    int32_t* narrow    # the ids while every id stored so far is in 1 .. INT32_MAX; NULL once widened
    int64_t* wide      # NULL until an id that does not fit is stored; then the only array
    uint64_t narrow_ids    # INT32_MAX while ``narrow`` is in use, 0 after (see sids_store_narrow)


# NOTE: why two widths: block ids are dense from 1 in first-appearance order (the trace format;
# the live API interns), so 32 bits hold every id of any trace in practice and save 4 B per
# slot in every policy; an id past them (or one < 1, outside the format) moves the array to 64
# bits for good (``Policy._widen_ids``), so results stay exact for any id.  Every read tests
# ``narrow``: a branch that goes the same way for a whole run (and always the narrow way in
# practice).  Narrow entries are sign-extended, so a narrow free-slot link (negative, see
# core/policy.pxd) never equals an id.

cdef inline bint sids_store_narrow(const SlotIds* ids, int64_t block_id) noexcept nogil:
    """Whether ``block_id`` goes to ``narrow``: the array is 32-bit and the id fits.  NOTE: one
    compare (``narrow_ids`` is 0 once wide), so the insert path stays small enough for gcc to
    inline it into the serve loop."""
    return (<uint64_t>block_id - 1) < ids.narrow_ids


cdef inline int64_t sids_get(const SlotIds* ids, int64_t s) noexcept nogil:
    """The entry of slot ``s``: a block id, or a free-slot link (negative; see core/policy.pxd)."""
    # NOTE: ``narrow`` tested first: the pointer tested is the one read (one load less).
    if ids.narrow != NULL:
        return ids.narrow[s]
    return ids.wide[s]


cdef inline const void* sids_addr(const SlotIds* ids, int64_t s) noexcept nogil:
    """Where slot ``s``'s entry lives (for a prefetch)."""
    if ids.narrow != NULL:
        return &ids.narrow[s]
    return &ids.wide[s]


# ---- SlotMap: the resident table of a Policy (4 B entries, keys live in the slot array) ----

cdef enum:
    SLOTMAP_PER_SLOT = 4          # default entries per slot (load <= 1/4, 16 B/slot; NOTE below)
    SLOTMAP_COMPACT_MIN = 32768   # a policy's denser table (TABLE_PER_SLOT) from this many
                                  # slots on (LR_RING_MIN's size: below it memory does not matter)


cdef struct SlotMap:
    uint32_t* e        # 0 = empty; else (fingerprint << sbits) | (slot + 1)
    uint64_t size      # number of entries (about 4 * capacity: load <= 1/4)
    int64_t n
    uint32_t sbits     # bits of ``slot + 1`` (capacity < 2**sbits); the fingerprint has the rest
    uint32_t smask     # (1 << sbits) - 1
    bint fp_home       # the fingerprint alone gives the home (small tables; see slotmap_init)


# NOTE: why 4-byte entries at load 1/4 and not 8-byte ones at 1/2 (same 16 B per slot): nearly
# every access of a simulated cache probes for an absent id (a miss) and every eviction deletes
# one; the probe and the backward shift end at the first empty entry, and their length (and its
# unpredictable branches) falls from 2.5 to 1.2 entries on average, and the serve loop is
# faster for it (docs/performance.md, "Measured choices").
#
# Two ways to find an entry's home, chosen once per table:
# * fp_home (small tables, fingerprint bits >= 2 + log2(size)): fingerprint = the top bits of the
#   key's hash and home = fingerprint scaled to the table, so deletion recomputes any entry's home
#   without reading its key;
# * otherwise home = the hash's top 32 bits scaled to the table, fingerprint = bits of its low
#   half, and deletion reads a moved entry's key from ``slot_ids`` (about 0.3 reads per delete).
#
# NOTE: a policy whose own per-slot state would otherwise pass the 48 B/slot budget (gdsf,
# s3fifo, arc, random_compute and its small-queue subclass) asks for 3 entries a slot (load <=
# 1/3, 12 B/slot) from SLOTMAP_COMPACT_MIN slots on (class attribute ``TABLE_PER_SLOT``, read by
# ``Policy.__cinit__``).  Expected miss probe 1.6 entries instead of 1.4, still within one cache
# line nearly always: 3 entries a slot lose nothing measurable against 4, 2 entries do
# (docs/performance.md, "Measured choices").
#
# NOTE: tried and rejected: above the fp_home limit, 8-byte entries at load 1/2 (32-bit
# fingerprint = the hash's top bits, which also give the home; 32-bit slot + 1; 16 B per slot),
# so that deletion never reads a key.  It was slower, not faster (docs/performance.md,
# "Measured choices"): a miss's probe (~2.5 entries instead of ~1.4) costs more than the ~0.3
# key reads per delete it saves; the resident table is probed far more often than it is shifted.

cdef inline uint64_t slotmap_hash(int64_t key) noexcept nogil:
    return (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL


cdef inline uint32_t slotmap_fp(const SlotMap* m, uint64_t h) noexcept nogil:
    if m.fp_home:
        return <uint32_t>(h >> (32 + m.sbits))
    return (<uint32_t>h) >> m.sbits


cdef inline uint64_t slotmap_home(const SlotMap* m, uint64_t h) noexcept nogil:
    """Home entry of a key with hash ``h``."""
    if m.fp_home:
        return ((h >> (32 + m.sbits)) * m.size) >> (32 - m.sbits)
    return ((h >> 32) * m.size) >> 32


cdef inline uint64_t slotmap_entry_home(const SlotMap* m, const SlotIds* slot_ids,
                                        uint32_t e) noexcept nogil:
    """Home of the stored entry ``e`` (reads its key only without ``fp_home``)."""
    if m.fp_home:
        return ((<uint64_t>(e >> m.sbits)) * m.size) >> (32 - m.sbits)
    return slotmap_home(m, slotmap_hash(sids_get(slot_ids, <int64_t>(e & m.smask) - 1)))


cdef inline void slotmap_prefetch(const SlotMap* m, int64_t key) noexcept nogil:
    SHADOW_PREFETCH(&m.e[slotmap_home(m, slotmap_hash(key))])


cdef inline int64_t slotmap_get(const SlotMap* m, const SlotIds* slot_ids, int64_t key) noexcept nogil:
    """Slot holding ``key`` (``sids_get(slot_ids, slot) == key``), or -1.  Read-only."""
    cdef uint64_t h = slotmap_hash(key)
    cdef uint32_t fp = slotmap_fp(m, h)
    cdef uint64_t i = slotmap_home(m, h)
    cdef uint32_t e
    cdef int64_t s
    while True:
        e = m.e[i]
        if e == 0:
            return -1
        if (e >> m.sbits) == fp:
            s = <int64_t>(e & m.smask) - 1
            if sids_get(slot_ids, s) == key:
                return s
        i += 1
        if i == m.size:
            i = 0


cdef inline void slotmap_put(SlotMap* m, int64_t key, int64_t slot) noexcept nogil:
    """Add ``key`` -> ``slot``; the caller guarantees ``key`` is absent and ``n < size``."""
    cdef uint64_t h = slotmap_hash(key)
    cdef uint64_t i = slotmap_home(m, h)
    while m.e[i] != 0:
        i += 1
        if i == m.size:
            i = 0
    m.e[i] = (slotmap_fp(m, h) << m.sbits) | <uint32_t>(slot + 1)
    m.n += 1


cdef struct _SlotMapDel:
    SlotMap* m
    const SlotIds* slot_ids


cdef inline uint64_t _slotmap_bs_home(const void* t, uint64_t j) noexcept nogil:
    cdef const _SlotMapDel* d = <const _SlotMapDel*>t
    cdef uint32_t e = d.m.e[j]
    return BS_EMPTY if e == 0 else slotmap_entry_home(d.m, d.slot_ids, e)


cdef inline void _slotmap_bs_move(void* t, uint64_t src, uint64_t dst) noexcept nogil:
    cdef SlotMap* m = (<_SlotMapDel*>t).m
    m.e[dst] = m.e[src]


cdef inline void slotmap_del(SlotMap* m, const SlotIds* slot_ids, int64_t key,
                             int64_t slot) noexcept nogil:
    """Remove the entry of ``key`` in ``slot`` (it must be present): found by slot, not by key.

    ``slot_ids`` must still hold the other resident keys (``slot``'s own is never read).
    """
    cdef uint64_t h = slotmap_hash(key)
    cdef uint64_t i = slotmap_home(m, h)
    cdef uint32_t want = (slotmap_fp(m, h) << m.sbits) | <uint32_t>(slot + 1)
    cdef _SlotMapDel d
    while m.e[i] != want:
        if m.e[i] == 0:
            return
        i += 1
        if i == m.size:
            i = 0
    d.m = m
    d.slot_ids = slot_ids
    i = bs_close(&d, m.size, i, _slotmap_bs_home, _slotmap_bs_move)
    m.e[i] = 0
    m.n -= 1


cdef int slotmap_init(SlotMap* m, int64_t capacity, int per_slot=*) except -1 nogil
cdef int slotmap_alloc(SlotMap* m, int64_t capacity, int per_slot) noexcept nogil
cdef void slotmap_free(SlotMap* m) noexcept nogil


cdef int idmap_init(IdMap* m, int64_t capacity) except -1 nogil
cdef void idmap_free(IdMap* m) noexcept nogil
cdef void idmap_clear(IdMap* m) noexcept nogil


cdef class IdTable:
    """An owned :c:type:`IdMap` for a policy's own bookkeeping (ghost queues, sub-caches).

    ``capacity`` is the most ids it will hold at once; ``get`` returns the stored int32 value or -1.
    """
    cdef IdMap m
    cdef readonly int64_t capacity
    cdef inline int32_t get(self, int64_t key) noexcept nogil:
        return idmap_get(&self.m, key)
    cdef inline void put(self, int64_t key, int32_t val) noexcept nogil:
        idmap_put(&self.m, key, val)
    cdef inline bint delete(self, int64_t key) noexcept nogil:
        return idmap_del(&self.m, key)
