# cython: language_level=3
"""Allocation helpers for :c:type:`IdMap` and the :class:`IdTable` wrapper (see core/idtable.pxd)."""

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


cdef int slotmap_alloc(SlotMap* m, int64_t capacity, int per_slot) noexcept nogil:
    """Size an empty table for ``capacity`` slots: ``per_slot`` entries per slot (load <=
    1/per_slot, 4 * per_slot B/slot; ``SLOTMAP_PER_SLOT`` = 4 unless a policy asks for fewer).
    -1 (and ``m.e`` NULL) if out of memory."""
    cdef uint64_t size = <uint64_t>(per_slot * capacity if capacity > 4 else 16)
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


cdef int slotmap_init(SlotMap* m, int64_t capacity, int per_slot=SLOTMAP_PER_SLOT) except -1 nogil:
    if slotmap_alloc(m, capacity, per_slot) < 0:
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


cdef class SlotTable:
    """A :c:type:`SlotMap` with its own ``slot_ids`` array, for tests: ``put`` stores a key in a
    given slot, ``get`` returns its slot or -1, ``delete`` removes it, ``check`` verifies the
    probing invariant over the whole table.
    """
    cdef SlotMap m
    cdef int64_t* ids
    cdef SlotIds sids      # ``ids`` as the table reads it (always wide: any key)
    cdef readonly int64_t capacity

    def __cinit__(self, int64_t capacity):
        if capacity <= 0 or capacity >= (1 << 31) - 1:
            raise ValueError(f"SlotTable capacity out of range: {capacity}")
        self.capacity = capacity
        self.ids = <int64_t*>calloc(capacity, sizeof(int64_t))
        if self.ids == NULL:
            raise MemoryError(f"cannot allocate {capacity} slot ids")
        self.sids.narrow = NULL
        self.sids.wide = self.ids
        self.sids.narrow_ids = 0
        slotmap_init(&self.m, capacity)

    def __dealloc__(self):
        slotmap_free(&self.m)
        free(self.ids)

    def __len__(self) -> int:
        return self.m.n

    @property
    def fp_home(self) -> bool:
        return bool(self.m.fp_home)

    @property
    def size(self) -> int:
        return self.m.size

    def get(self, key: int) -> int:
        return slotmap_get(&self.m, &self.sids, key)

    def put(self, key: int, slot: int) -> None:
        if not 0 <= slot < self.capacity or self.ids[slot] != 0:
            raise ValueError(f"slot {slot} is out of range or taken")
        if key == 0 or slotmap_get(&self.m, &self.sids, key) >= 0:
            raise ValueError(f"key {key} is reserved or present")
        self.ids[slot] = key
        slotmap_put(&self.m, key, slot)

    def delete(self, slot: int) -> None:
        cdef int64_t key
        if not 0 <= slot < self.capacity or self.ids[slot] == 0:
            raise ValueError(f"slot {slot} is out of range or empty")
        key = self.ids[slot]
        # NOTE: the caller's order (Policy._remove): the table entry goes first, while slot_ids
        # still holds every resident key; the slot is cleared after.
        slotmap_del(&self.m, &self.sids, key, slot)
        self.ids[slot] = 0

    def check(self) -> None:
        """Raise AssertionError unless every entry is reachable from its key's home without
        crossing an empty entry, and holds the key's fingerprint and a live slot."""
        cdef uint64_t i, j, h, home
        cdef int64_t s, key, count = 0
        cdef uint32_t e
        for i in range(self.m.size):
            e = self.m.e[i]
            if e == 0:
                continue
            s = <int64_t>(e & self.m.smask) - 1
            count += 1
            assert 0 <= s < self.capacity and self.ids[s] != 0, f"entry {i}: dead slot {s}"
            key = self.ids[s]
            h = slotmap_hash(key)
            home = slotmap_home(&self.m, h)
            assert (e >> self.m.sbits) == slotmap_fp(&self.m, h), f"entry {i}: wrong fingerprint"
            assert slotmap_entry_home(&self.m, &self.sids, e) == home, f"entry {i}: wrong home"
            j = home
            while j != i:
                assert self.m.e[j] != 0, f"entry {i}: empty entry {j} after its home {home}"
                j += 1
                if j == self.m.size:
                    j = 0
        assert count == self.m.n, f"{count} entries, n = {self.m.n}"
