# cython: language_level=3
"""The eviction-policy interface every ``shadow/sim/policies/<family>/<name>.pyx`` implements.

The base :class:`Policy` owns what every policy needs and the serve loop reads directly:

* ``capacity`` slots ``0 .. capacity-1``; ``n_resident`` of them hold a block;
* ``table``: block id -> slot for exactly the **resident** blocks, a
  :c:type:`~shadow.sim.core.idtable.SlotMap` of 4-byte entries (fingerprint, slot) at load <= 1/4 (1/3 for
  the policies whose class sets ``TABLE_PER_SLOT = 3``, in caches from 32k slots) whose
  keys are read from ``slot_ids`` (ghost entries never live here; a policy keeps ghosts in its own
  :class:`~shadow.sim.core.idtable.IdTable`);
* ``slot_ids``: a :c:type:`~shadow.sim.core.idtable.SlotIds`, the block id held by each slot, read
  with :meth:`slot_id` (or ``sids_get``); 4 B a slot while every id stored fits 32 bits, 8 B for
  good from the first that does not (:meth:`_widen_ids`); a free slot holds a link to the next
  free slot instead (see :func:`slot_is_free`);
* ``pins[slot]``: how many in-flight requests pin the block (0 when the slot is free), 16 bits;
  past ``PIN_SAT`` the rest of the count lives in a small side list (``pin_over``);
* the free slots as a stack threaded through ``slot_ids`` (``free_head``);
* ``pinbits`` (NULL unless a subclass asks for it with :meth:`_want_pinbits`): bit ``slot`` set
  iff ``pins[slot] > 0``, one bit a slot;
* ``leaf`` (NULL unless leaf-only eviction is on, :meth:`enable_leaf_only`): the prefix parent of
  each resident block (its id, and its slot when known) and the resident children of each
  resident block (``nkids``; of a parent not resident, in ``orphans``).  A resident block with a
  resident child carries a *leaf hold*: one extra count in ``pins`` (so every pin-honouring
  policy passes it over like a pinned block).  ``n_held`` counts held slots, ``n_hold_only``
  those of them no request pins; ``n_pinned - n_hold_only`` is the slots requests pin.  The
  serve loop reports each insert's parent (:meth:`_leaf_insert`); :meth:`_drop_slot` releases
  the parent's hold when its last resident child leaves.

Memory (the "base" of every policy's own "Memory:" paragraph): table 16 B a slot (12 with
``TABLE_PER_SLOT = 3``) + slot id 4 + pins 2 = 22 B a slot (18); 4 B more once an id past
2**31 - 1 has been stored (the slot ids are then 64-bit; dense trace ids never get there).

NOTE: no separate free-slot array (4 bytes a slot saved): a free slot's ``slot_ids`` entry links
to the next free slot, encoded at the very bottom of the entry's range: ``FREE_BASE + 1 + s`` for
a link to slot ``s``, ``FREE_BASE`` itself ends the list, with ``FREE_BASE`` = INT32_MIN while the
array is 32-bit (links in [INT32_MIN, -2]: a capacity is below 2**31 - 1) and INT64_MIN once it is
64-bit.  Block ids are >= 1 (trace ids are dense from 1, the live API interns) and an id outside
1 .. INT32_MAX widens the array before it is stored, so a narrow entry is negative iff it is a
link, and no ``slot_id(slot) == id`` check (narrow entries read sign-extended) can mistake a free
slot for a resident block.

Leaf holds (``leaf`` set): slot ``s`` is held iff it is resident and ``nkids[s] > 0`` (its
resident children; the children of a parent that is not resident are counted in ``orphans``);
a held slot has ``pins[s] >= 1`` of which one is the hold, never dropped by a request's unpin
(:meth:`_unpin` on a held slot with one count left is a stale request unpin: its block was
evicted and came back since, and no-ops).

Invariant: ``table`` maps id -> slot iff ``slot_id(slot) == id`` and the slot is not free; ``n_resident`` is the
number of such slots and never exceeds ``capacity``.  Only :meth:`_take_slot` and
:meth:`_drop_slot` change that set, so a subclass calls them from ``insert`` and from
``evict``/``remove``, and keeps its own order structures in per-slot arrays of its own.

Calls the serve loop makes (all ``noexcept nogil``; nothing here may raise or touch Python):

* ``find(id) -> slot | -1``: read-only, final (answers from ``table``).
* ``hit(slot, acc)``: a ``get`` that found the block.
* ``insert(acc) -> slot``: a ``get`` that missed; a free slot is guaranteed by the loop.
* ``evict(acc) -> victim id``: remove exactly one resident block.  A pin-honouring policy skips
  slots with ``pins > 0`` while an unpinned candidate exists and takes its ordinary candidate
  otherwise (best effort).  Returns 0 only if nothing at all can be evicted.
* ``evict_n(acc, n, out) -> count``: up to ``n`` evictions, victim ids written to ``out``;
  the default loops over ``evict``.
* ``remove(slot)``: drop a resident block outside eviction (live API); default drops the slot
  only, so a policy with order structures overrides it.
* ``set_request_ctx(rctx)``: once per request about to be served, at its very start: after the
  skip check (a request too large for the cache reaches no hook) and before the match and the
  allocation (PrefixSim's ``set_request_ctx``), so the victims chosen for this request can read
  its clock, class and session.  Only called when ``wants_request_ctx`` is set (a policy sets it
  in its constructor); the loop builds no context otherwise, and the inlined kinds never see it.
  A live admission later skipped because the room it needs is held has had its call.
* ``on_request(ctx)``: once per served request, after allocation and before the access phase
  (PrefixSim's ``record_request``).
* ``on_release(slot)``: the request that accessed the block released it (tail first); only
  called when ``wants_release`` is set (the ``vllm`` policy).

Out of memory mid-run: nothing above may raise, and the engine the shadow runs in must not die
of it, so no allocation failure aborts.  A policy whose allocation fails inside one of these
calls (slot ids or ring entries widened to 64 bits, a ghost ring or FIFO grown, a cost or stamp
array widened, a scratch list grown) keeps every array access in bounds, lets its state become
approximate (an id not remembered, a count saturated) and sets ``nomem`` (its rings and FIFOs
set it through the pointer they were given); the serve loop then fails the cache after that
request (``FAIL_NOMEM``), so no approximate figure is ever reported as a result.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t, uint64_t, INT64_MIN, INT32_MIN

from shadow.sim.core.idtable cimport (SlotMap, SlotIds, IdMap, sids_store_narrow, sids_get,
                                 slotmap_get, slotmap_put, slotmap_del, slotmap_prefetch)


# NOTE: pins are 16 bits (2 B/slot); a block pinned by more than PIN_SAT requests at once (never
# seen in practice) keeps PIN_SAT in ``pins`` and the excess in ``pin_over``, so counts stay exact.
cdef enum:
    PIN_SAT = 0xFFFF


cdef struct PinOver:
    int64_t slot
    int64_t extra       # pins beyond PIN_SAT, >= 1


cdef inline bint slot_is_free(const SlotIds* ids, int64_t s) noexcept nogil:
    """Whether slot ``s``'s entry is a free-list link rather than a block id."""
    # NOTE: a capacity is below 2**31, so every encoded link lies below FREE_BASE + 2**31: below
    # INT64_MIN + 2**31 (wide), below 0 (narrow, where ids are >= 1).
    if ids.wide != NULL:
        return ids.wide[s] < INT64_MIN + <int64_t>2147483648
    return ids.narrow[s] < 0


cdef struct LeafState:
    int64_t* parent        # per slot: the prefix parent id of the resident block, 0 for none
    int32_t* pslot         # per slot: the parent's slot when last known, -1 (checked: see pyx)
    int32_t* nkids         # per slot: resident blocks naming this one their parent (held iff > 0)
    int64_t pend_id        # one parent not resident and its resident children, ahead of
    int32_t pend_n         #   ``orphans`` (0: none; an id is in one of the two, never both)
    IdMap orphans          # parent id -> resident children, for (the other) parents not resident


cdef struct Access:
    int64_t block_id
    int64_t cost           # llround(cost_exact): what libCacheSim-style policies see
    double cost_exact      # the cost model's exact value (statistics use this)
    int64_t next_access    # absolute 1-based vtime of the next access to this id, -1 never
    int64_t vtime          # libCacheSim's n_req: +1 per get, counted before the get
    int64_t req_vtime      # per-request recency stamp: vtime before the request + its block count
    int64_t position       # 0-based block position in its request


cdef struct ArrivalCtx:
    # what ``set_request_ctx`` gets, before the match and the allocation of a request
    double timestamp_s          # arrival in seconds (the trace's start_time_us, else its
                                # complete_time_us, / 1e6; -1 when unknown); a double, not a counter
    int64_t category            # the request's class (--category fold of type and turn); 0 = one
                                # undifferentiated class; policies compare it for equality only
    int64_t session_id          # the trace's session id, -1 none
    int64_t session_next_req    # 1-based file-order index of the session's next request, -1 none
                                # or unknown (the trace's session_next_req, docs/lcp.md)
    int64_t n_blocks            # the request's block count
    int64_t vtime               # n_req before the request's first get


cdef struct RequestCtx:
    const int64_t* block_ids    # the request's block ids in prefix order
    int64_t n_blocks
    double timestamp_s          # arrival time in seconds (double; -1 when unknown)
    int64_t req_vtime           # same as Access.req_vtime of this request's gets
    int64_t vtime               # n_req before the request's first get


cdef class Policy:
    cdef readonly int64_t capacity
    cdef readonly int64_t n_resident
    cdef SlotMap table
    cdef SlotIds slot_ids             # slot -> block id or free link (32 or 64 bits; see above)
    cdef uint16_t* pins
    cdef uint64_t* pinbits            # NULL, or bit s set iff pins[s] > 0 (see _want_pinbits)
    cdef PinOver* pin_over            # slots pinned past PIN_SAT (rare; a short unsorted list)
    cdef int64_t n_pin_over
    cdef int64_t cap_pin_over
    cdef int64_t free_head            # first free slot, -1 when none (the rest link via slot_ids)
    cdef readonly int64_t n_pinned    # slots with pins > 0
    cdef public bint pin_enabled      # set by the loop; informational for policies
    cdef public bint wants_release    # call on_release (set by a policy that uses it)
    cdef public bint wants_request_ctx  # call set_request_ctx (set by a policy that uses it)
    cdef public bint strict_pins      # set by registry.make_policy from the module's STRICT_PINS
    cdef readonly int nomem           # 1 for good once an allocation needed mid-run failed
    cdef LeafState* leaf              # NULL unless leaf-only eviction is on (see above)
    cdef readonly int64_t n_held      # slots with a leaf hold
    cdef readonly int64_t n_hold_only # held slots that no request pins (their one pin is the hold)

    cdef inline int64_t find(self, int64_t block_id) noexcept nogil:
        return slotmap_get(&self.table, &self.slot_ids, block_id)

    cdef inline int64_t slot_id(self, int64_t slot) noexcept nogil:
        """The block id in ``slot`` (a resident slot; a free one gives its negative link)."""
        return sids_get(&self.slot_ids, slot)

    cdef inline void prefetch(self, int64_t block_id) noexcept nogil:
        """Hint that ``find(block_id)`` comes soon (no effect on the state)."""
        slotmap_prefetch(&self.table, block_id)

    cdef inline int64_t _take_slot(self, int64_t block_id) noexcept nogil:
        """Register ``block_id`` in a free slot and return the slot (the caller ensured one)."""
        cdef int64_t slot
        # NOTE: the 64-bit path (and the widening) out of line: with both inline, gcc stopped
        # inlining _take_slot into the serve loop (more instructions: docs/performance.md,
        # "Measured choices").
        if not sids_store_narrow(&self.slot_ids, block_id):
            return self._take_slot_wide(block_id)
        slot = self.free_head
        self.free_head = <int64_t>self.slot_ids.narrow[slot] - INT32_MIN - 1
        self.slot_ids.narrow[slot] = <int32_t>block_id
        self.pins[slot] = 0
        slotmap_put(&self.table, block_id, slot)
        self.n_resident += 1
        return slot

    cdef inline void _pin(self, int64_t slot) noexcept nogil:
        cdef uint16_t p = self.pins[slot]
        if p == PIN_SAT:
            self._pin_over_add(slot)
            return
        if p == 0:
            self.n_pinned += 1
            if self.pinbits != NULL:
                self.pinbits[slot >> 6] |= (<uint64_t>1) << (slot & 63)
        elif p == 1 and self.leaf != NULL and self.leaf.nkids[slot] > 0:
            self.n_hold_only -= 1         # a request pins a block held only by its leaf hold
        self.pins[slot] = p + 1

    cdef inline void _unpin(self, int64_t slot) noexcept nogil:
        cdef uint16_t p = self.pins[slot]
        if p == PIN_SAT and self.n_pin_over > 0 and self._pin_over_take(slot, False):
            return
        if p > 0:
            if p <= 2 and self.leaf != NULL and self.leaf.nkids[slot] > 0:
                if p == 1:
                    return                # the hold itself: a stale request unpin (see above)
                self.n_hold_only += 1
            self.pins[slot] = p - 1
            if p == 1:
                self.n_pinned -= 1
                if self.pinbits != NULL:
                    self.pinbits[slot >> 6] &= ~((<uint64_t>1) << (slot & 63))

    cdef inline void _drop_pins(self, int64_t slot) noexcept nogil:
        """Forget every pin of ``slot`` (its block leaves)."""
        if self.pins[slot] > 0:
            self.n_pinned -= 1
            if self.pinbits != NULL:
                self.pinbits[slot >> 6] &= ~((<uint64_t>1) << (slot & 63))
            if self.pins[slot] == PIN_SAT and self.n_pin_over > 0:
                self._pin_over_take(slot, True)
            self.pins[slot] = 0

    cdef inline int64_t _drop_slot(self, int64_t slot) noexcept nogil:
        """Unregister the block in ``slot``, free the slot, return the block id."""
        cdef int64_t block_id
        if self.slot_ids.narrow == NULL:
            return self._drop_slot_wide(slot)      # NOTE: out of line, as in _take_slot
        block_id = self.slot_ids.narrow[slot]
        if self.leaf != NULL:
            self._leaf_drop(slot)
        self._drop_pins(slot)
        slotmap_del(&self.table, &self.slot_ids, block_id, slot)
        self.slot_ids.narrow[slot] = <int32_t>(INT32_MIN + 1 + self.free_head)
        self.free_head = slot
        self.n_resident -= 1
        return block_id

    cdef int _want_pinbits(self) except -1
    cdef int _enable_leaf(self) except -1
    cdef void _leaf_insert(self, int64_t slot, int64_t parent, int64_t pslot,
                           int64_t cslot) noexcept nogil
    cdef void _leaf_drop(self, int64_t slot) noexcept nogil
    cdef void _widen_ids(self) noexcept nogil
    cdef int64_t _take_slot_wide(self, int64_t block_id) noexcept nogil
    cdef int64_t _drop_slot_wide(self, int64_t slot) noexcept nogil
    cdef void _pin_over_add(self, int64_t slot) noexcept nogil
    cdef bint _pin_over_take(self, int64_t slot, bint all_of_it) noexcept nogil
    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil
    cdef int64_t insert(self, const Access* acc) noexcept nogil
    cdef int64_t evict(self, const Access* acc) noexcept nogil
    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil
    cdef void remove(self, int64_t slot) noexcept nogil
    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil
    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil
    cdef void on_release(self, int64_t slot) noexcept nogil

