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

Memory: base 22 B/slot + queue 8 (``DList``) + retain value 8 = 38 B/slot, plus 16 B per
``n-exam`` for the scan.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, free, qsort

from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies._dlist cimport (DList, dl_init, dl_free, dl_unlink, dl_push_head,
                                         dl_unpinned_tail)
from shadow.sim.policies.random_compute cimport rng_next
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


cdef int cmp_cand(const void* a, const void* b) noexcept nogil:
    cdef const Cand* x = <const Cand*>a
    cdef const Cand* y = <const Cand*>b
    if x.metric < y.metric:
        return -1
    if x.metric > y.metric:
        return 1
    return (x.order > y.order) - (x.order < y.order)


cdef class FIFOMerge(Policy):
    """Head = newest insert; tail = oldest; ``hand`` = the next block a scan examines (-1: the
    tail); ``pend[pos:n_pend]`` = the pending victims (-1: removed since)."""

    cdef DList q
    cdef int64_t* value          # per slot: hits (freq) or last access vtime (recency)
    cdef Cand* cand
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
        self.pend = <int32_t*>malloc(n_exam * sizeof(int32_t))
        if self.value == NULL or self.cand == NULL or self.pend == NULL:
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
        cdef double r
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
        qsort(self.cand, self.n_exam, sizeof(Cand), cmp_cand)
        self.n_pend = max(self.n_exam - self.n_keep - 1, 1)
        for i in range(self.n_pend):
            self.pend[i] = self.cand[i].slot
        self.pos = 0

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        s = self._next_pending()
        if s >= 0:
            return self._leave(s)
        if self.n_resident <= self.n_exam:
            self.hand = -1
        else:
            self._scan()
            s = self._next_pending()
            if s >= 0:
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
