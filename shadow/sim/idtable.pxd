# cython: language_level=3
"""Open-addressing id -> slot hash map (linear probing, backward-shift deletion), C-level.

Invariant: ``keys[i] == 0`` marks an empty entry (block id 0 is reserved and never stored); an
id occupies at most one entry; every entry between an id's home position and its entry is
non-empty (so a probe stops at the first empty entry).  The table has ``2 * capacity`` entries
(load <= 0.5) and is indexed with a multiply-shift hash and Lemire's fast range reduction, so its
size need not be a power of two: 24 bytes per slot of capacity.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t

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


# ---- SlotMap: the resident table of a Policy (8 B entries, keys live in the slot array) ----

cdef struct SlotMap:
    uint64_t* e        # 0 = empty; else (32-bit fingerprint << 32) | (slot + 1)
    uint64_t size      # number of entries (2 * capacity: load <= 0.5)
    int64_t n


cdef inline uint64_t slotmap_hash(int64_t key) noexcept nogil:
    return (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL


cdef inline uint64_t slotmap_home(const SlotMap* m, uint64_t fp) noexcept nogil:
    # NOTE: the home depends on the fingerprint only, so deletion can recompute any entry's home
    # without reading its key (backward-shift deletion touches nothing but the entries).
    return (fp * m.size) >> 32


cdef inline void slotmap_prefetch(const SlotMap* m, int64_t key) noexcept nogil:
    SHADOW_PREFETCH(&m.e[slotmap_home(m, slotmap_hash(key) >> 32)])


cdef inline int64_t slotmap_get(const SlotMap* m, const int64_t* slot_ids, int64_t key) noexcept nogil:
    """Slot holding ``key`` (``slot_ids[slot] == key``), or -1.  Read-only."""
    cdef uint64_t fp = slotmap_hash(key) >> 32
    cdef uint64_t i = slotmap_home(m, fp)
    cdef uint64_t e
    cdef int64_t s
    while True:
        e = m.e[i]
        if e == 0:
            return -1
        if (e >> 32) == fp:
            s = <int64_t>(e & 0xFFFFFFFFULL) - 1
            if slot_ids[s] == key:
                return s
        i += 1
        if i == m.size:
            i = 0


cdef inline void slotmap_put(SlotMap* m, int64_t key, int64_t slot) noexcept nogil:
    """Add ``key`` -> ``slot``; the caller guarantees ``key`` is absent and ``n < size``."""
    cdef uint64_t fp = slotmap_hash(key) >> 32
    cdef uint64_t i = slotmap_home(m, fp)
    while m.e[i] != 0:
        i += 1
        if i == m.size:
            i = 0
    m.e[i] = (fp << 32) | <uint64_t>(slot + 1)
    m.n += 1


cdef inline void slotmap_del(SlotMap* m, int64_t key, int64_t slot) noexcept nogil:
    """Remove the entry of ``key`` in ``slot`` (it must be present): found by slot, no key reads."""
    cdef uint64_t fp = slotmap_hash(key) >> 32
    cdef uint64_t i = slotmap_home(m, fp)
    cdef uint64_t want = (fp << 32) | <uint64_t>(slot + 1)
    cdef uint64_t j, h, e
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
        h = slotmap_home(m, e >> 32)
        # NOTE: as in idmap_del: the entry at j moves back to the hole at i unless its home is
        # cyclically within (i, j].
        if i <= j:
            if i < h and h <= j:
                continue
        else:
            if i < h or h <= j:
                continue
        m.e[i] = e
        i = j
    m.e[i] = 0
    m.n -= 1


cdef int slotmap_init(SlotMap* m, int64_t capacity) except -1 nogil
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
