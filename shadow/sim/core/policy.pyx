# cython: language_level=3
"""Base class of every eviction policy; see core/policy.pxd for the interface and its invariant."""

from libc.stdlib cimport malloc, calloc, realloc, free
from libc.stdint cimport INT64_MIN, INT32_MIN, INT32_MAX, int32_t, uint8_t, uint16_t

from shadow.sim.core.idtable cimport (idmap_init, idmap_free, idmap_take, idmap_add,
                                 slotmap_init, slotmap_free, shadow_big_malloc, shadow_big_calloc,
                                 SLOTMAP_PER_SLOT, SLOTMAP_COMPACT_MIN)


cdef inline int32_t _orphans_take(LeafState* L, int64_t key) noexcept nogil:
    """Remove parent ``key``'s count of resident children (0 if none) from the pending entry or
    the map."""
    cdef int32_t c
    if L.pend_id == key:
        c = L.pend_n
        L.pend_id = 0
        return c
    if L.orphans.n > 0:
        return idmap_take(&L.orphans, key)
    return 0


cdef inline void _orphans_add(LeafState* L, int64_t key, int32_t delta) noexcept nogil:
    """Add ``delta`` to parent ``key``'s count of resident children (removed at 0).

    NOTE: the pending entry takes a new key only while the map is empty (so the key is in
    neither): deepest-first replay inserts a child, then its parent at once, and that pair goes
    through the entry without a hash probe."""
    if L.pend_id == key:
        L.pend_n += delta
        if L.pend_n == 0:
            L.pend_id = 0
        return
    if L.pend_id == 0 and L.orphans.n == 0:
        L.pend_id = key
        L.pend_n = delta
        return
    idmap_add(&L.orphans, key, delta)


cdef void _free_leaf(LeafState* L) noexcept:
    """Free a leaf state (NULL, or partly allocated: its map's arrays NULL or allocated)."""
    if L == NULL:
        return
    free(L.parent)
    free(L.pslot)
    free(L.nkids)
    idmap_free(&L.orphans)
    free(L)


cdef class Policy:
    """Slots, the resident id table, pins and the free-slot stack in ``slot_ids`` (see core/policy.pxd).

    Subclasses get the same constructor arguments; ``capacity`` is always the first.
    """

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        cdef int64_t i
        cdef int per_slot
        if capacity <= 0:
            raise ValueError(f"cache capacity must be positive, got {capacity}")
        if capacity >= (1 << 31) - 1:
            raise ValueError(f"cache capacity {capacity} is too large (at most 2**31 - 2 slots)")
        self.capacity = capacity
        self.n_resident = 0
        self.pin_enabled = True
        self.wants_release = False
        self.wants_request_ctx = False
        self.nomem = 0
        # NOTE: a policy whose own per-slot state would otherwise take it past the memory budget
        # (48 B a slot) sets the class attribute ``TABLE_PER_SLOT`` (3: 12 B a slot instead of
        # 16); a denser table means longer probes and shifts, so caches below
        # SLOTMAP_COMPACT_MIN slots, where memory does not matter, keep 4.  Read here, before
        # the table is allocated: a table sized twice (allocated, freed, allocated again) moved
        # glibc's mmap threshold and cost more RSS than it saved (docs/performance.md,
        # "Measured choices").
        per_slot = SLOTMAP_PER_SLOT
        if capacity >= SLOTMAP_COMPACT_MIN:
            per_slot = min(per_slot, getattr(type(self), "TABLE_PER_SLOT", per_slot))
        slotmap_init(&self.table, capacity, per_slot)
        # NOTE: 32-bit ids from the start (block ids are dense from 1); _widen_ids moves them to
        # 64 bits at the first id that does not fit.
        self.slot_ids.narrow = <int32_t*>shadow_big_malloc(capacity * sizeof(int32_t))
        self.slot_ids.wide = NULL
        self.slot_ids.narrow_ids = INT32_MAX
        self.pins = <uint16_t*>shadow_big_calloc(capacity, sizeof(uint16_t))
        self.pinbits = NULL
        self.pin_over = NULL
        self.n_pin_over = 0
        self.cap_pin_over = 0
        if self.slot_ids.narrow == NULL or self.pins == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        # NOTE: slot 0 on top of the free stack, so a fresh cache fills slots 0, 1, 2, ... in order.
        for i in range(capacity - 1):
            self.slot_ids.narrow[i] = <int32_t>(INT32_MIN + 1 + (i + 1))
        self.slot_ids.narrow[capacity - 1] = INT32_MIN
        self.free_head = 0

    def __dealloc__(self):
        slotmap_free(&self.table)
        free(self.slot_ids.narrow)
        free(self.slot_ids.wide)
        free(self.pins)
        free(self.pinbits)
        free(self.pin_over)
        _free_leaf(self.leaf)

    cdef int _want_pinbits(self) except -1:
        """Keep ``pinbits`` from now on (call from a subclass's ``__cinit__``, while nothing is
        pinned).  NOTE: for a policy that tests pins at random slots (the sampling policies): the
        bitmap (capacity / 8 bytes, 64 KiB at 512k slots) stays in the L2 cache where ``pins``
        (2 B a slot) does not; the pin and unpin that change a slot's state set or clear its bit."""
        cdef int64_t i
        if self.pinbits == NULL:
            self.pinbits = <uint64_t*>calloc((self.capacity + 63) // 64, sizeof(uint64_t))
            if self.pinbits == NULL:
                raise MemoryError(f"cannot allocate the pin bitmap of {self.capacity} slots")
            for i in range(self.capacity):
                if self.pins[i] > 0:
                    self.pinbits[i >> 6] |= (<uint64_t>1) << (i & 63)
        return 0

    cdef int _enable_leaf(self) except -1:
        """Turn leaf-only eviction on (an empty cache; a no-op if it is on already).

        Memory: parent id 8 + parent slot 4 + child count 4 + the orphans map (``IdMap``, 24 a
        slot: at most one parent id per resident block) = 40 B/slot, allocated here, never
        resized."""
        cdef LeafState* L
        cdef int64_t i
        if self.leaf != NULL:
            return 0
        if self.n_resident > 0:
            raise ValueError("leaf-only eviction must be turned on while the cache is empty")
        L = <LeafState*>calloc(1, sizeof(LeafState))
        if L == NULL:
            raise MemoryError()
        L.parent = <int64_t*>shadow_big_calloc(self.capacity, sizeof(int64_t))
        L.pslot = <int32_t*>shadow_big_malloc(self.capacity * sizeof(int32_t))
        L.nkids = <int32_t*>shadow_big_calloc(self.capacity, sizeof(int32_t))
        if L.parent == NULL or L.pslot == NULL or L.nkids == NULL:
            _free_leaf(L)
            raise MemoryError(f"cannot allocate the leaf state of {self.capacity} slots")
        for i in range(self.capacity):
            L.pslot[i] = -1
        try:
            idmap_init(&L.orphans, self.capacity)
        except MemoryError:
            _free_leaf(L)
            raise
        self.leaf = L
        return 0

    cdef void _leaf_insert(self, int64_t slot, int64_t parent, int64_t pslot,
                           int64_t cslot) noexcept nogil:
        """The block just inserted into ``slot`` has prefix parent ``parent`` (0: none, a root).

        Called by the serve loop after each insert while ``leaf`` is set, with what it knows:
        ``pslot`` the parent's slot (checked here), -1 if the parent is surely not resident,
        -2 if unknown (then looked up); ``cslot`` a slot that may hold a child of this block
        inserted before it (deepest-first replay: the next position), or -1.  The block takes
        over the count of its children already resident (``pend_id`` or ``orphans``) and is held
        if there are any; its parent counts it (held from its first resident child on).  Cost:
        none of a hash probe in the common cases (the parent's slot known, or the parent the
        pending entry); a probe of the orphans map while it is not empty, a table probe when
        the parent's slot is unknown."""
        cdef LeafState* L = self.leaf
        cdef int64_t bid = self.slot_id(slot)
        cdef int32_t c = 0
        L.nkids[slot] = 0
        c = _orphans_take(L, bid)
        if c > 0:
            self._pin(slot)               # NOTE: before the count, so _pin counts it as any pin
            L.nkids[slot] = c
            self.n_held += 1
            if self.pins[slot] == 1:
                self.n_hold_only += 1
        if cslot >= 0 and L.parent[cslot] == bid:
            L.pslot[cslot] = <int32_t>slot
        if parent == bid:
            parent = 0                    # NOTE: a raw trace's repeated id is no parent of itself
        L.parent[slot] = parent
        L.pslot[slot] = -1
        if parent == 0:
            return
        if pslot == -2 or (pslot >= 0 and self.slot_id(pslot) != parent):
            pslot = self.find(parent)
        if pslot < 0:
            _orphans_add(L, parent, 1)
            return
        L.pslot[slot] = <int32_t>pslot
        if L.nkids[pslot] > 0:
            L.nkids[pslot] += 1
            return
        self._pin(pslot)
        L.nkids[pslot] = 1
        self.n_held += 1
        if self.pins[pslot] == 1:
            self.n_hold_only += 1

    cdef void _leaf_drop(self, int64_t slot) noexcept nogil:
        """The block in ``slot`` leaves (from :meth:`_drop_slot`, before its pins go).  A held
        block (a best-effort victim) hands its children's count to ``orphans``; its parent loses
        a child, and its hold with the last one.  Cost: no hash probe while the parent's slot is
        known (the common case), a table probe otherwise."""
        cdef LeafState* L = self.leaf
        cdef int64_t q = L.parent[slot], ps
        cdef int32_t c = L.nkids[slot]
        if c > 0:
            _orphans_add(L, self.slot_id(slot), c)
            L.nkids[slot] = 0
            self.n_held -= 1
            if self.pins[slot] == 1:
                self.n_hold_only -= 1
        if q == 0:
            return
        L.parent[slot] = 0
        ps = L.pslot[slot]
        if ps < 0 or self.slot_id(ps) != q:
            ps = self.find(q)
        if ps < 0:
            _orphans_add(L, q, -1)
            return
        L.nkids[ps] -= 1
        if L.nkids[ps] == 0:
            self.n_held -= 1
            if self.pins[ps] == 1:
                self.n_hold_only -= 1
            self._unpin(ps)               # NOTE: after the count, so _unpin drops it as any pin

    cdef void _widen_ids(self) noexcept nogil:
        """Move ``slot_ids`` to 64-bit entries for good (at the first id that does not fit 32
        bits, from ``_take_slot``): ids copied, free-slot links re-encoded from INT32_MIN to
        INT64_MIN, so the free stack and the table (keyed by slot) stay valid.  Out of memory:
        the ids stay 32-bit and ``nomem`` is set (see :meth:`_take_slot_wide`)."""
        cdef int64_t i, v
        cdef int64_t* wide
        if self.slot_ids.wide != NULL:
            return
        wide = <int64_t*>shadow_big_malloc(self.capacity * sizeof(int64_t))
        if wide == NULL:
            self.nomem = 1
            return
        for i in range(self.capacity):
            v = self.slot_ids.narrow[i]
            wide[i] = v if v > 0 else INT64_MIN + (v - INT32_MIN)
        free(self.slot_ids.narrow)
        self.slot_ids.narrow = NULL
        self.slot_ids.narrow_ids = 0
        self.slot_ids.wide = wide

    cdef int64_t _take_slot_wide(self, int64_t block_id) noexcept nogil:
        """:meth:`_take_slot` with 64-bit slot ids (widened first if they are still 32-bit)."""
        cdef int64_t slot
        if self.slot_ids.wide == NULL:
            self._widen_ids()
            if self.slot_ids.wide == NULL:
                # NOTE: out of memory (``nomem`` set; the loop fails this cache after the
                # request): the slot is taken but holds INT32_MAX, with no table entry, so the
                # block is never found, and dropping the slot later deletes nothing (no entry
                # of INT32_MAX's points at it).  Every array access stays in bounds.
                slot = self.free_head
                self.free_head = <int64_t>self.slot_ids.narrow[slot] - INT32_MIN - 1
                self.slot_ids.narrow[slot] = INT32_MAX
                self.pins[slot] = 0
                self.n_resident += 1
                return slot
        slot = self.free_head
        self.free_head = self.slot_ids.wide[slot] - INT64_MIN - 1
        self.slot_ids.wide[slot] = block_id
        self.pins[slot] = 0
        slotmap_put(&self.table, block_id, slot)
        self.n_resident += 1
        return slot

    cdef int64_t _drop_slot_wide(self, int64_t slot) noexcept nogil:
        """:meth:`_drop_slot` with 64-bit slot ids."""
        cdef int64_t block_id = self.slot_ids.wide[slot]
        if self.leaf != NULL:
            self._leaf_drop(slot)
        self._drop_pins(slot)
        slotmap_del(&self.table, &self.slot_ids, block_id, slot)
        self.slot_ids.wide[slot] = INT64_MIN + 1 + self.free_head
        self.free_head = slot
        self.n_resident -= 1
        return block_id

    @property
    def id_bits(self) -> int:
        """Width of the per-slot block ids now: 32, or 64 once an id past 32 bits was stored."""
        return 64 if self.slot_ids.wide != NULL else 32

    cdef void _pin_over_add(self, int64_t slot) noexcept nogil:
        """One more pin on a slot already holding PIN_SAT of them."""
        cdef int64_t i, cap
        cdef PinOver* grown
        for i in range(self.n_pin_over):
            if self.pin_over[i].slot == slot:
                self.pin_over[i].extra += 1
                return
        if self.n_pin_over == self.cap_pin_over:
            cap = 2 * self.cap_pin_over + 4
            grown = <PinOver*>realloc(self.pin_over, cap * sizeof(PinOver))
            if grown == NULL:
                # NOTE: out of memory for a few bytes: the count saturates (the block stays
                # pinned until PIN_SAT releases; nothing here may raise) and the cache fails.
                self.nomem = 1
                return
            self.pin_over = grown
            self.cap_pin_over = cap
        self.pin_over[self.n_pin_over].slot = slot
        self.pin_over[self.n_pin_over].extra = 1
        self.n_pin_over += 1

    cdef bint _pin_over_take(self, int64_t slot, bint all_of_it) noexcept nogil:
        """Drop one (or, ``all_of_it``, every) excess pin of ``slot``; False if it has none."""
        cdef int64_t i
        for i in range(self.n_pin_over):
            if self.pin_over[i].slot == slot:
                self.pin_over[i].extra -= 1
                if all_of_it or self.pin_over[i].extra == 0:
                    self.n_pin_over -= 1
                    self.pin_over[i] = self.pin_over[self.n_pin_over]
                return True
        return False

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        pass

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self._take_slot(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return 0

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, victim
        while k < n:
            victim = self.evict(acc)
            if victim == 0:
                break
            out[k] = victim
            k += 1
        return k

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._drop_slot(slot)

    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil:
        pass

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        pass

    cdef void on_release(self, int64_t slot) noexcept nogil:
        pass

    # ---- Python-level helpers (tests, debugging; not for hot paths) ----

    @property
    def table_entries(self) -> int:
        """Entries of the resident table (4 B each): its memory, for tests and benchmarks."""
        return self.table.size

    def py_find(self, block_id: int) -> int:
        """Slot of a resident block or -1 (read-only)."""
        return self.find(block_id)

    def resident_ids(self) -> list[int]:
        """Ids of the resident blocks, in slot order."""
        cdef int64_t s
        return [self.slot_id(s) for s in range(self.capacity) if not slot_is_free(&self.slot_ids, s)]

    def pin_count(self, block_id: int) -> int:
        """Request pins of a resident block (a leaf hold is not one: see :meth:`held_ids`)."""
        cdef int64_t s = self.find(block_id), i, n
        if s < 0:
            return 0
        n = self.pins[s]
        for i in range(self.n_pin_over):
            if self.pin_over[i].slot == s:
                n += self.pin_over[i].extra
        if self.leaf != NULL and self.leaf.nkids[s] > 0:
            n -= 1
        return n

    def py_get(self, block_id: int, cost: int = 1, next_access: int = -1, vtime: int = 0,
               req_vtime: int = 0, position: int = 0) -> bool:
        """One libCacheSim-style ``get`` (hit, or evict-if-full then insert); True on a hit.

        A policy that wants releases gets ``on_release`` right after, as for a one-block request.
        """
        cdef Access acc
        cdef int64_t s
        acc.block_id = block_id
        acc.cost = cost
        acc.cost_exact = cost
        acc.next_access = next_access
        acc.vtime = vtime
        acc.req_vtime = req_vtime
        acc.position = position
        s = self.find(block_id)
        if s >= 0:
            self.hit(s, &acc)
            if self.wants_release:
                self.on_release(s)
            return True
        if self.n_resident >= self.capacity:
            if self.evict(&acc) == 0:
                raise RuntimeError("policy could not evict")
        s = self.insert(&acc)
        if self.wants_release:
            self.on_release(s)
        return False

    def py_evict(self, block_id: int = 0, cost: int = 1, next_access: int = -1, vtime: int = 0) -> int:
        """One eviction; returns the victim id (0 if nothing could be evicted)."""
        cdef Access acc
        acc.block_id = block_id
        acc.cost = cost
        acc.cost_exact = cost
        acc.next_access = next_access
        acc.vtime = vtime
        acc.req_vtime = vtime
        acc.position = 0
        return self.evict(&acc)

    def py_pin(self, block_id: int, delta: int = 1) -> None:
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        for _ in range(abs(delta)):
            if delta > 0:
                self._pin(s)
            else:
                self._unpin(s)

    def enable_leaf_only(self) -> None:
        """Leaf-only eviction from now on (an empty cache): see core/policy.pxd, ``leaf``."""
        self._enable_leaf()

    @property
    def leaf_only(self) -> bool:
        return self.leaf != NULL

    def held_ids(self) -> list[int]:
        """Ids of the blocks with a leaf hold (a resident child), in slot order."""
        cdef int64_t s
        if self.leaf == NULL:
            return []
        return [self.slot_id(s) for s in range(self.capacity)
                if not slot_is_free(&self.slot_ids, s) and self.leaf.nkids[s] > 0]

    def leaf_parent(self, block_id: int) -> int:
        """The prefix parent recorded for resident ``block_id`` (0: none); KeyError if absent."""
        cdef int64_t s = self.find(block_id)
        if s < 0 or self.leaf == NULL:
            raise KeyError(block_id)
        return self.leaf.parent[s]

    def py_leaf_insert(self, block_id: int, parent: int) -> None:
        """Report resident ``block_id``'s parent as the serve loop does after an insert."""
        cdef int64_t s = self.find(block_id)
        if s < 0 or self.leaf == NULL:
            raise KeyError(block_id)
        self._leaf_insert(s, parent, -2, -1)

    def py_remove(self, block_id: int) -> None:
        """Drop a resident block outside eviction (``remove``)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        self.remove(s)
