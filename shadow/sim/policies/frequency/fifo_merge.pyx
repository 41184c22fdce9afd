# cython: language_level=3
"""fifo_merge: a FIFO queue whose eviction examines a window of ``n-exam`` blocks, keeps the
``n-keep`` most valuable in place and evicts the rest one by one (libCacheSim ``FIFO_Merge``,
libCacheSim/cache/eviction/FIFO_Merge.c: Segcache's merge-based FIFO, without segments).

Order: inserts go to the head of one queue; a hit changes no position, only the block's retain
value: its hit count (``retain-policy=freq``, 0 on insert, +1 per hit) or its last access vtime
(``recency``).  A hand (libCacheSim's ``next_to_exam``) walks from the tail towards the head and
wraps from the head back to the tail.  An eviction:

1. takes the next of the *pending* victims of the last scan, if any is left;
2. else, with at most ``n-exam`` resident blocks, evicts the tail (plain FIFO) and resets the hand
   to the tail;
3. else scans: the ``n-exam`` blocks from the hand on (the hand then points past them) are ranked
   by retain value ascending, ties by scan order; the lowest is evicted now and the next ones up to
   ``max(n-exam - n-keep - 1, 1)`` in all become the pending victims.  NOTE: libCacheSim evicts
   ``n-exam - n-keep - 1`` (49 of 100 by default), not ``n-exam - n-keep``: its 50th call finds the
   pending list spent and scans again; kept as it is.

``freq`` values are ``1e6 * (hits + r)`` with ``r = (draw % 1000) / 10000``, one draw per examined
block in scan order (libCacheSim's tie breaker, its ``freq_metric``), drawn from splitmix64
(``seed``; the reference makes the same draws; libCacheSim's own ``next_rand`` differs).  ``recency``
ranks by the last access vtime, the order of libCacheSim's ``1e12 / (n_req - last)``.
libCacheSim's ``belady`` and ``none`` retain policies are refused: the first reads the future (a
variant of belady, not this policy's place), the second aborts in libCacheSim.

Pins: honoured, strictly.  A pending victim that is pinned when its turn comes is passed and stays
resident (it leaves the pending list); a scan evicts its lowest unpinned pending candidate; when
none is left (every candidate pinned) and in step 2, the oldest unpinned block from the tail is
evicted, and only with every resident block pinned the tail itself (best effort).

Memory: base 22 B/slot + queue 8 (``DList``) + retain value 8 = 38 B/slot, plus 36 B per
``n-exam`` for the scan (candidates, their sort buffer, the pending list).
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, free

from shadow.sim.core.idtable cimport SHADOW_PREFETCH, sids_addr, slotmap_prefetch
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_unlink, dl_push_head,
                                         dl_unpinned_tail)
from shadow.sim.policies.cost_aware.random_compute cimport rng_next
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="FIFO evicting the least valuable of each scanned window of n-exam, keeping "
                "n-keep (libCacheSim FIFO_Merge, Segcache)",
    family="frequency",
    defaults="n-exam=100,n-keep=50,retain-policy=freq,seed=1",
    strict_pins=True,
    weight=1.5,
)

#: the largest window accepted
MAX_EXAM = 1 << 24

RETAIN_POLICIES = {"freq": True, "frequency": True, "recency": False}


cdef struct Cand:
    double metric
    int32_t order       # scan order: the tie breaker (a stable ranking)
    int32_t slot


#: the packed scan's limits: a window of at most 2**KEY_ORDER_BITS blocks, hit counts below
#: 2**30 (then ``1e6 * (hits + r)`` orders exactly as (hits, r) does: ``hits + r`` keeps
#: 2**-22 of resolution, finer than r's steps of 1e-4), last-access vtimes below 2**56
DEF KEY_ORDER_BITS = 7
DEF KEY_R_BITS = 10


cdef void sort_keys(uint64_t* a, uint64_t* tmp, int64_t n) noexcept nogil:
    """Sort ``a[0:n]``, given in scan order (each key's low ``KEY_ORDER_BITS`` are its index),
    ascending: a least-significant-digit radix sort of the bits above the index, 8 at a time
    through ``tmp``, stable, so equal values keep scan order (the index digit needs no pass);
    only as many passes as the keys' highest set bit needs (2 while hits < 64).  Windows under
    32 blocks sort by insertion."""
    cdef uint64_t top = 0
    cdef int64_t i, shift = KEY_ORDER_BITS
    cdef int64_t count[256]
    cdef int64_t d, run, c
    cdef uint64_t* src = a
    cdef uint64_t* dst = tmp
    cdef uint64_t* t
    cdef uint64_t x
    cdef int64_t j
    if n < 32:
        # NOTE: a radix pass costs its 256 counters: small windows sort by insertion (the keys
        # are distinct: their index bits)
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return
    for i in range(n):
        top |= a[i]
    top >>= KEY_ORDER_BITS
    while top:
        for d in range(256):
            count[d] = 0
        for i in range(n):
            count[(src[i] >> shift) & 255] += 1
        run = 0
        for d in range(256):
            c = count[d]
            count[d] = run
            run += c
        for i in range(n):
            d = (src[i] >> shift) & 255
            dst[count[d]] = src[i]
            count[d] += 1
        t = src
        src = dst
        dst = t
        shift += 8
        top >>= 8
    if src != a:
        for i in range(n):
            a[i] = src[i]


cdef void sort_cands(Cand* a, Cand* tmp, int64_t n) noexcept nogil:
    """Sort ``a[0:n]`` by metric, stably (so equal metrics keep scan order, libCacheSim's tie
    rule): a bottom-up merge sort through ``tmp`` (n entries).  NOTE: not qsort: its comparison
    through a function pointer was most of a scan's cost."""
    cdef int64_t width = 1, lo, mid, hi, i, j, k
    cdef Cand* src = a
    cdef Cand* dst = tmp
    cdef Cand* t
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if src[j].metric < src[i].metric:
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
            lo = hi
        t = src
        src = dst
        dst = t
        width *= 2
    if src != a:
        for i in range(n):
            a[i] = src[i]


cdef class FIFOMerge(Policy):
    """Head = newest insert; tail = oldest; ``hand`` = the next block a scan examines (-1: the
    tail); ``pend[pos:n_pend]`` = the pending victims (-1: removed since)."""

    cdef DList q
    cdef int64_t* value          # per slot: hits (freq) or last access vtime (recency)
    cdef Cand* cand
    cdef Cand* cand_tmp
    cdef uint64_t* keys          # the packed scan: (value, r, scan order) per candidate
    cdef uint64_t* keys_tmp
    cdef int32_t* by_order       # the packed scan: slot of each scan position
    cdef int32_t* pend
    cdef int64_t n_pend
    cdef int64_t pos
    cdef int32_t hand
    cdef readonly int64_t n_exam
    cdef readonly int64_t n_keep
    cdef readonly bint by_freq
    cdef uint64_t rng

    def __cinit__(self, int64_t capacity, int64_t n_exam=100, int64_t n_keep=50,
                  bint by_freq=True, uint64_t seed=1, *args, **kwargs):
        if not 1 <= n_exam <= MAX_EXAM:
            raise ValueError(f"n-exam must be in 1..{MAX_EXAM}, got {n_exam}")
        if not 0 <= n_keep <= n_exam:
            raise ValueError(f"n-keep must be in 0..n-exam ({n_exam}), got {n_keep}")
        dl_init(&self.q, capacity)
        self.value = <int64_t*>malloc(max(capacity, 1) * sizeof(int64_t))
        self.cand = <Cand*>malloc(n_exam * sizeof(Cand))
        self.cand_tmp = <Cand*>malloc(n_exam * sizeof(Cand))
        self.keys = <uint64_t*>malloc(n_exam * sizeof(uint64_t))
        self.keys_tmp = <uint64_t*>malloc(n_exam * sizeof(uint64_t))
        self.by_order = <int32_t*>malloc(n_exam * sizeof(int32_t))
        self.pend = <int32_t*>malloc(n_exam * sizeof(int32_t))
        if self.value == NULL or self.cand == NULL or self.cand_tmp == NULL or self.pend == NULL \
                or self.keys == NULL or self.keys_tmp == NULL or self.by_order == NULL:
            raise MemoryError("cannot allocate fifo_merge's arrays")
        self.n_exam = n_exam
        self.n_keep = n_keep
        self.by_freq = by_freq
        self.rng = seed
        self.hand = -1
        self.n_pend = 0
        self.pos = 0

    def __dealloc__(self):
        dl_free(&self.q)
        free(self.value)
        free(self.cand)
        free(self.cand_tmp)
        free(self.keys)
        free(self.keys_tmp)
        free(self.by_order)
        free(self.pend)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        if self.by_freq:
            self.value[slot] += 1
        else:
            self.value[slot] = acc.vtime

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        dl_push_head(&self.q, slot)
        self.value[slot] = 0 if self.by_freq else acc.vtime
        return slot

    cdef int64_t _leave(self, int32_t s) noexcept nogil:
        """Unlink ``s`` (the hand moves on to the next newer block) and free its slot."""
        if s == self.hand:
            self.hand = self.q.prev[s]
        dl_unlink(&self.q, s)
        return self._drop_slot(s)

    cdef int32_t _next_pending(self) noexcept nogil:
        """The next pending victim that is still resident and unpinned (-1: none left)."""
        cdef int32_t s
        while self.pos < self.n_pend:
            s = self.pend[self.pos]
            self.pos += 1
            if s >= 0 and self.pins[s] == 0:
                return s
        return -1

    cdef void _scan(self) noexcept nogil:
        """Rank the ``n_exam`` blocks from the hand on; the first ones become the pending victims."""
        cdef int32_t s = self.hand
        cdef int64_t i
        cdef uint64_t d, v
        cdef double r
        cdef bint packed = self.n_exam <= (1 << KEY_ORDER_BITS)
        if packed:
            # NOTE: the window as integer keys (value, r's draw % 1000, scan order): their order
            # is the (metric, scan order) order, and an integer sort merges without branches
            for i in range(self.n_exam):
                if s < 0:
                    s = self.q.tail
                v = <uint64_t>self.value[s]
                if self.by_freq:
                    d = rng_next(&self.rng) % 1000
                    if v >= (<uint64_t>1 << 30):
                        packed = False
                    self.keys[i] = (((v << KEY_R_BITS) | d) << KEY_ORDER_BITS) | <uint64_t>i
                else:
                    if v >= (<uint64_t>1 << 56):
                        packed = False
                    self.keys[i] = (v << KEY_ORDER_BITS) | <uint64_t>i
                self.by_order[i] = s
                s = self.q.prev[s]
            if not packed:
                # NOTE: a value too large to pack (never on real traces): rank as doubles, with
                # the draws already taken (kept in the keys)
                for i in range(self.n_exam):
                    s = self.by_order[i]
                    d = (self.keys[i] >> KEY_ORDER_BITS) & ((1 << KEY_R_BITS) - 1)
                    self.cand[i].metric = 1.0e6 * (<double>self.value[s] + <double>d / 10000.0) \
                        if self.by_freq else <double>self.value[s]
                    self.cand[i].order = <int32_t>i
                    self.cand[i].slot = s
                s = self.q.prev[self.by_order[self.n_exam - 1]] if self.n_exam else self.hand
        else:
            for i in range(self.n_exam):
                if s < 0:
                    s = self.q.tail
                if self.by_freq:
                    r = <double>(rng_next(&self.rng) % 1000) / 10000.0
                    self.cand[i].metric = 1.0e6 * (<double>self.value[s] + r)
                else:
                    self.cand[i].metric = <double>self.value[s]
                self.cand[i].order = <int32_t>i
                self.cand[i].slot = s
                s = self.q.prev[s]
        self.hand = s
        self.n_pend = max(self.n_exam - self.n_keep - 1, 1)
        if packed:
            sort_keys(self.keys, self.keys_tmp, self.n_exam)
            for i in range(self.n_pend):
                self.pend[i] = self.by_order[self.keys[i] & ((1 << KEY_ORDER_BITS) - 1)]
        else:
            sort_cands(self.cand, self.cand_tmp, self.n_exam)
            for i in range(self.n_pend):
                self.pend[i] = self.cand[i].slot
        self.pos = 0

    cdef inline void _prefetch_pending(self) noexcept nogil:
        """Start loading what the next pending victims' evictions touch: the next one's links
        and resident-table entry, and the one after it's id and pin count.  NOTE: the pending
        victims lie anywhere in the queue; from 128k slots each eviction's reads missed."""
        cdef int32_t n
        if self.pos < self.n_pend:
            n = self.pend[self.pos]
            if n >= 0:
                SHADOW_PREFETCH(&self.q.prev[n])
                SHADOW_PREFETCH(&self.q.next[n])
                slotmap_prefetch(&self.table, self.slot_id(n))
        if self.pos + 1 < self.n_pend:
            n = self.pend[self.pos + 1]
            if n >= 0:
                SHADOW_PREFETCH(sids_addr(&self.slot_ids, n))
                SHADOW_PREFETCH(&self.pins[n])

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        s = self._next_pending()
        if s >= 0:
            self._prefetch_pending()
            return self._leave(s)
        if self.n_resident <= self.n_exam:
            self.hand = -1
        else:
            self._scan()
            s = self._next_pending()
            if s >= 0:
                self._prefetch_pending()
                return self._leave(s)
        return self._leave(dl_unpinned_tail(&self.q, self.pins))

    cdef void remove(self, int64_t slot) noexcept nogil:
        cdef int64_t i
        for i in range(self.pos, self.n_pend):
            if self.pend[i] == slot:
                self.pend[i] = -1
        self._leave(<int32_t>slot)

    def queue(self) -> list[int]:
        """Resident ids from the tail (oldest insert) to the head: hits never reorder them."""
        cdef int32_t s = self.q.tail
        cdef int64_t i
        ids = [0] * self.n_resident
        for i in range(self.n_resident):
            ids[i] = self.slot_id(s)
            s = self.q.prev[s]
        return ids

    def pending(self) -> list[int]:
        """Ids of the pending victims still to come (removed ones left out)."""
        return [self.slot_id(self.pend[i]) for i in range(self.pos, self.n_pend) if self.pend[i] >= 0]


def make(capacity: int, params: dict) -> FIFOMerge:
    policy = str(params["retain-policy"]).lower()
    if policy not in RETAIN_POLICIES:
        raise ValueError(f"retain-policy must be freq or recency, got {params['retain-policy']!r}"
                         " (libCacheSim's belady reads the future, its none aborts)")
    seed = int(params["seed"])
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in 0..2**64-1, got {seed}")
    return FIFOMerge(capacity, int(params["n-exam"]), int(params["n-keep"]),
                     RETAIN_POLICIES[policy], seed)
