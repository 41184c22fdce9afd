# cython: language_level=3
"""Session-level eviction (the PrefixSim fork's ``sessionCache.cpp``): the shared machinery.

Residency stays per block (the base table); only the victim is chosen per session.  Rules
(docs/policies/session.md; the pure-Python twin is ``reference/_session.py``):

* ``set_request_ctx`` names the arriving request's session: key ``session_id + 1``, or, with no
  session id (``-1``), a synthetic key of its own (``SYN_BASE`` + a count): each such request is
  its own session.  ``session_next_req`` ``-1`` (never) is read as INT64_MAX.
* ``on_request`` (after the allocation, PrefixSim's ``record_request``): ``now += 1``; the
  session (created if absent or a ghost: ``is_new``) claims each distinct id of the request (a
  resident block's ``claims`` + 1, taking it off the orphan list; a missing id is claimed when the
  access phase inserts it: ``n_pending``), then releases each id of its previous path (``claims``
  - 1); a block whose last claim goes is freed at once (the serve loop counts these frees in
  ``n_eviction``), or kept as an orphan while pinned.  Then the path, ``last = now``, ``nexta``,
  ``freq = min(3, freq + 1)``, ``cost_sum`` and the selector's ``_on_touch``.
* ``evict_n(n)``: unpinned orphans oldest first, then whole sessions in the selector's order
  until ``n`` blocks have gone (it may free more: all of the last session's unclaimed blocks);
  a dropped session's blocks whose claims reach 0 are freed, or kept as orphans while pinned;
  pinned orphans only when nothing unpinned is left.  ``out`` must have room for every resident
  block (``EVICT_N_OVERSHOOT``: the serve loop sizes its buffer so).
* ``evict``: exactly one block: the oldest unpinned orphan, else the first block the next dropped
  session(s) free, their other unclaimed blocks becoming orphans (they go next).

Invariants: a resident slot has ``claims > 0`` or is on the orphan list (``claims == 0``), never
both; a live session's path holds distinct ids; ``n_live`` live records, ``n_records - n_live``
ghost records (a selector's), each key in the map exactly once.

Memory: base 22 B/slot + claims 4 + cost 4 + orphan links 8 = 38 B/slot (the serve loop's victim
buffer, 8 B/slot, on top); a live session 64 B record + 8 B per id of its latest path + about
24 B of key map (load <= 1/2, 12 B an entry) + its selector's share (docs/policies/session.md).
"""

from libc.stdint cimport int64_t, int32_t, int8_t, uint32_t, uint64_t, INT64_MAX, INT32_MAX
from libc.stdlib cimport malloc, calloc, realloc, free

from shadow.sim.core.policy cimport Policy, Access, RequestCtx, ArrivalCtx
from shadow.sim.policies._shared.dlist cimport DList, dl_init, dl_free, dl_push_tail, dl_unlink

#: synthetic session keys start here (trace session ids are below 2**62)
cdef int64_t SYN_BASE = (<int64_t>1) << 62

cdef inline uint64_t _mhash(int64_t key) noexcept nogil:
    return (<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL


cdef class SessionBase(Policy):
    """The claims, orphans, session records and drop loop of the five session policies."""

    #: evict_n may return more victims than asked (whole sessions): the serve loop gives it a
    #: victim buffer with room for every resident block
    EVICT_N_OVERSHOOT = True

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.claims = <int32_t*>calloc(max(capacity, 1), sizeof(int32_t))
        self.bcost = <int32_t*>calloc(max(capacity, 1), sizeof(int32_t))
        if self.claims == NULL or self.bcost == NULL:
            raise MemoryError(f"cannot allocate claims for {capacity} slots")
        dl_init(&self.orphans, max(capacity, 1))
        self.sess_cap = 64
        self.sess = <Sess*>calloc(self.sess_cap, sizeof(Sess))
        self.mmask = 127
        self.mkeys = <int64_t*>calloc(self.mmask + 1, sizeof(int64_t))
        self.mvals = <int32_t*>calloc(self.mmask + 1, sizeof(int32_t))
        self.tmp_cap = 256
        self.tmp = <int64_t*>malloc(self.tmp_cap * sizeof(int64_t))
        self.dmask = 511
        self.dkeys = <int64_t*>calloc(self.dmask + 1, sizeof(int64_t))
        self.dgen = <uint32_t*>calloc(self.dmask + 1, sizeof(uint32_t))
        if (self.sess == NULL or self.mkeys == NULL or self.mvals == NULL or self.tmp == NULL
                or self.dkeys == NULL or self.dgen == NULL):
            raise MemoryError("cannot allocate the session tables")
        self._chain_free(0)
        self.dcur = 0
        self.cur_key = 0
        self.cur_next = INT64_MAX
        self.pending_owner = -1
        self.wants_request_ctx = True

    def __dealloc__(self):
        cdef int64_t i
        if self.sess != NULL:
            for i in range(self.sess_cap):
                free(self.sess[i].path)
        free(self.sess)
        free(self.claims)
        free(self.bcost)
        dl_free(&self.orphans)
        free(self.mkeys)
        free(self.mvals)
        free(self.tmp)
        free(self.dkeys)
        free(self.dgen)

    cdef void _chain_free(self, int64_t start) noexcept nogil:
        """Link records ``start .. sess_cap-1`` (fresh, zeroed) into the free list."""
        cdef int64_t i
        for i in range(self.sess_cap - 1, start - 1, -1):
            self.sess[i].key = 0
            self.sess[i].lst = -1
            self.sess[i].next = self.sess_free if i < self.sess_cap - 1 else -1
            self.sess_free = <int32_t>i

    # ---- the selector's hooks (a subclass overrides them) ----

    cdef int32_t _select(self) noexcept nogil:
        return -1

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        pass

    cdef void _on_removed(self, int32_t s) noexcept nogil:
        pass

    cdef void _forget(self, int32_t s) noexcept nogil:
        """Free record ``s`` (not live, in no list) and its key."""
        self._map_del(self.sess[s].key)
        free(self.sess[s].path)
        self.sess[s].path = NULL
        self.sess[s].pcap = 0
        self.sess[s].plen = 0
        self.sess[s].key = 0
        self.sess[s].lst = -1
        self.sess[s].next = self.sess_free
        self.sess_free = s
        self.n_records -= 1

    # ---- session key map (linear probing, backward-shift deletion) ----

    cdef int32_t _map_get(self, int64_t key) noexcept nogil:
        cdef uint64_t i = (_mhash(key) >> 20) & self.mmask
        while self.mkeys[i] != 0:
            if self.mkeys[i] == key:
                return self.mvals[i]
            i = (i + 1) & self.mmask
        return -1

    cdef int _map_put(self, int64_t key, int32_t val) noexcept nogil:
        """Insert an absent ``key``; 0, or -1 (``nomem``) if the table could not grow."""
        cdef uint64_t i, j, size, mask
        cdef int64_t* nk
        cdef int32_t* nv
        if (self.mcount + 1) * 2 > <int64_t>(self.mmask + 1):
            size = (self.mmask + 1) * 2
            mask = size - 1
            nk = <int64_t*>calloc(size, sizeof(int64_t))
            nv = <int32_t*>calloc(size, sizeof(int32_t))
            if nk == NULL or nv == NULL:
                free(nk)
                free(nv)
                self.nomem = 1
                return -1
            for j in range(self.mmask + 1):
                if self.mkeys[j] != 0:
                    i = (_mhash(self.mkeys[j]) >> 20) & mask
                    while nk[i] != 0:
                        i = (i + 1) & mask
                    nk[i] = self.mkeys[j]
                    nv[i] = self.mvals[j]
            free(self.mkeys)
            free(self.mvals)
            self.mkeys = nk
            self.mvals = nv
            self.mmask = mask
        i = (_mhash(key) >> 20) & self.mmask
        while self.mkeys[i] != 0:
            i = (i + 1) & self.mmask
        self.mkeys[i] = key
        self.mvals[i] = val
        self.mcount += 1
        return 0

    cdef void _map_del(self, int64_t key) noexcept nogil:
        cdef uint64_t i = (_mhash(key) >> 20) & self.mmask, j, h
        while self.mkeys[i] != key:
            if self.mkeys[i] == 0:
                return
            i = (i + 1) & self.mmask
        # NOTE: backward shift: move each later entry of the run whose home is not in (i, j]
        j = i
        while True:
            j = (j + 1) & self.mmask
            if self.mkeys[j] == 0:
                break
            h = (_mhash(self.mkeys[j]) >> 20) & self.mmask
            if (j > i and (h <= i or h > j)) or (j < i and (h <= i and h > j)):
                self.mkeys[i] = self.mkeys[j]
                self.mvals[i] = self.mvals[j]
                i = j
        self.mkeys[i] = 0
        self.mcount -= 1

    cdef int32_t _new_record(self, int64_t key) noexcept nogil:
        """A fresh record for ``key`` (not live, in no list), or -1 (``nomem``)."""
        cdef int32_t s
        cdef Sess* ns
        cdef int64_t old
        if self.sess_free < 0:
            old = self.sess_cap
            if old * 2 > INT32_MAX:
                self.nomem = 1
                return -1
            ns = <Sess*>realloc(self.sess, old * 2 * sizeof(Sess))
            if ns == NULL:
                self.nomem = 1
                return -1
            self.sess = ns
            self.sess_cap = old * 2
            for s in range(old, old * 2):
                self.sess[s].path = NULL
                self.sess[s].pcap = 0
                self.sess[s].plen = 0
            self._chain_free(old)
        s = self.sess_free
        if self._map_put(key, s) < 0:
            return -1
        self.sess_free = self.sess[s].next
        self.sess[s].key = key
        self.sess[s].lst = -1
        self.sess[s].live = 0
        self.sess[s].prev = -1
        self.sess[s].next = -1
        self.sess[s].pos = -1
        self.sess[s].freq = 0
        self.sess[s].last = 0
        self.sess[s].cost_sum = 0
        self.sess[s].nexta = INT64_MAX
        self.n_records += 1
        return s

    cdef int64_t _distinct(self, const int64_t* ids, int64_t n) noexcept nogil:
        """Copy the distinct ids of ``ids`` (first occurrences, in order) to ``tmp``; how many,
        or -1 (``nomem``)."""
        cdef int64_t i, m = 0, cap
        cdef uint64_t j, size
        cdef bint sorted_unique = True
        cdef int64_t* nt
        if n > self.tmp_cap:
            cap = max(n, 2 * self.tmp_cap)
            nt = <int64_t*>realloc(self.tmp, cap * sizeof(int64_t))
            if nt == NULL:
                self.nomem = 1
                return -1
            self.tmp = nt
            self.tmp_cap = cap
        for i in range(1, n):
            if ids[i] <= ids[i - 1]:
                sorted_unique = False
                break
        if sorted_unique:
            for i in range(n):
                self.tmp[i] = ids[i]
            return n
        if <uint64_t>(2 * n) > self.dmask + 1:
            size = self.dmask + 1
            while size < <uint64_t>(2 * n):
                size <<= 1
            free(self.dkeys)
            free(self.dgen)
            self.dkeys = <int64_t*>calloc(size, sizeof(int64_t))
            self.dgen = <uint32_t*>calloc(size, sizeof(uint32_t))
            if self.dkeys == NULL or self.dgen == NULL:
                free(self.dkeys)
                free(self.dgen)
                self.dkeys = <int64_t*>calloc(1, sizeof(int64_t))
                self.dgen = <uint32_t*>calloc(1, sizeof(uint32_t))
                self.dmask = 0
                self.nomem = 1
                return -1
            self.dmask = size - 1
            self.dcur = 0
        self.dcur += 1
        if self.dcur == 0:
            for j in range(self.dmask + 1):
                self.dgen[j] = 0
            self.dcur = 1
        for i in range(n):
            j = (_mhash(ids[i]) >> 20) & self.dmask
            while self.dgen[j] == self.dcur and self.dkeys[j] != ids[i]:
                j = (j + 1) & self.dmask
            if self.dgen[j] != self.dcur:
                self.dgen[j] = self.dcur
                self.dkeys[j] = ids[i]
                self.tmp[m] = ids[i]
                m += 1
        return m

    # ---- block side ----

    cdef int64_t _unclaimed(self, int64_t slot, int64_t* out, int64_t k,
                            int64_t limit) noexcept nogil:
        """``slot``'s last claim went: free it (into ``out[k]``; ``out`` NULL: not reported), or
        keep it as an orphan while pinned or once ``limit`` (> 0) victims are out; the new k."""
        cdef int64_t bid
        if self.pins[slot] > 0 or (limit > 0 and k >= limit):
            dl_push_tail(&self.orphans, slot)
            return k
        bid = self._drop_slot(slot)
        if out != NULL:
            out[k] = bid
        return k + 1

    cdef int64_t _drop(self, int32_t s, int64_t* out, int64_t k, int64_t limit) noexcept nogil:
        """Drop live session ``s``: its claims go (see ``_unclaimed``); then ``_on_removed``, and
        the record is freed unless the selector kept it as a ghost.  The new k."""
        cdef int64_t i, slot
        cdef Sess* S = &self.sess[s]
        for i in range(S.plen):
            slot = self.find(S.path[i])
            if slot >= 0 and self.claims[slot] > 0:
                self.claims[slot] -= 1
                if self.claims[slot] == 0:
                    k = self._unclaimed(slot, out, k, limit)
        if s == self.pending_owner:
            self.pending_owner = -1
            self.n_pending = 0
        S = &self.sess[s]
        free(S.path)
        S.path = NULL
        S.pcap = 0
        S.plen = 0
        S.live = 0
        self.n_live -= 1
        self._on_removed(s)
        # NOTE: a selector that trimmed its ghosts may have forgotten the record already
        if self.sess[s].lst < 0 and self.sess[s].key != 0:
            self._forget(s)
        return k

    # ---- the policy interface ----

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        pass

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        cdef int64_t c = acc.cost
        if c <= 0:
            c = 1
        elif c > INT32_MAX:
            c = INT32_MAX
        self.bcost[slot] = <int32_t>c
        if self.n_pending > 0:
            self.n_pending -= 1
            self.claims[slot] = 1
            if self.pending_owner >= 0:
                self.sess[self.pending_owner].cost_sum += c
        else:
            self.claims[slot] = 0
            dl_push_tail(&self.orphans, slot)
        return slot

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.claims[slot] == 0:
            dl_unlink(&self.orphans, slot)
        self.claims[slot] = 0
        self._drop_slot(slot)

    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil:
        self.cur_key = rctx.session_id + 1 if rctx.session_id >= 0 else 0
        self.cur_next = rctx.session_next_req if rctx.session_next_req >= 0 else INT64_MAX

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        cdef int64_t key, i, m, slot, cost_sum = 0, n_pend = 0
        cdef int32_t s
        cdef bint is_new
        cdef Sess* S
        cdef int64_t* np
        self.now += 1
        key = self.cur_key
        self.cur_key = 0
        if key == 0:
            self.n_synthetic += 1
            key = SYN_BASE + self.n_synthetic
        self.pending_owner = -1
        self.n_pending = 0
        m = self._distinct(ctx.block_ids, ctx.n_blocks)
        if m < 0:
            return
        s = self._map_get(key)
        if s < 0:
            s = self._new_record(key)
            if s < 0:
                return
        S = &self.sess[s]
        is_new = not S.live
        if is_new:
            S.live = 1
            S.plen = 0
            S.freq = 0
            S.cost_sum = 0
            self.n_live += 1
        if m > S.pcap:
            np = <int64_t*>malloc(max(m, 4) * sizeof(int64_t))
            if np == NULL:
                self.nomem = 1
                return
        else:
            np = NULL
        # claim the new path, then release the old one (a block in both never reaches 0)
        for i in range(m):
            slot = self.find(self.tmp[i])
            if slot >= 0:
                if self.claims[slot] == 0:
                    dl_unlink(&self.orphans, slot)
                self.claims[slot] += 1
                cost_sum += self.bcost[slot]
            else:
                n_pend += 1
        for i in range(S.plen):
            slot = self.find(S.path[i])
            if slot >= 0 and self.claims[slot] > 0:
                self.claims[slot] -= 1
                if self.claims[slot] == 0:
                    self._unclaimed(slot, NULL, 0, 0)
        if np != NULL:
            free(S.path)
            S.path = np
            S.pcap = <int32_t>max(m, 4)
        for i in range(m):
            S.path[i] = self.tmp[i]
        S.plen = <int32_t>m
        S.cost_sum = cost_sum
        S.last = self.now
        S.nexta = self.cur_next
        if S.freq < 3:
            S.freq += 1
        self.pending_owner = s
        self.n_pending = n_pend
        self._on_touch(s, is_new)

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, s, nx
        cdef int32_t v
        s = self.orphans.head
        while s >= 0 and k < n:
            nx = self.orphans.next[s]
            if self.pins[s] == 0:
                dl_unlink(&self.orphans, s)
                out[k] = self._drop_slot(s)
                k += 1
            s = nx
        while k < n:
            v = self._select()
            if v < 0:
                break
            k = self._drop(v, out, k, 0)
        while k < n and self.orphans.head >= 0:
            # NOTE: best effort: only pinned blocks are left
            s = self.orphans.head
            dl_unlink(&self.orphans, s)
            out[k] = self._drop_slot(s)
            k += 1
        return k

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t s = self.orphans.head, victim = 0
        cdef int32_t v
        while s >= 0:
            if self.pins[s] == 0:
                dl_unlink(&self.orphans, s)
                return self._drop_slot(s)
            s = self.orphans.next[s]
        while True:
            v = self._select()
            if v < 0:
                break
            if self._drop(v, &victim, 0, 1) > 0:
                return victim
        s = self.orphans.head
        if s >= 0:
            dl_unlink(&self.orphans, s)
            return self._drop_slot(s)
        return 0

    # ---- Python-level helpers (tests) ----

    def py_claims(self, block_id: int) -> int:
        """Claims on a resident block (0: an orphan); KeyError if not resident."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self.claims[s]

    def py_orphans(self) -> list[int]:
        """The orphans' ids, oldest first."""
        cdef int64_t s = self.orphans.head
        out = []
        while s >= 0:
            out.append(self.slot_id(s))
            s = self.orphans.next[s]
        return out

    def py_sessions(self) -> dict:
        """Live sessions: trace session id (synthetic: ``('syn', n)``) -> path."""
        cdef int64_t i, j
        out = {}
        for i in range(self.sess_cap):
            if self.sess[i].key != 0 and self.sess[i].live:
                k = self.sess[i].key
                name = ("syn", k - SYN_BASE) if k >= SYN_BASE else ("s", k - 1)
                out[name] = [self.sess[i].path[j] for j in range(self.sess[i].plen)]
        return out

    def trace_warning(self):
        """One line about the trace once some request had no session id (then None)."""
        if self.n_synthetic > 0:
            return ("session-level policies: requests without a session id are each their own "
                    "session (a session eviction then evicts one request's blocks)")
        return None
