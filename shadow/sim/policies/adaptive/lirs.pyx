# cython: language_level=3
"""LIRS (libCacheSim 0.3.5 ``LIRS.c``, with PrefixSim's eviction): stack S, list Q of resident
HIR blocks, non-resident HIR ids in S.

Sizes: ``H = max(1, int(hirs-ratio * C))`` resident HIR blocks, ``L = C - H`` LIR blocks.  The
rules (L1..L8, evict) are those of the reference, ``shadow/sim/reference/lirs.py``, and
docs/policies/adaptive.md, "lirs":

* hit: LIR -> S's top, prune (L1); resident HIR in S -> S's top, out of Q, demote while the LIR
  set is full, becomes LIR (L2); resident HIR not in S -> Q's MRU end, demote while the LIR set is
  full, onto S's top as HIR (L3).
* insert: a non-resident HIR id in S -> S's top, demote while full, LIR (L4); a new id -> S's
  top, LIR while the LIR set has room, else HIR at Q's MRU end (L5).
* demote (L6): S's bottom LIR block goes to Q's MRU end as HIR; no eviction (Q may pass H until
  the next evictions).  Prune (L7): HIR entries leave S's bottom.  Stack limit (L8): at most 2C
  entries in S, the oldest non-resident ids leaving first.
* evict: Q's first unpinned block from its LRU end; its id stays in S (non-resident) if it was
  there.  No unpinned block in Q: LIR blocks are demoted until an unpinned one lands in Q.

Pins: honoured, strictly: only ``evict`` removes a block, and it takes a pinned one only when
every resident block is pinned (each LIR block has then been demoted into Q).

Structures: S is a :c:type:`GhostRing` of ids (a move to the top leaves a tombstone; its bottom is
the oldest live entry), so non-resident ids need no slot; a resident id's status is a flag byte
of its slot (an id in S that is not resident is a non-resident HIR); Q is a :c:type:`DList` over
slots; the non-resident ids of S, oldest first, are a second :c:type:`GhostRing` (``nh``).

Memory: base 22 B/slot + Q links 8 + flags 1 + S ring and table for 2C + 4 ids (ring 2 x 4 B,
table 2 x 4 B per id: 32 B/slot) + nh for 2C + 4 ids (13 B per id: 26 B/slot) = 89 B/slot, all
allocated up front (LIRS keeps up to 2C ids in S: libCacheSim's ``limitStack``); measured filled
and with S and nh full: docs/performance.md, "The other policies".
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access, RequestCtx, slot_is_free
from shadow.sim.core.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head, dl_prefetch_walk, LR_RING_MIN)
from shadow.sim.policies.adaptive.s3fifo cimport dl_first_unpinned
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove,
                                         gr_push, gr_pop, gr_at, gr_ids, gr_prefetch)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="LIRS: LIR stack S with non-resident HIR ids, resident-HIR list Q (libCacheSim LIRS)",
    family="adaptive",
    defaults="hirs-ratio=0.01",
    strict_pins=True,
    weight=3.5,
)

# flags of a resident slot
cdef enum:
    F_LIR = 1       # an LIR block (always in S, never in Q)
    F_INS = 2       # its id is in S
    # a resident block without F_LIR is an HIR block in Q


cdef class LIRS(Policy):
    """See the module docstring.

    Invariant: resident = LIR blocks + Q; every LIR id is in S; an id in S that is not resident
    is in ``nh`` and vice versa; ``lirs`` counts the LIR blocks.
    """

    cdef DList q
    cdef uint8_t* flags
    cdef GhostRing s
    cdef GhostRing nh
    cdef readonly int64_t lir_limit, hir_limit, lirs
    cdef bint deep_prefetch   # prefetch the next victims (a cache too large for the L2)

    def __cinit__(self, int64_t capacity, double hirs_ratio=0.01, *args, **kwargs):
        self.hir_limit = max(1, <int64_t>(hirs_ratio * capacity))
        self.lir_limit = capacity - self.hir_limit
        self.lirs = 0
        dl_init(&self.q, capacity)
        self.flags = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.flags == NULL:
            raise MemoryError(f"cannot allocate a LIRS cache of {capacity} slots")
        # NOTE: every hit of an id in S leaves a tombstone in its ring: a ring of twice the ids
        # compacts half as often as the default 1.25 (as ARC's).
        gr_init(&self.s, 2 * capacity + 4, &self.nomem, 4 * capacity + 8)
        gr_init(&self.nh, 2 * capacity + 4, &self.nomem)
        self.deep_prefetch = capacity >= LR_RING_MIN

    def __dealloc__(self):
        dl_free(&self.q)
        free(self.flags)
        gr_free(&self.s)
        gr_free(&self.nh)

    # ---- S ----

    cdef inline int64_t _bottom(self) noexcept nogil:
        """S's bottom id (0 if S is empty); passes the tombstones below it."""
        cdef GhostRing* g = &self.s
        cdef int64_t v
        while g.span > 0:
            v = gr_at(g, g.tail)
            if v != 0:
                return v
            g.tail = g.tail + 1 if g.tail + 1 < g.cap else 0
            g.span -= 1
        return 0

    cdef inline void _top(self, int64_t block_id) noexcept nogil:
        """Move ``block_id`` to S's top (push it if it is not in S)."""
        cdef int64_t pos = gr_find(&self.s, block_id)
        if pos >= 0:
            if pos == (self.s.head - 1 if self.s.head > 0 else self.s.cap - 1):
                return          # NOTE: already the top: no tombstone
            gr_remove(&self.s, pos)
        gr_push(&self.s, block_id)

    cdef inline void _nh_drop(self, int64_t block_id) noexcept nogil:
        cdef int64_t pos = gr_find(&self.nh, block_id)
        if pos >= 0:
            gr_remove(&self.nh, pos)

    cdef void _prune(self) noexcept nogil:
        """L7: while S has more than one entry and its bottom is not LIR, the bottom leaves S."""
        cdef int64_t b, slot
        while self.s.n > 1:
            b = self._bottom()
            slot = self.find(b)
            if slot >= 0:
                if self.flags[slot] & F_LIR:
                    return
                self.flags[slot] &= ~F_INS        # a resident HIR block stays in Q
            else:
                self._nh_drop(b)
            gr_pop(&self.s)

    cdef int64_t _demote(self) noexcept nogil:
        """L6 (libCacheSim ``evictLIR`` without its eviction): S's bottom LIR block goes to Q's
        MRU end as HIR; returns its slot.  The caller ensures ``lirs > 0``.

        -1 only when S has lost an LIR id (a ring push that found no memory: ``nomem`` is set and
        the run fails after this request): ``lirs`` is then set to 0, so that every "while"
        demotion ends, and no array is read out of bounds."""
        cdef int64_t slot, b
        self._prune()
        b = gr_pop(&self.s)
        slot = self.find(b) if b != 0 else -1
        if slot < 0 or not (self.flags[slot] & F_LIR):
            if slot >= 0:
                self.flags[slot] &= ~F_INS
            elif b != 0:
                self._nh_drop(b)
            self.lirs = 0
            return -1
        self.flags[slot] = 0
        self.lirs -= 1
        dl_push_head(&self.q, slot)
        self._prune()
        if self.deep_prefetch:
            self._prefetch_bottom_ahead()
        return slot

    cdef inline void _prefetch_bottom_ahead(self) noexcept nogil:
        """Start loading the resident-table and ``nh`` table entries of the id two places above
        S's bottom: demotions come in runs when a request needs more room than Q holds, and
        each demoted block is then evicted (its table entry deleted, its id pushed to ``nh``
        if still in S).  Hints only."""
        cdef int64_t pos, v
        if self.s.span > 2:
            pos = self.s.tail + 2
            if pos >= self.s.cap:
                pos -= self.s.cap
            v = gr_at(&self.s, pos)
            if v != 0:
                self.prefetch(v)
                gr_prefetch(&self.nh, v)

    cdef inline void _make_lir_room(self) noexcept nogil:
        while self.lirs + 1 > self.lir_limit and self.lirs > 0:
            self._demote()

    cdef inline void _limit_stack(self) noexcept nogil:
        """L8: at most 2C entries in S; the oldest non-resident ids go first."""
        cdef int64_t b, pos
        while self.s.n > 2 * self.capacity and self.nh.n > 0:
            b = gr_pop(&self.nh)
            pos = gr_find(&self.s, b)
            if pos >= 0:
                gr_remove(&self.s, pos)
            if self.deep_prefetch:
                self._prefetch_nh_next()

    cdef inline void _prefetch_nh_next(self) noexcept nogil:
        """Start loading the table entries (in ``nh`` and in S) of the id the next stack-limit
        pop takes: in a large cache that pop and its S removal are otherwise two waits on
        memory.  Hints only."""
        cdef int64_t pos, v
        if self.nh.span > 1:
            pos = self.nh.tail + 1
            if pos >= self.nh.cap:
                pos -= self.nh.cap
            v = gr_at(&self.nh, pos)
            if v != 0:
                gr_prefetch(&self.nh, v)
                gr_prefetch(&self.s, v)

    # ---- the policy ----

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        """Prefetch the S-table entries the request's accesses will probe."""
        cdef int64_t i
        for i in range(ctx.n_blocks):
            gr_prefetch(&self.s, ctx.block_ids[i])

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef uint8_t f = self.flags[slot]
        if f & F_LIR:                                   # L1
            self._top(acc.block_id)
            self._prune()
        elif f & F_INS:                                 # L2
            self._top(acc.block_id)
            dl_unlink(&self.q, slot)
            self._make_lir_room()
            self.flags[slot] = F_LIR | F_INS
            self.lirs += 1
        else:                                           # L3
            dl_move_head(&self.q, slot)
            self._make_lir_room()
            self._top(acc.block_id)
            self.flags[slot] = F_INS
        self._limit_stack()

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t block_id = acc.block_id, slot
        cdef int64_t pos = gr_find(&self.s, block_id)
        if pos >= 0:                                    # L4: non-resident HIR in S
            self._top(block_id)
            self._make_lir_room()
            self._nh_drop(block_id)
            slot = self._take_slot(block_id)
            self.flags[slot] = F_LIR | F_INS
            self.lirs += 1
        else:                                           # L5: a new id
            gr_push(&self.s, block_id)
            slot = self._take_slot(block_id)
            if self.lirs + 1 <= self.lir_limit:
                self.flags[slot] = F_LIR | F_INS
                self.lirs += 1
            else:
                self.flags[slot] = F_INS
                dl_push_head(&self.q, slot)
        self._limit_stack()
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t s = -1, t
        if self.n_resident == 0:
            return 0
        s = dl_first_unpinned(&self.q, self.pins)
        while s < 0 and self.lirs > 0:
            t = self._demote()
            if t >= 0 and self.pins[t] == 0:
                s = t
        if s < 0:
            s = self.q.tail          # NOTE: every resident block is pinned: best effort
            if s < 0:
                return self._any_victim()
        dl_unlink(&self.q, s)
        if self.flags[s] & F_INS:
            gr_push(&self.nh, self.slot_id(s))
        self.flags[s] = 0
        t = self._drop_slot(s)
        if self.deep_prefetch and self.q.tail >= 0:
            self._prefetch_victim(self.q.tail)
            s = dl_prefetch_walk(&self.q, &self.slot_ids, self.pins)
            if s >= 0:
                self._prefetch_victim(s)
        return t

    cdef inline void _prefetch_victim(self, int64_t s) noexcept nogil:
        """Start loading what evicting slot ``s`` (Q's LRU end) touches: its flag byte, its
        resident-table entry and its ``nh`` table entry.  Hints only."""
        cdef int64_t block_id = self.slot_id(s)
        SHADOW_PREFETCH(&self.flags[s])
        self.prefetch(block_id)
        gr_prefetch(&self.nh, block_id)

    cdef int64_t _any_victim(self) noexcept nogil:
        """The first resident slot's block, evicted: only when Q is empty and no LIR block is
        left in S, which takes a ring push that found no memory (see :meth:`_demote`)."""
        cdef int64_t s
        for s in range(self.capacity):
            if not slot_is_free(&self.slot_ids, s):
                self.flags[s] = 0        # NOTE: Q is empty, so every resident block is LIR
                return self._drop_slot(s)
        return 0

    cdef void remove(self, int64_t slot) noexcept nogil:
        cdef uint8_t f = self.flags[slot]
        cdef int64_t pos
        if f & F_INS:
            pos = gr_find(&self.s, self.slot_id(slot))
            if pos >= 0:
                gr_remove(&self.s, pos)
        if f & F_LIR:
            self.lirs -= 1
        else:
            dl_unlink(&self.q, slot)
        self.flags[slot] = 0
        self._drop_slot(slot)
        if f & F_LIR:
            self._prune()

    def queues(self) -> dict[str, list]:
        """S from its top: ``(id, status)`` with status ``"L"`` (LIR), ``"H"`` (resident HIR),
        ``"N"`` (non-resident HIR); Q and ``nh`` ids from the newest end."""
        cdef int32_t t
        out = {"s": [], "q": [], "nh": gr_ids(&self.nh)}
        for b in gr_ids(&self.s):
            slot = self.find(b)
            out["s"].append((b, "N" if slot < 0 else ("L" if self.flags[slot] & F_LIR else "H")))
        t = self.q.head
        while t >= 0:
            out["q"].append(self.slot_id(t))
            t = self.q.next[t]
        return out


def make(capacity: int, params: dict) -> LIRS:
    ratio = float(params.get("hirs-ratio", 0.01))
    if not 0.0 < ratio < 1.0:
        raise ShadowError(f"policy lirs: hirs-ratio must be in (0, 1), got {ratio}")
    return LIRS(capacity, ratio)
