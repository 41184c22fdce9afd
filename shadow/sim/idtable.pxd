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
    #define SHADOW_PREFETCH(p) __builtin_prefetch((const void*)(p))
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
    static size_t shadow_big_bytes(size_t bytes) {
        return bytes < SHADOW_HUGE ? bytes : (bytes + SHADOW_HUGE - 1) & ~(SHADOW_HUGE - 1);
    }
    static void* shadow_big_malloc(size_t bytes) {
        size_t rounded = shadow_big_bytes(bytes);
        void* p;
        if (rounded < SHADOW_HUGE) return malloc(bytes ? bytes : 1);
        p = aligned_alloc(SHADOW_HUGE, rounded);
        if (p != NULL) madvise(p, rounded, MADV_HUGEPAGE);
        return p;
    }
    static void* shadow_big_calloc(size_t n, size_t size) {
        size_t bytes = n * size;
        void* p;
        if (shadow_big_bytes(bytes) < SHADOW_HUGE) return calloc(n ? n : 1, size);
        p = shadow_big_malloc(bytes);
        if (p != NULL) memset(p, 0, bytes);
        return p;
    }
    """
    size_t shadow_big_bytes(size_t nbytes) noexcept nogil
    void* shadow_big_malloc(size_t nbytes) noexcept nogil
    void* shadow_big_calloc(size_t n, size_t size) noexcept nogil


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


cdef inline bint idmap_del(IdMap* m, int64_t key) noexcept nogil:
    """Remove ``key``; False if it was absent.  Backward-shift deletion keeps probes tombstone-free."""
    cdef uint64_t i = idmap_home(m, key)
    cdef uint64_t j, h
    cdef int64_t k
    while True:
        k = m.keys[i]
        if k == key:
            break
        if k == 0:
            return False
        i += 1
        if i == m.size:
            i = 0
    j = i
    while True:
        j += 1
        if j == m.size:
            j = 0
        k = m.keys[j]
        if k == 0:
            break
        h = idmap_home(m, k)
        # NOTE: the entry at j may move back to the hole at i only if its home is not
        # cyclically within (i, j]; otherwise a probe from its home would pass the hole.
        if i <= j:
            if i < h and h <= j:
                continue
        else:
            if i < h or h <= j:
                continue
        m.keys[i] = k
        m.vals[i] = m.vals[j]
        i = j
    m.keys[i] = 0
    m.n -= 1
    return True


# ---- SlotMap: the resident table of a Policy (keys live in the slot array) ----

cdef struct SlotMap:
    uint32_t* e        # narrow layout (NULL if wide): 0 = empty; else (fingerprint << sbits) | (slot + 1)
    uint64_t* w        # wide layout (NULL if narrow): 0 = empty; else (hash >> 32) << 32 | (slot + 1)
    uint64_t size      # number of entries (narrow: about 4 * capacity, load <= 1/4; wide: 2 * capacity)
    int64_t n
    uint32_t sbits     # bits of ``slot + 1`` (capacity < 2**sbits); the fingerprint has the rest
    uint32_t smask     # (1 << sbits) - 1
    bint fp_home       # narrow only: the fingerprint alone gives the home (see slotmap_alloc)
    bint wide          # 8-byte entries at load 1/2 (tables too large for fp_home)


# NOTE: two layouts, 16 B per slot each, chosen once per table (slotmap_alloc):
# * narrow (small tables, up to ~11k slots): 4-byte entries at load 1/4, fingerprint = the top
#   bits of the key's hash and home = fingerprint scaled to the table, so deletion recomputes any
#   entry's home without reading its key.  Nearly every access of a simulated cache probes for an
#   absent id (a miss) and every eviction deletes one; the probe and the backward shift end at the
#   first empty entry, and their length falls from 2.5 to 1.2 entries against load 1/2.  A minimal
#   LRU over the bench trace ran 28 M/s with 8-byte entries and 38-40 M/s with these (8k slots).
# * wide (larger tables): 8-byte entries at load 1/2, the high half the hash's top 32 bits (which
#   also give the home), the low half ``slot + 1``.  A 4-byte entry has too few fingerprint bits
#   left to give the home of a large table, and its deletion then had to read a moved entry's key
#   from ``slot_ids`` (a random cache miss per entry considered: ~60% of random_compute's
#   eviction at 512k slots).  The wide entries' longer probes stay mostly within one 64-byte line
#   (8 entries), and a delete never reads a key.

cdef inline uint64_t slotmap_hash(int64_t key) noexcept nogil:
    return (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL


cdef inline uint32_t slotmap_fp(const SlotMap* m, uint64_t h) noexcept nogil:
    """Narrow layout's fingerprint of a key with hash ``h`` (fp_home tables)."""
    return <uint32_t>(h >> (32 + m.sbits))


cdef inline uint64_t slotmap_home(const SlotMap* m, uint64_t h) noexcept nogil:
    """Home entry of a key with hash ``h``."""
    if m.wide:
        return ((h >> 32) * m.size) >> 32
    return ((h >> (32 + m.sbits)) * m.size) >> (32 - m.sbits)


cdef inline void slotmap_prefetch(const SlotMap* m, int64_t key) noexcept nogil:
    if m.wide:
        SHADOW_PREFETCH(&m.w[slotmap_home(m, slotmap_hash(key))])
    else:
        SHADOW_PREFETCH(&m.e[slotmap_home(m, slotmap_hash(key))])


cdef inline int64_t slotmap_get(const SlotMap* m, const int64_t* slot_ids, int64_t key) noexcept nogil:
    """Slot holding ``key`` (``slot_ids[slot] == key``), or -1.  Read-only."""
    cdef uint64_t h = slotmap_hash(key)
    cdef uint64_t i = slotmap_home(m, h)
    cdef uint32_t fp
    cdef uint32_t e
    cdef uint64_t x
    cdef int64_t s
    if m.wide:
        fp = <uint32_t>(h >> 32)
        while True:
            x = m.w[i]
            if x == 0:
                return -1
            if <uint32_t>(x >> 32) == fp:
                s = <int64_t>(<uint32_t>x) - 1
                if slot_ids[s] == key:
                    return s
            i += 1
            if i == m.size:
                i = 0
    fp = slotmap_fp(m, h)
    while True:
        e = m.e[i]
        if e == 0:
            return -1
        if (e >> m.sbits) == fp:
            s = <int64_t>(e & m.smask) - 1
            if slot_ids[s] == key:
                return s
        i += 1
        if i == m.size:
            i = 0


cdef inline void slotmap_put(SlotMap* m, int64_t key, int64_t slot) noexcept nogil:
    """Add ``key`` -> ``slot``; the caller guarantees ``key`` is absent and ``n < size``."""
    cdef uint64_t h = slotmap_hash(key)
    cdef uint64_t i = slotmap_home(m, h)
    if m.wide:
        while m.w[i] != 0:
            i += 1
            if i == m.size:
                i = 0
        m.w[i] = ((h >> 32) << 32) | <uint64_t>(slot + 1)
    else:
        while m.e[i] != 0:
            i += 1
            if i == m.size:
                i = 0
        m.e[i] = (slotmap_fp(m, h) << m.sbits) | <uint32_t>(slot + 1)
    m.n += 1


cdef inline void _slotmap_del_wide(SlotMap* m, uint64_t h, int64_t slot) noexcept nogil:
    cdef uint64_t i = slotmap_home(m, h)
    cdef uint64_t want = ((h >> 32) << 32) | <uint64_t>(slot + 1)
    cdef uint64_t j, hm, x
    while m.w[i] != want:
        if m.w[i] == 0:
            return
        i += 1
        if i == m.size:
            i = 0
    j = i
    while True:
        j += 1
        if j == m.size:
            j = 0
        x = m.w[j]
        if x == 0:
            break
        hm = ((x >> 32) * m.size) >> 32
        # NOTE: as in idmap_del: the entry at j moves back to the hole at i unless its home is
        # cyclically within (i, j].
        if i <= j:
            if i < hm and hm <= j:
                continue
        else:
            if i < hm or hm <= j:
                continue
        m.w[i] = x
        i = j
    m.w[i] = 0
    m.n -= 1


cdef inline void slotmap_del(SlotMap* m, const int64_t* slot_ids, int64_t key,
                             int64_t slot) noexcept nogil:
    """Remove the entry of ``key`` in ``slot`` (it must be present): found by slot, not by key.

    Reads no key: ``slot_ids`` is not used (kept in the signature for the callers).
    """
    cdef uint64_t h = slotmap_hash(key)
    if m.wide:
        _slotmap_del_wide(m, h, slot)
        return
    cdef uint64_t i = slotmap_home(m, h)
    cdef uint32_t want = (slotmap_fp(m, h) << m.sbits) | <uint32_t>(slot + 1)
    cdef uint64_t j, hm
    cdef uint32_t e
    while m.e[i] != want:
        if m.e[i] == 0:
            return
        i += 1
        if i == m.size:
            i = 0
    j = i
    while True:
        j += 1
        if j == m.size:
            j = 0
        e = m.e[j]
        if e == 0:
            break
        hm = ((<uint64_t>(e >> m.sbits)) * m.size) >> (32 - m.sbits)
        # NOTE: as in idmap_del: the entry at j moves back to the hole at i unless its home is
        # cyclically within (i, j].
        if i <= j:
            if i < hm and hm <= j:
                continue
        else:
            if i < hm or hm <= j:
                continue
        m.e[i] = e
        i = j
    m.e[i] = 0
    m.n -= 1


cdef int slotmap_init(SlotMap* m, int64_t capacity) except -1 nogil
cdef int slotmap_alloc(SlotMap* m, int64_t capacity) noexcept nogil
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
