# cython: language_level=3
"""One pass of LRU stack distances over a trace's requests, as the serve loop matches them.

The LRU stack (Mattson et al., 1970) orders every block ever accessed by its last access, most
recent first.  In the serve loop an LRU cache of C blocks that skips no request holds exactly the
top C of that stack (docs/mrc.md), so a looked-up block hits at C exactly when its *stack
distance* (its 1-based position in the stack before its request) is at most C: one pass gives
the hits at every capacity.  Per request, as the loop does it:

* **match**: every looked-up block's distance is taken against the stack before the request
  (a block resident at match time counts, wherever it sits in the request);
* **access**: the request's blocks move to the top in the replay order (deepest-first: the
  block at position 0 ends on top), a duplicate id once per occurrence;
* **anonymous slots** (``--lookup vllm``: room a request holds without a block, freed after it):
  a slot is a phantom block pushed on top after the accesses and then removed, which leaves a
  *hole* where it was.  Holes keep their stack position; an access from below the shallowest hole
  above it moves that hole down to the block's old position instead of shifting every entry in
  between (a cache with a free slot fills it instead of evicting), and a first access of a block
  takes the shallowest hole anywhere.  With holes, the cache of C blocks holds the blocks among
  the top C entries, so the rule "hit iff distance <= C" still holds with distances that count
  holes (still a stack algorithm: the cache at C is inside the cache at C + 1).

Representation: each stack entry (a block's last access, or a hole) is a *time*; the entry at
time ``t`` sits at position ``live entries with time >= t``.  Times are handed out one per access
(and per anonymous slot) in order, so a block's distance is ``(now - t) - cleared(t, now)``,
where ``cleared`` counts the times of entries that have since moved (a Fenwick tree over 64-time
words of a ``cleared`` bitmap, Fenwick 1994).  When the times run out the live ones are renumbered
``0 .. live - 1`` (order kept) and the bitmap emptied: memory stays O(distinct blocks + holes).
Within a request the distances of blocks whose times are close are taken from the previous one
plus a popcount of the bitmap between them (a shared prefix was accessed at consecutive times),
so most blocks need no tree walk.

Invariants (between requests): ``n_live == now - n_cleared`` is the stack's length (distinct
blocks seen + holes); every block seen has exactly one uncleared time (``last``), every hole one
(``holes``); ``hist_*[d]`` (``d >= 1``) are the looked-up blocks at distance ``d`` (``inf_*``: never
seen before, or after a miss for the prefix counters); the prefix histograms take each block at
the largest distance up to and including it, so the first-miss rule is "hit iff that <= C".
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memset, memcpy

cimport cython

import numpy as np

from shadow.sim.core.idtable cimport (IdMap, idmap_get, idmap_put, idmap_take, idmap_init,
                                  idmap_free, shadow_big_calloc)


cdef extern from *:
    """
    static inline int shadow_popcount64(unsigned long long x) { return __builtin_popcountll(x); }
    """
    int popcount64 "shadow_popcount64"(unsigned long long x) noexcept nogil


#: Ids below this many are indexed directly (any trace's dense ids); larger ones through a hash
#: map (raw JSONL ids).  NOTE: the direct array grows with the ids it meets, up to
#: ``DIRECT_SLACK`` times the ids seen (or this floor), so raw hash values cannot blow it up.
DEF DIRECT_FLOOR = 1 << 20
DEF DIRECT_SLACK = 4
#: Times between two blocks of one request below which the distance is taken by a bitmap
#: popcount from the previous block's (16 words) rather than a tree walk.
DEF NEAR_TIMES = 1024
#: Fewest times the clock array holds (a multiple of 64).
DEF MIN_TIMES = 1 << 16
#: Live entries past which times could overflow the 31-bit values of the hash map.
DEF MAX_LIVE = 1 << 29


@cython.final
cdef class StackPass:
    """Stack distances of every looked-up block of a trace, accumulated as histograms.

    ``StackPass(deepest_first=True, weighted=False)`` (``min_times``: the smallest clock, for
    tests that renumber often; ``direct_ok=False``: every id in the hash map, whose size follows
    the ids tracked, for a sampled stack that forgets ids); :meth:`feed` serves one batch of whole
    requests (file order), :meth:`histograms` returns what was counted.  ``weighted`` also sums
    each block's cost (the cost model's exact double) per distance.
    """

    def __cinit__(self, bint deepest_first=True, bint weighted=False,
                  int64_t min_times=MIN_TIMES, bint direct_ok=True):
        self.deepest_first = deepest_first
        self.weighted = weighted
        self.direct_ok = direct_ok
        self.counting = True
        self.exact_from_req = -1
        self.pend_w = -1
        self.min_times = max(64, min_times)
        self._grow_times(self.min_times)
        self._grow_hist(1024)
        if direct_ok:
            self._grow_direct(1024)
        self.dist_cap = 0

    def __dealloc__(self):
        free(self.direct)
        free(self.cleared)
        free(self.fen)
        free(self.holes)
        free(self.hist_block)
        free(self.hist_prefix)
        free(self.cost_block)
        free(self.cost_prefix)
        free(self.dist)
        if self.big_on:
            idmap_free(&self.big)

    # ---- memory ----

    cdef int _grow_times(self, int64_t n) except -1:
        """Room for times ``[0, n)`` (n rounded up to whole words); only between requests, right
        after a renumbering (the bitmap and the tree are empty then) or at the start."""
        cdef int64_t words = (n + 63) >> 6
        free(self.cleared)
        free(self.fen)
        self.cleared = <uint64_t*>shadow_big_calloc(words, sizeof(uint64_t))
        self.fen = <uint32_t*>shadow_big_calloc(words + 1, sizeof(uint32_t))
        if self.cleared == NULL or self.fen == NULL:
            raise MemoryError(f"cannot allocate the stack clock for {n} times")
        self.n_words = words
        self.n_times = words << 6
        return 0

    cdef int _grow_hist(self, int64_t n) except -1:
        cdef int64_t old = self.hist_cap
        if n <= old:
            return 0
        n = max(n, old + old // 2)
        self.hist_block = <int64_t*>_grow(self.hist_block, old, n, sizeof(int64_t))
        self.hist_prefix = <int64_t*>_grow(self.hist_prefix, old, n, sizeof(int64_t))
        if self.weighted:
            self.cost_block = <double*>_grow(self.cost_block, old, n, sizeof(double))
            self.cost_prefix = <double*>_grow(self.cost_prefix, old, n, sizeof(double))
            if self.cost_block == NULL or self.cost_prefix == NULL:
                raise MemoryError(f"cannot allocate cost histograms of {n} distances")
        if self.hist_block == NULL or self.hist_prefix == NULL:
            raise MemoryError(f"cannot allocate histograms of {n} distances")
        self.hist_cap = n
        return 0

    cdef int _grow_direct(self, int64_t n) except -1:
        cdef int64_t old = self.direct_n
        if n <= old:
            return 0
        n = max(n, 2 * old)
        self.direct = <uint32_t*>_grow(self.direct, old, n, sizeof(uint32_t))
        if self.direct == NULL:
            raise MemoryError(f"cannot allocate the last-access table for {n} ids")
        self.direct_n = n
        return 0

    cdef int _big_reserve(self, int64_t more) except -1:
        """Room in the hash map for ``more`` new ids at load <= 1/2 (grown by rebuilding)."""
        cdef IdMap old
        cdef uint64_t i
        if not self.big_on:
            idmap_init(&self.big, max(1024, more))
            self.big_on = True
        if 2 * (self.big.n + more) <= <int64_t>self.big.size:
            return 0
        old = self.big
        idmap_init(&self.big, max(<int64_t>old.size, 2 * (old.n + more)))
        for i in range(old.size):
            if old.keys[i] != 0:
                idmap_put(&self.big, old.keys[i], old.vals[i])
        idmap_free(&old)
        return 0

    def allocated_bytes(self) -> int:
        """Bytes of every array this pass holds now."""
        cdef int64_t n = (self.direct_n * 4 + self.n_words * 12 + 4 + self.holes_cap * 8
                          + self.hist_cap * (32 if self.weighted else 16) + self.dist_cap * 8)
        if self.big_on:
            n += self.big.size * 12
        return n

    # ---- the clock ----

    cdef int64_t _last(self, int64_t b) noexcept nogil:
        """Last time of block ``b``, -1 if never seen."""
        cdef int32_t v
        if 0 < b < self.direct_n:
            return <int64_t>self.direct[b] - 1
        if not self.big_on:
            return -1
        v = idmap_get(&self.big, b)
        return -1 if v <= 0 else <int64_t>v - 1

    cdef void _set_last(self, int64_t b, int64_t t) noexcept nogil:
        """Block ``b``'s last time is ``t`` now (room reserved)."""
        if b < self.direct_n:
            self.direct[b] = <uint32_t>(t + 1)
        else:
            idmap_put(&self.big, b, <int32_t>(t + 1))

    cdef bint _forget(self, int64_t b) noexcept nogil:
        """Take block ``b`` out of the stack (the entries below it move up one); False if it is
        not in it.  A sampled stack drops an id that is no longer sampled this way."""
        cdef int64_t t = self._last(b)
        if t < 0:
            return False
        if b < self.direct_n:
            self.direct[b] = 0
        else:
            idmap_take(&self.big, b)
        self._clear(t)
        self._flush()
        self.n_distinct -= 1
        return True

    cdef void _flush(self) noexcept nogil:
        cdef int64_t i = self.pend_w + 1, d = self.pend_n
        cdef int64_t nw = self.n_words
        if self.pend_w < 0:
            return
        while i <= nw:
            self.fen[i] += <uint32_t>d
            i += i & -i
        self.pend_w = -1
        self.pend_n = 0

    cdef void _clear(self, int64_t t) noexcept nogil:
        """Time ``t`` no longer holds a stack entry."""
        cdef int64_t w = t >> 6
        self.cleared[w] |= (<uint64_t>1) << (t & 63)
        self.n_cleared += 1
        if w != self.pend_w:
            self._flush()
            self.pend_w = w
        self.pend_n += 1

    cdef int64_t _cleared_before(self, int64_t t) noexcept nogil:
        """Cleared times in ``[0, t)`` (the tree must be flushed)."""
        cdef int64_t w = t >> 6
        cdef int64_t s = popcount64(self.cleared[w] & (((<uint64_t>1) << (t & 63)) - 1))
        cdef int64_t i = w
        while i > 0:
            s += self.fen[i]
            i &= i - 1
        return s

    cdef int64_t _cleared_in(self, int64_t lo, int64_t hi) noexcept nogil:
        """Cleared times in ``[lo, hi)`` by the bitmap alone (short ranges)."""
        cdef int64_t wl = lo >> 6, wh = hi >> 6, s, w
        cdef uint64_t lo_mask = ~(((<uint64_t>1) << (lo & 63)) - 1)
        cdef uint64_t hi_mask = ((<uint64_t>1) << (hi & 63)) - 1
        if wl == wh:
            return popcount64(self.cleared[wl] & lo_mask & hi_mask)
        s = popcount64(self.cleared[wl] & lo_mask)
        for w in range(wl + 1, wh):
            s += popcount64(self.cleared[w])
        if hi & 63:
            s += popcount64(self.cleared[wh] & hi_mask)
        return s

    # ---- holes (max-heap of times) ----

    cdef int _holes_reserve(self, int64_t n) except -1:
        cdef int64_t* h
        if n <= self.holes_cap:
            return 0
        n = max(n, 2 * self.holes_cap, 64)
        h = <int64_t*>realloc(self.holes, n * sizeof(int64_t))
        if h == NULL:
            raise MemoryError("cannot grow the hole heap")
        self.holes = h
        self.holes_cap = n
        return 0

    cdef void _hole_push(self, int64_t t) noexcept nogil:
        """Add a hole at time ``t`` (room reserved by :meth:`_holes_reserve`)."""
        cdef int64_t* h = self.holes
        cdef int64_t i = self.n_holes, p
        self.n_holes += 1
        while i > 0:
            p = (i - 1) >> 1
            if h[p] >= t:
                break
            h[i] = h[p]
            i = p
        h[i] = t

    cdef int64_t _hole_pop(self) noexcept nogil:
        """Remove and return the latest hole time (the shallowest hole)."""
        cdef int64_t* h = self.holes
        cdef int64_t top = h[0], last, i = 0, c, n
        self.n_holes -= 1
        n = self.n_holes
        if n == 0:
            return top
        last = h[n]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and h[c + 1] > h[c]:
                c += 1
            if h[c] <= last:
                break
            h[i] = h[c]
            i = c
        h[i] = last
        return top

    # ---- renumbering ----

    cdef int _compact(self, int64_t need) except -1:
        """Renumber the live times ``0 .. n_live - 1`` (order kept), empty the bitmap, and make
        room for ``need`` more times."""
        cdef int64_t n_live = self.now - self.n_cleared
        cdef int64_t w, b, t, nw = self.n_words
        cdef uint32_t* pre
        cdef uint64_t i
        cdef int32_t v
        self._flush()
        pre = <uint32_t*>malloc((nw + 1) * sizeof(uint32_t))
        if pre == NULL:
            raise MemoryError("cannot renumber the stack clock")
        pre[0] = 0
        for w in range(nw):
            pre[w + 1] = pre[w] + <uint32_t>popcount64(self.cleared[w])
        with nogil:
            for b in range(self.direct_n):
                if self.direct[b]:
                    t = self.direct[b] - 1
                    self.direct[b] = <uint32_t>(t - _before(self.cleared, pre, t) + 1)
            if self.big_on:
                for i in range(self.big.size):
                    if self.big.keys[i] != 0:
                        t = self.big.vals[i] - 1
                        self.big.vals[i] = <int32_t>(t - _before(self.cleared, pre, t) + 1)
            # NOTE: a monotone renumbering keeps the heap a heap
            for b in range(self.n_holes):
                t = self.holes[b]
                self.holes[b] = t - _before(self.cleared, pre, t)
        free(pre)
        self.now = n_live
        self.n_cleared = 0
        self.n_compactions += 1
        if n_live > MAX_LIVE:
            raise MemoryError(f"more than {MAX_LIVE} blocks and holes in one stack")
        if 2 * (n_live + need) > self.n_times:
            self._grow_times(2 * (n_live + need))
        else:
            memset(self.cleared, 0, self.n_words * sizeof(uint64_t))
            memset(self.fen, 0, (self.n_words + 1) * sizeof(uint32_t))
        return 0

    # ---- one batch ----

    cdef int _reserve(self, int64_t entries, int64_t anonymous, int64_t hi_id,
                      int64_t max_len) except -1:
        """Room for ``entries`` accesses of ids up to ``hi_id`` and ``anonymous`` slots, and a
        request of ``max_len`` blocks: ids, times (each access and slot takes one), distances
        (the stack grows by at most as much), holes, the scratch."""
        cdef int64_t n_live
        # NOTE: once an id went to the hash map the direct range stays put (an id is in one
        # place only); dense ids never get there (the largest is about the distinct count)
        if (self.direct_ok and hi_id >= self.direct_n and not self.big_on
                and hi_id < max(<int64_t>DIRECT_FLOOR, DIRECT_SLACK * (self.n_distinct + entries))):
            self._grow_direct(hi_id + 1)
        if hi_id >= self.direct_n:
            self._big_reserve(entries)
        if self.now + entries + anonymous > self.n_times:
            self._compact(entries + anonymous)
        if self.counting and not self.cumulated:
            n_live = self.now - self.n_cleared
            self._grow_hist(n_live + entries + anonymous + 2)
        self._holes_reserve(self.n_holes + anonymous)
        if max_len > self.dist_cap:
            free(self.dist)
            self.dist = <int64_t*>malloc(max_len * sizeof(int64_t))
            if self.dist == NULL:
                self.dist_cap = 0
                raise MemoryError("cannot allocate the distance scratch")
            self.dist_cap = max_len
        return 0

    def feed(self, const int64_t[::1] offsets, const int64_t[::1] ids, object n_match,
             object n_anonymous, const double[::1] costs, int64_t first_request=0) -> None:
        """Serve ``len(offsets) - 1`` whole requests: request ``i`` is ``ids[offsets[i]:
        offsets[i+1]]`` in prefix order, its first ``n_match[i]`` blocks looked up (None: all),
        ``n_anonymous[i]`` anonymous slots (None: none); ``costs[p]`` is the cost of position
        ``p`` (at least the longest request's length; read only when ``weighted``).

        Everything the batch can need is reserved first (so a bad batch changes nothing); the
        requests are then served without the GIL, so a reader thread decodes meanwhile."""
        cdef int64_t n = offsets.shape[0] - 1, r, i, B, M, A, lo, max_b = 0, hi_id = 0
        cdef int64_t n_anon = 0, first, last
        cdef const int64_t[::1] nm
        cdef const int64_t[::1] na
        cdef const double* cp = NULL
        cdef bint has_m = n_match is not None, has_a = n_anonymous is not None
        if self.cumulated:
            raise RuntimeError("the pass is over (cumulate)")
        if n <= 0:
            return
        first = offsets[0]
        last = offsets[n]
        if first < 0 or last > ids.shape[0]:
            raise ValueError("offsets outside the id array")
        if has_m:
            nm = n_match
            if nm.shape[0] < n:
                raise ValueError("n_match shorter than the batch")
        if has_a:
            na = n_anonymous
            if na.shape[0] < n:
                raise ValueError("n_anonymous shorter than the batch")
        for r in range(n):
            if offsets[r + 1] < offsets[r]:
                raise ValueError("offsets must not decrease")
            max_b = max(max_b, offsets[r + 1] - offsets[r])
            if has_a and na[r] > 0:
                n_anon += na[r]
        hi_id = _check_ids(&ids[0] if ids.shape[0] else NULL, first, last)
        if hi_id < 0:
            for r in range(n):
                if offsets[r + 1] > -hi_id - 1:
                    break
            raise ValueError(f"request {first_request + r}: block id {ids[-hi_id - 1]} (ids "
                             f"start at 1)")
        if self.weighted and costs.shape[0] < max_b:
            raise ValueError(f"costs cover {costs.shape[0]} positions; a request has {max_b}")
        if costs.shape[0]:
            cp = &costs[0]
        self._reserve(last - first, n_anon, hi_id, max_b)
        with nogil:
            for r in range(n):
                lo = offsets[r]
                B = offsets[r + 1] - lo
                M = B if not has_m else max(0, min(nm[r], B))
                A = 0 if not has_a else max(0, na[r])
                self._request(&ids[lo], B, M, A, cp, first_request + r)

    cdef void _match(self, const int64_t* ids, int64_t M) noexcept nogil:
        """``dist[i]``: the distance of block ``ids[i]`` (``i < M``) in the stack as it is, 0 if
        it was never seen."""
        cdef int64_t i, t, d, tr = -1, dr = 0
        for i in range(M):
            t = self._last(ids[i])
            if t < 0:
                d = 0
            elif tr >= 0 and t < tr and tr - t <= NEAR_TIMES:
                d = dr + (tr - t) - self._cleared_in(t, tr)
            elif tr >= 0 and t > tr and t - tr <= NEAR_TIMES:
                d = dr - (t - tr) + self._cleared_in(tr, t)
            else:
                d = (self.now - t) - (self.n_cleared - self._cleared_before(t))
            if d > 0:
                tr = t
                dr = d
            self.dist[i] = d

    cdef void _count(self, int64_t M, const double* costs) noexcept nogil:
        """Add ``dist[0:M]`` to the histograms (the prefix ones at the running maximum)."""
        cdef int64_t i, d, pm = 0
        cdef bint weighted = self.weighted
        cdef double c = 0.0
        for i in range(M):
            d = self.dist[i]
            if weighted:
                c = costs[i]
                self.total_cost += c
            if d == 0:
                pm = -1                     # the first miss: no later block is a prefix hit
                self.inf_block += 1
                if weighted:
                    self.inf_cost_block += c
            else:
                self.hist_block[d] += 1
                if weighted:
                    self.cost_block[d] += c
                if pm >= 0 and d > pm:
                    pm = d
            if pm < 0:
                self.inf_prefix += 1
                if weighted:
                    self.inf_cost_prefix += c
            else:
                self.hist_prefix[pm] += 1
                if weighted:
                    self.cost_prefix[pm] += c
        self.n_blocks += M

    cdef int64_t _access(self, const int64_t* ids, int64_t B, bint deepest_first) noexcept nogil:
        """Move the blocks to the top in order (deepest first: ``ids[B-1]`` first); a hole above
        a block's old entry drops into it.  Returns how many were already moved by this call
        (repeated ids)."""
        cdef int64_t i, j, b, t, t0 = self.now, dups = 0, sigma
        cdef bint cold
        for j in range(B):
            i = B - 1 - j if deepest_first else j
            b = ids[i]
            t = self._last(b)
            cold = t < 0
            if not cold and t >= t0:
                dups += 1
            if self.n_holes and (cold or self.holes[0] > t):
                sigma = self._hole_pop()
                self._clear(sigma)
                if not cold:
                    self._hole_push(t)
            elif not cold:
                self._clear(t)
            if cold:
                self.n_distinct += 1
            self._set_last(b, self.now)
            self.now += 1
        self._flush()
        self.n_accesses += B
        return dups

    cdef void _anonymous(self, int64_t A) noexcept nogil:
        """``A`` anonymous slots: phantoms on top, each taking the shallowest hole (a free slot);
        then, their request over, each a hole where it stands."""
        cdef int64_t j
        for j in range(A):
            if self.n_holes:
                self._clear(self._hole_pop())
        for j in range(A):
            self._hole_push(self.now)
            self.now += 1
        self._flush()

    cdef void _request(self, const int64_t* ids, int64_t B, int64_t M, int64_t A,
                       const double* costs, int64_t req_index) noexcept nogil:
        """One request as the serve loop serves it (match, access, anonymous slots); the room
        it needs was reserved."""
        cdef int64_t need
        self._match(ids, M)
        self._count(M, costs)
        self.n_req += 1
        need = B - self._access(ids, B, self.deepest_first) + A
        self._anonymous(A)
        if need > self.exact_from:
            self.exact_from = need
            self.exact_from_req = req_index

    def histograms(self) -> dict:
        """Copies of what was counted: ``block``, ``prefix`` (int64, index = distance, 0
        unused), ``cost_block``, ``cost_prefix`` (float64; None unless ``weighted``), sized to
        the stack's length + 1.  Not after :meth:`cumulate`."""
        if self.cumulated:
            raise RuntimeError("the histograms are cumulative now")
        return {k: None if v is None else v.copy() for k, v in self._views().items()}

    def cumulate(self) -> dict:
        """End the pass: turn the histograms into running sums in place (index ``C``: the
        looked-up blocks, or their cost, at distance ``<= C``) and return them as arrays over
        this object's memory (keep it alive while they are used); ``top`` is the largest
        distance counted (0: none).  No copy: a pass's largest arrays are these."""
        cdef int64_t i, n = min(self.now - self.n_cleared + 1, self.hist_cap), top = 0
        cdef int64_t* hb = self.hist_block
        cdef int64_t* hp = self.hist_prefix
        cdef double* cb = self.cost_block
        cdef double* cp = self.cost_prefix
        if not self.cumulated:
            with nogil:
                for i in range(1, n):
                    if hb[i] or hp[i]:
                        top = i
                    hb[i] += hb[i - 1]
                    hp[i] += hp[i - 1]
                    if cb != NULL:
                        cb[i] += cb[i - 1]
                        cp[i] += cp[i - 1]
            self.top = top
            self.cumulated = True
        return self._views()

    def _views(self) -> dict:
        cdef int64_t n = min(self.now - self.n_cleared + 1, self.hist_cap)
        out = {"block": np.asarray(<int64_t[:n]>self.hist_block),
               "prefix": np.asarray(<int64_t[:n]>self.hist_prefix),
               "cost_block": None, "cost_prefix": None}
        if self.weighted:
            out["cost_block"] = np.asarray(<double[:n]>self.cost_block)
            out["cost_prefix"] = np.asarray(<double[:n]>self.cost_prefix)
        return out


cdef int64_t _check_ids(const int64_t* ids, int64_t lo, int64_t hi) noexcept nogil:
    """The largest of ``ids[lo:hi]`` (0 if none), or ``-(i + 1)`` for the first ``ids[i] < 1``."""
    cdef int64_t i, m = 0
    for i in range(lo, hi):
        if ids[i] < 1:
            return -(i + 1)
        if ids[i] > m:
            m = ids[i]
    return m


cdef inline int64_t _before(const uint64_t* cleared, const uint32_t* pre, int64_t t) noexcept nogil:
    cdef int64_t w = t >> 6
    return pre[w] + popcount64(cleared[w] & (((<uint64_t>1) << (t & 63)) - 1))


cdef void* _grow(void* p, int64_t old, int64_t n, size_t size) noexcept nogil:
    """``p`` (``old`` elements) grown to ``n`` zeroed ones beyond the old; NULL (p freed) if out
    of memory."""
    cdef void* q = realloc(p, n * size)
    if q == NULL:
        free(p)
        return NULL
    memset(<char*>q + old * size, 0, (n - old) * size)
    return q
