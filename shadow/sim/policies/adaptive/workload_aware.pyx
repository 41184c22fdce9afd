# cython: language_level=3
"""workload_aware: arXiv 2506.02634 §4.2 ("KVCache Cache in the Wild", ATC'25), as the PrefixSim
fork's ``WorkloadAware.cpp`` runs it: per-category reuse probability, offset tie-break.

The victim is the block with the smallest ``(ReuseProb, -offset)``,
``ReuseProb = exp(-lam t) (1 - exp(-lam life))``, ``lam = 1 / mean_gap_w``, ``t = now -
last_access``, ``w`` the block's category (the ``--category`` fold of the trace's type and turn
that ``set_request_ctx`` carries).  ``mean_gap_w`` and ``life`` are EWMAs (weight 0.05, prior 1e6)
of the reuse gaps ``on_request`` sees (a resident block of the request, ``gap > 0``): the block's
category's and everyone's.  The clock is the request's arrival seconds (its ``vtime`` when it has
none), never moving backwards.

Structure: one LRU list per category (the front is its only candidate: ``ReuseProb`` falls with
``t``), a binary min-heap over the categories' candidates keyed by ``(ReuseProb, -offset, seq)``,
``seq`` a counter stamped on each key as it is computed.  The heap is rebuilt (categories in
first-seen order) at the first eviction after anything changed (a request's context, its
``on_request``, an insert or removal, the pinned count); within a run of evictions only the
victim's category is re-keyed, with its next candidate.  ``on_request`` moves the request's reused
blocks to the back of their lists in prefix order, inserts append in access order (the fork's
order, kept: docs/policies/adaptive.md).

Pins: honoured.  A category's candidate is its first unpinned block from the front (the walk
resumes after the last victim within a run of evictions); if no category has one, the smallest
``(ReuseProb, -offset)`` over the fronts is taken, ties to the first-seen category (best effort).

Memory: base 22 B/slot + category 4 + offset 4 + last access 8 + list links 8 = 46 B/slot, plus
60 B a category.  The category table grows (doubling) when a new category arrives, in
``set_request_ctx``: a failed growth files the request's blocks under category slot 0 and sets
``nomem``.
"""

from libc.stdint cimport int64_t, int32_t, INT32_MAX
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport exp

from shadow.sim.core.policy cimport Policy, Access, ArrivalCtx, RequestCtx
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="per-category reuse probability exp(-t/mean_gap)(1-exp(-life/mean_gap)), "
                "EWMA-fitted online, deeper offset first on ties (arXiv 2506.02634 §4.2)",
    family="adaptive",
    weight=2.0,
)

# EWMA weight of a new reuse gap (the fork's kEwmaAlpha); a category's mean gap (and ``life``)
# before any reuse (the fork's kDefaultMeanGap)
cdef double EWMA_ALPHA = 0.05
cdef double PRIOR_MEAN_GAP = 1.0e6

cdef enum:
    FIRST_CATEGORIES = 16


cdef struct Category:
    int64_t category      # the fold value
    double mean_gap
    int32_t head          # least recent (the front), -1 empty
    int32_t tail          # most recent
    int32_t cand          # candidate slot while the heap is built, -1 none
    int32_t hpos          # index in the heap, -1 not in it
    double prob           # the candidate's key
    int64_t negoff
    int64_t seq


cdef class WorkloadAware(Policy):
    """See the module docstring.  Invariants: every resident slot is on exactly the list of
    ``cat[slot]``; ``heap[0 .. n_heap)`` is a min-heap of category indices on (prob, negoff,
    seq) with ``cats[heap[i]].hpos == i``; while ``built``, a category in the heap has a ``cand``
    that is its first unpinned block from the front (as of ``built_pinned``)."""
    cdef int32_t* cat
    cdef int32_t* off
    cdef double* last
    cdef int32_t* prev
    cdef int32_t* nxt
    cdef Category* cats
    cdef int32_t* heap
    cdef int64_t n_cats, cap_cats, n_heap
    cdef int32_t cur
    cdef readonly double now
    cdef readonly double life
    cdef int64_t seq
    cdef bint built
    cdef int64_t built_pinned
    cdef readonly int64_t n_arrivals     # set_request_ctx calls
    cdef readonly int64_t n_untimed      # of them without an arrival time
    cdef readonly int64_t n_categorised  # of them with a category other than 0

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        cdef int64_t n = max(capacity, 1)
        self.cat = <int32_t*>malloc(n * sizeof(int32_t))
        self.off = <int32_t*>malloc(n * sizeof(int32_t))
        self.last = <double*>malloc(n * sizeof(double))
        self.prev = <int32_t*>malloc(n * sizeof(int32_t))
        self.nxt = <int32_t*>malloc(n * sizeof(int32_t))
        self.cats = <Category*>malloc(FIRST_CATEGORIES * sizeof(Category))
        self.heap = <int32_t*>malloc(FIRST_CATEGORIES * sizeof(int32_t))
        if (self.cat == NULL or self.off == NULL or self.last == NULL or self.prev == NULL
                or self.nxt == NULL or self.cats == NULL or self.heap == NULL):
            raise MemoryError(f"cannot allocate a workload_aware cache of {capacity} slots")
        self.cap_cats = FIRST_CATEGORIES
        self.n_cats = 0
        self.n_heap = 0
        self.cur = -1
        self.now = 0.0
        self.life = PRIOR_MEAN_GAP
        self.seq = 0
        self.built = False
        self.n_arrivals = 0
        self.n_untimed = 0
        self.n_categorised = 0
        self.wants_request_ctx = True

    def __dealloc__(self):
        free(self.cat)
        free(self.off)
        free(self.last)
        free(self.prev)
        free(self.nxt)
        free(self.cats)
        free(self.heap)

    # ---- categories ----

    cdef int32_t _category(self, int64_t category) noexcept nogil:
        """Index of ``category``, added (first-seen order) if new; 0 if the table cannot grow."""
        cdef int64_t i
        cdef Category* c2
        cdef int32_t* h2
        for i in range(self.n_cats):
            if self.cats[i].category == category:
                return <int32_t>i
        if self.n_cats == self.cap_cats:
            # NOTE: a new category (rare: a handful per trace) grows the table; both arrays or
            # neither, so every index stays in bounds.
            c2 = <Category*>realloc(self.cats, 2 * self.cap_cats * sizeof(Category))
            if c2 == NULL:
                self.nomem = 1
                return 0
            self.cats = c2
            h2 = <int32_t*>realloc(self.heap, 2 * self.cap_cats * sizeof(int32_t))
            if h2 == NULL:
                self.nomem = 1
                return 0
            self.heap = h2
            self.cap_cats *= 2
        i = self.n_cats
        self.n_cats += 1
        self.cats[i].category = category
        self.cats[i].mean_gap = PRIOR_MEAN_GAP
        self.cats[i].head = -1
        self.cats[i].tail = -1
        self.cats[i].cand = -1
        self.cats[i].hpos = -1
        return <int32_t>i

    # ---- per-category lists ----

    cdef inline void _append(self, int32_t c, int64_t s) noexcept nogil:
        cdef Category* q = &self.cats[c]
        self.prev[s] = q.tail
        self.nxt[s] = -1
        if q.tail >= 0:
            self.nxt[q.tail] = <int32_t>s
        else:
            q.head = <int32_t>s
        q.tail = <int32_t>s

    cdef inline void _unlink(self, int32_t c, int64_t s) noexcept nogil:
        cdef Category* q = &self.cats[c]
        cdef int32_t p = self.prev[s], n = self.nxt[s]
        if p >= 0:
            self.nxt[p] = n
        else:
            q.head = n
        if n >= 0:
            self.prev[n] = p
        else:
            q.tail = p

    cdef inline int32_t _unpinned_from(self, int32_t s) noexcept nogil:
        while s >= 0 and self.pins[s] > 0:
            s = self.nxt[s]
        return s

    # ---- keys and the heap over the categories ----

    cdef inline double _prob(self, int64_t s) noexcept nogil:
        cdef double lam = 1.0 / self.cats[self.cat[s]].mean_gap
        return exp(-lam * (self.now - self.last[s])) * (1.0 - exp(-lam * self.life))

    cdef inline void _key(self, int32_t c, int32_t s) noexcept nogil:
        cdef Category* q = &self.cats[c]
        self.seq += 1
        q.cand = s
        q.prob = self._prob(s)
        q.negoff = -<int64_t>self.off[s]
        q.seq = self.seq

    cdef inline bint _less(self, int32_t a, int32_t b) noexcept nogil:
        cdef const Category* x = &self.cats[a]
        cdef const Category* y = &self.cats[b]
        if x.prob != y.prob:
            return x.prob < y.prob
        if x.negoff != y.negoff:
            return x.negoff < y.negoff
        return x.seq < y.seq

    cdef void _place(self, int64_t i, int32_t c) noexcept nogil:
        """Put category ``c`` at hole ``i`` and restore the heap (either direction)."""
        cdef int64_t parent, child, n = self.n_heap
        while i > 0:
            parent = (i - 1) >> 1
            if not self._less(c, self.heap[parent]):
                break
            self.heap[i] = self.heap[parent]
            self.cats[self.heap[i]].hpos = <int32_t>i
            i = parent
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and self._less(self.heap[child + 1], self.heap[child]):
                child += 1
            if not self._less(self.heap[child], c):
                break
            self.heap[i] = self.heap[child]
            self.cats[self.heap[i]].hpos = <int32_t>i
            i = child
        self.heap[i] = c
        self.cats[c].hpos = <int32_t>i

    cdef void _rebuild(self) noexcept nogil:
        cdef int64_t c
        cdef int32_t s
        self.n_heap = 0
        for c in range(self.n_cats):
            self.cats[c].hpos = -1
            self.cats[c].cand = -1
            s = self._unpinned_from(self.cats[c].head)
            if s >= 0:
                self._key(<int32_t>c, s)
                self.n_heap += 1
                self._place(self.n_heap - 1, <int32_t>c)
        self.built = True
        self.built_pinned = self.n_pinned

    # ---- the policy ----

    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil:
        cdef double t = rctx.timestamp_s if rctx.timestamp_s >= 0 else <double>rctx.vtime
        self.n_arrivals += 1
        self.n_untimed += rctx.timestamp_s < 0
        self.n_categorised += rctx.category != 0
        if t > self.now:
            self.now = t
        self.cur = self._category(rctx.category)
        self.built = False

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        cdef int64_t i, s
        cdef int32_t c
        cdef double gap
        for i in range(ctx.n_blocks):
            s = self.find(ctx.block_ids[i])
            if s < 0:
                continue
            gap = self.now - self.last[s]
            if gap > 0.0:
                c = self.cat[s]
                self.cats[c].mean_gap = ((1.0 - EWMA_ALPHA) * self.cats[c].mean_gap
                                         + EWMA_ALPHA * gap)
                self.life = (1.0 - EWMA_ALPHA) * self.life + EWMA_ALPHA * gap
                self._unlink(c, s)
                self._append(c, s)
            self.last[s] = self.now
        self.built = False

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        pass

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t s
        if self.cur < 0:
            self.cur = self._category(0)      # no request context yet: one class
        s = self._take_slot(acc.block_id)
        self.cat[s] = self.cur
        self.off[s] = <int32_t>(acc.position if acc.position < INT32_MAX else INT32_MAX)
        self.last[s] = self.now
        self._append(self.cur, s)
        self.built = False
        return s

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t c, s, n, best = -1, bc = -1
        cdef int64_t i
        cdef double p, bp = 0.0
        if self.n_resident == 0:
            return 0
        if not self.built or self.built_pinned != self.n_pinned:
            self._rebuild()
        if self.n_heap > 0:
            c = self.heap[0]
            s = self.cats[c].cand
            n = self._unpinned_from(self.nxt[s])
            self._unlink(c, s)
            if n >= 0:
                self._key(c, n)
                self._place(0, c)
            else:
                self.cats[c].hpos = -1
                self.cats[c].cand = -1
                self.n_heap -= 1
                if self.n_heap > 0:
                    self._place(0, self.heap[self.n_heap])
            return self._drop_slot(s)
        # every resident block is pinned: the plain fronts, ties to the first-seen category
        for i in range(self.n_cats):
            s = self.cats[i].head
            if s < 0:
                continue
            p = self._prob(s)
            if best < 0 or p < bp or (p == bp and self.off[s] > self.off[best]):
                best, bc, bp = s, <int32_t>i, p
        self._unlink(bc, best)
        self.built = False
        return self._drop_slot(best)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._unlink(self.cat[slot], slot)
        self.built = False
        self._drop_slot(slot)

    # ---- what the run fell back to ----

    def trace_notes(self) -> list[str]:
        """One line per fallback the requests served so far forced (``shadow simulate`` warns)."""
        out = []
        if self.n_arrivals and not self.n_categorised:
            out.append("workload_aware: no request has a category (the trace has no types or "
                       "turns, or --category none): one class, ordered by recency with the "
                       "fork's list order")
        if self.n_untimed:
            out.append(f"workload_aware: {self.n_untimed} of {self.n_arrivals} requests have no "
                       f"arrival time: their clock is the block count before them")
        return out

    # ---- tests ----

    def py_arrive(self, double timestamp_s, int64_t category=0, int64_t vtime=0,
                  int64_t n_blocks=0) -> None:
        """``set_request_ctx`` with this arrival (tests)."""
        cdef ArrivalCtx a
        a.timestamp_s = timestamp_s
        a.category = category
        a.session_id = -1
        a.session_next_req = -1
        a.n_blocks = n_blocks
        a.vtime = vtime
        self.set_request_ctx(&a)

    def py_record(self, ids) -> None:
        """``on_request`` with these block ids in prefix order (tests)."""
        cdef RequestCtx ctx
        cdef int64_t[::1] arr = _ids(ids)
        ctx.block_ids = &arr[0] if arr.shape[0] else NULL
        ctx.n_blocks = arr.shape[0]
        ctx.timestamp_s = self.now
        ctx.req_vtime = 0
        ctx.vtime = 0
        self.on_request(&ctx)

    def mean_gaps(self) -> dict[int, float]:
        """Category -> its fitted mean gap, in first-seen order (tests)."""
        cdef int64_t i
        return {self.cats[i].category: self.cats[i].mean_gap for i in range(self.n_cats)}

    def lists(self) -> dict[int, list[int]]:
        """Category -> its resident ids from the front (next candidate) to the back (tests)."""
        cdef int64_t i
        cdef int32_t s
        out = {}
        for i in range(self.n_cats):
            row = []
            s = self.cats[i].head
            while s >= 0:
                row.append(self.slot_id(s))
                s = self.nxt[s]
            out[self.cats[i].category] = row
        return out


def _ids(ids):
    import numpy as np
    return np.ascontiguousarray(np.asarray(list(ids), dtype=np.int64))


def make(capacity: int, params: dict) -> WorkloadAware:
    return WorkloadAware(capacity)
