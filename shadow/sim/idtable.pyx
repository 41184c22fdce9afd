# cython: language_level=3
"""Allocation helpers for :c:type:`IdMap` and the :class:`IdTable` wrapper (see idtable.pxd)."""

from libc.stdlib cimport calloc, free
from libc.string cimport memset


cdef int idmap_init(IdMap* m, int64_t capacity) except -1 nogil:
    cdef uint64_t size = <uint64_t>(2 * capacity if capacity > 8 else 16)
    m.keys = <int64_t*>shadow_big_calloc(size, sizeof(int64_t))
    m.vals = <int32_t*>shadow_big_calloc(size, sizeof(int32_t))
    m.size = size
    m.n = 0
    if m.keys == NULL or m.vals == NULL:
        free(m.keys)
        free(m.vals)
        m.keys = NULL
        m.vals = NULL
        with gil:
            raise MemoryError(f"cannot allocate an id table for {capacity} ids")
    return 0


cdef int slotmap_alloc(SlotMap* m, int64_t capacity) noexcept nogil:
    """Size an empty table for ``capacity`` slots: about 4 entries per slot (load <= 1/4),
    16 B/slot.  -1 (and ``m.e`` NULL) if out of memory."""
    cdef uint64_t size = <uint64_t>(4 * capacity if capacity > 4 else 16)
    cdef uint32_t sbits = 1
    # NOTE: Lemire's reduction multiplies a 32-bit hash by the size: keep it below 2**32
    # (a cache of more than 2**30 slots then runs at a load above 1/4).
    if size > 0xFFFFFFFFULL:
        size = 0xFFFFFFFFULL
    while (<uint64_t>1 << sbits) <= <uint64_t>capacity:
        sbits += 1
    m.sbits = sbits
    m.smask = <uint32_t>((<uint64_t>1 << sbits) - 1)
    # NOTE: the fingerprint has 32 - sbits bits; with at least 2 more than the size needs, homes
    # derived from it alone are spread evenly enough (up to ~16k slots).
    m.fp_home = sbits < 32 and (<uint64_t>1 << (32 - sbits)) >= 4 * size
    m.e = <uint32_t*>shadow_big_calloc(size, sizeof(uint32_t))
    m.size = size
    m.n = 0
    return -1 if m.e == NULL else 0


cdef int slotmap_init(SlotMap* m, int64_t capacity) except -1 nogil:
    if slotmap_alloc(m, capacity) < 0:
        with gil:
            raise MemoryError(f"cannot allocate a slot table for {capacity} ids")
    return 0


cdef void slotmap_free(SlotMap* m) noexcept nogil:
    free(m.e)
    m.e = NULL
    m.n = 0


cdef void idmap_free(IdMap* m) noexcept nogil:
    free(m.keys)
    free(m.vals)
    m.keys = NULL
    m.vals = NULL
    m.n = 0


cdef void idmap_clear(IdMap* m) noexcept nogil:
    memset(m.keys, 0, m.size * sizeof(int64_t))
    m.n = 0


cdef class IdTable:
    def __cinit__(self, int64_t capacity, *args, **kwargs):
        if capacity <= 0:
            raise ValueError("IdTable capacity must be positive")
        if capacity >= (1 << 31) - 1:
            raise ValueError("IdTable capacity must be below 2**31")
        self.capacity = capacity
        idmap_init(&self.m, capacity)

    def __dealloc__(self):
        idmap_free(&self.m)

    def __len__(self) -> int:
        return self.m.n

    def py_get(self, key: int) -> int:
        """Python-level lookup (tests)."""
        return idmap_get(&self.m, key)

    def py_put(self, key: int, val: int) -> None:
        if key == 0:
            raise ValueError("id 0 is reserved")
        if idmap_get(&self.m, key) < 0 and self.m.n >= self.capacity:
            raise OverflowError("IdTable is full")
        idmap_put(&self.m, key, val)

    def py_delete(self, key: int) -> bool:
        return idmap_del(&self.m, key)
