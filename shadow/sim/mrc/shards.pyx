# cython: language_level=3
"""A sampled miss-ratio curve of bounded memory for a live engine (SHARDS).

SHARDS (Waldspurger et al., "Efficient MRC Construction with SHARDS", FAST'15) keeps the LRU
stack of a *spatial sample* of the blocks: a block is tracked iff ``hash(id) < T``, the same
blocks every time, so the sampled stack is the full stack with the other blocks left out; a
tracked block's distance there, divided by the rate ``R = T / 2**64``, estimates its distance in
the full stack.  Each tracked looked-up block stands for ``1 / R`` looked-up blocks.

* **rate** mode: ``T`` fixed; memory grows with ``R`` x the distinct blocks.
* **fixed-size** mode (``max_ids``): at most ``max_ids`` ids are tracked; when one more comes,
  the tracked id with the largest hash leaves the stack and ``T`` drops to that hash (SHARDS'
  fixed-size variant), so ``R`` falls as the traffic's distinct blocks grow and memory stays
  bounded: about 100 B per tracked id (docs/mrc.md, "The live curve").

The stack is :class:`~shadow.sim.mrc.stack.StackPass` (ids in its hash map only, so its memory
follows the ids tracked), driven request by request as the serve loop serves one: the
looked-up blocks are matched against the stack before the request, then the blocks move to the
top deepest first and the anonymous slots become holes (docs/mrc.md).  Live, the match and the
move happen at the admission and the blocks move again at the release (vLLM's free queue ranks
by release, tail first), generated blocks included; :meth:`serve` does both at once, which is
the offline serial loop.

Estimates are kept by real distance in ``n_bins`` bins of ``bin_blocks`` blocks (a distance past
them counts as a hit only for the infinite cache): per bin the estimated looked-up blocks at
that distance (``1 / R`` each when counted).  The hit ratio at ``C`` blocks is their sum up to
``C`` (the bin ``C`` falls in linearly interpolated) over the looked-up blocks.  Two
normalisations: ``plain`` divides by the estimated looked-up blocks (the sampled ratio);
``adj`` (SHARDS_adj) divides by the true count of looked-up blocks and adds the difference
between the two to the hits at every size, which corrects the sample's over- or
under-representation of hot blocks.

Invariant: ``sp.n_distinct <= max_ids`` (fixed-size) after every call; every tracked id's hash is
below ``T`` and is in the heap exactly once.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.math cimport ceil, floor

from shadow.sim.mrc.stack cimport StackPass

#: Largest T (2**64 - 1): rate 1.
DEF T_ALL = 0xFFFFFFFFFFFFFFFF


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """splitmix64's finaliser: ids (dense or not) to uniform 64-bit hashes."""
    x += 0x9E3779B97F4A7C15ULL
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef class SampledCurve:
    """``SampledCurve(bin_blocks, n_bins, rate=1.0, max_ids=0, seed=0)``: a SHARDS curve of
    ``n_bins`` bins of ``bin_blocks`` blocks; ``rate`` in (0, 1] is the starting rate (fixed
    unless ``max_ids`` > 0 bounds the ids tracked)."""

    cdef StackPass sp
    cdef readonly uint64_t threshold
    cdef readonly int64_t max_ids, n_bins
    cdef readonly double bin_blocks
    cdef uint64_t seed
    # the tracked ids by hash: a binary max-heap of (hash, id) (fixed-size mode)
    cdef uint64_t* hh
    cdef int64_t* hid
    cdef int64_t n_heap, heap_cap
    # estimates (looked-up blocks, 1/R per sampled one)
    cdef double* bins
    cdef readonly double est_beyond, est_cold, est_lookups
    cdef readonly int64_t n_lookups, n_sampled_lookups, n_phantoms, n_requests
    # scratch: a request's sampled ids
    cdef int64_t* buf
    cdef int64_t buf_cap

    def __cinit__(self, double bin_blocks, int64_t n_bins, double rate=1.0, int64_t max_ids=0,
                  uint64_t seed=0):
        if not bin_blocks > 0 or n_bins < 1:
            raise ValueError("bins: a positive width and at least one bin")
        if not 0 < rate <= 1:
            raise ValueError(f"sampling rate {rate} is not in (0, 1]")
        if max_ids < 0:
            raise ValueError("max_ids must be >= 0 (0: a fixed rate)")
        self.sp = StackPass(True, False, 1 << 10, False)
        self.sp.counting = False
        self.bin_blocks = bin_blocks
        self.n_bins = n_bins
        self.max_ids = max_ids
        self.seed = seed
        self.threshold = <uint64_t>T_ALL if rate >= 1 else <uint64_t>(rate * 18446744073709551616.0)
        self.bins = <double*>calloc(n_bins, sizeof(double))
        if self.bins == NULL:
            raise MemoryError("cannot allocate the curve's bins")

    def __dealloc__(self):
        free(self.bins)
        free(self.hh)
        free(self.hid)
        free(self.buf)

    @property
    def rate(self) -> float:
        """The sampling rate now (``T / 2**64``)."""
        return 1.0 if self.threshold == <uint64_t>T_ALL else self.threshold / 18446744073709551616.0

    @property
    def n_tracked(self) -> int:
        return self.sp.n_distinct

    def tracks(self, int64_t block_id) -> bool:
        """Whether ``block_id`` is in the sampled stack now."""
        return block_id >= 1 and self.sp._last(block_id) >= 0

    def allocated_bytes(self) -> int:
        """Bytes this curve holds: the sampled stack, the heap, the bins, the scratch."""
        return (self.sp.allocated_bytes() + self.heap_cap * 16 + self.n_bins * 8
                + self.buf_cap * 8)

    # ---- sampling ----

    cdef inline bint _sampled(self, int64_t b) noexcept nogil:
        return _mix(<uint64_t>b ^ self.seed) < self.threshold

    cdef int _heap_reserve(self, int64_t n) except -1:
        cdef uint64_t* h
        cdef int64_t* i
        if n <= self.heap_cap:
            return 0
        n = max(n, 2 * self.heap_cap, 64)
        h = <uint64_t*>realloc(self.hh, n * sizeof(uint64_t))
        if h == NULL:
            raise MemoryError("cannot grow the sampled ids' heap")
        self.hh = h
        i = <int64_t*>realloc(self.hid, n * sizeof(int64_t))
        if i == NULL:
            raise MemoryError("cannot grow the sampled ids' heap")
        self.hid = i
        self.heap_cap = n
        return 0

    cdef void _heap_push(self, uint64_t h, int64_t b) noexcept nogil:
        cdef int64_t i = self.n_heap, p
        self.n_heap += 1
        while i > 0:
            p = (i - 1) >> 1
            if self.hh[p] >= h:
                break
            self.hh[i] = self.hh[p]
            self.hid[i] = self.hid[p]
            i = p
        self.hh[i] = h
        self.hid[i] = b

    cdef void _heap_pop(self) noexcept nogil:
        cdef int64_t n, i = 0, c
        cdef uint64_t h
        cdef int64_t b
        self.n_heap -= 1
        n = self.n_heap
        if n == 0:
            return
        h = self.hh[n]
        b = self.hid[n]
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and self.hh[c + 1] > self.hh[c]:
                c += 1
            if self.hh[c] <= h:
                break
            self.hh[i] = self.hh[c]
            self.hid[i] = self.hid[c]
            i = c
        self.hh[i] = h
        self.hid[i] = b

    cdef int _select(self, const int64_t[::1] ids, int64_t n) except -1:
        """``buf[0:k]``: the sampled ids of ``ids[0:n]`` in order; returns k."""
        cdef int64_t i, k = 0
        if n > self.buf_cap:
            free(self.buf)
            self.buf = <int64_t*>malloc(max(n, 64) * sizeof(int64_t))
            if self.buf == NULL:
                self.buf_cap = 0
                raise MemoryError("cannot allocate the sample scratch")
            self.buf_cap = max(n, 64)
        for i in range(n):
            if self._sampled(ids[i]):
                self.buf[k] = ids[i]
                k += 1
        return k

    # ---- one request ----

    def admit(self, const int64_t[::1] ids, int64_t n_match) -> None:
        """An admission: ``ids[:n_match]`` are looked up against the stack as it is (counted);
        then every block moves to the top, deepest first."""
        cdef int64_t n = ids.shape[0], m = max(0, min(n_match, n)), k_m, k, i, j, d
        cdef double w = 1.0 / self.rate, real
        cdef int64_t hi = _max_id(ids)
        self.n_requests += 1
        self.n_lookups += m
        k_m = self._select(ids, m)
        self.n_sampled_lookups += k_m
        self.sp._reserve(n, 0, hi, max(k_m, 1))
        self.sp._match(self.buf, k_m)
        self.est_lookups += k_m * w
        for i in range(k_m):
            d = self.sp.dist[i]
            if d == 0:
                self.est_cold += w
                continue
            real = d * w
            j = <int64_t>ceil(real / self.bin_blocks) - 1      # bin j: (j w, (j + 1) w]
            if j >= self.n_bins:
                self.est_beyond += w
            else:
                self.bins[j] += w
        self._move(ids, n)

    def release(self, const int64_t[::1] ids, const int64_t[::1] extra_ids,
                int64_t n_anonymous) -> None:
        """A release: the generated blocks ``extra_ids`` and the request's ``ids`` move to the
        top tail first (vLLM's free queue order), then ``n_anonymous`` slots become holes."""
        cdef int64_t a = 0, j
        _max_id(extra_ids)
        _max_id(ids)
        self._move(extra_ids, extra_ids.shape[0])
        self._move(ids, ids.shape[0])
        # NOTE: a slot is sampled as a block would be: by the hash of its own running number
        for j in range(max(0, n_anonymous)):
            self.n_phantoms += 1
            if self._sampled(-self.n_phantoms):
                a += 1
        if a:
            self.sp._reserve(0, a, 0, 1)
            self.sp._anonymous(a)

    def serve(self, const int64_t[::1] ids, int64_t n_match, int64_t n_anonymous) -> None:
        """:meth:`admit` and :meth:`release` at once (the offline serial loop)."""
        self.admit(ids, n_match)
        self.release(ids, ids[:0], n_anonymous)

    cdef int _move(self, const int64_t[::1] ids, int64_t n) except -1:
        """Move the sampled ids of ``ids[0:n]`` to the top, deepest first, tracking new ones
        (and dropping the largest hash past ``max_ids``)."""
        cdef int64_t k = self._select(ids, n), i, b
        cdef bint new
        if k == 0:
            return 0
        self.sp._reserve(k, 0, _max_id(ids), 1)
        self._heap_reserve(self.n_heap + k)
        for i in range(k - 1, -1, -1):
            b = self.buf[i]
            new = self.sp._last(b) < 0
            self.sp._access(&self.buf[i], 1, True)
            if new and self.max_ids:
                self._heap_push(_mix(<uint64_t>b ^ self.seed), b)
        while self.max_ids and self.sp.n_distinct > self.max_ids:
            # SHARDS fixed-size: the largest hash leaves, and T falls to it
            self.threshold = self.hh[0]
            self.sp._forget(self.hid[0])
            self._heap_pop()
        return 0

    # ---- the curve ----

    def hits_at(self, double c) -> float:
        """Estimated looked-up blocks that hit in an lru cache of ``c`` blocks."""
        cdef double h = 0.0, x = c / self.bin_blocks
        cdef int64_t j, full = <int64_t>floor(x)
        for j in range(min(full, self.n_bins)):
            h += self.bins[j]
        if full < self.n_bins:
            h += (x - full) * self.bins[full]
        return h

    def ratio_at(self, double c, bint adj=True) -> float:
        """Estimated hit ratio at ``c`` blocks (SHARDS_adj unless ``adj`` is False)."""
        if self.n_lookups == 0:
            return 0.0
        if not adj:
            return self.hits_at(c) / self.est_lookups if self.est_lookups else 0.0
        return max(0.0, min(1.0, (self.hits_at(c) + self.n_lookups - self.est_lookups)
                            / self.n_lookups))

    def ratio_inf(self, bint adj=True) -> float:
        """Estimated hit ratio of an infinite cache."""
        cdef double h = self.hits_at(self.n_bins * self.bin_blocks) + self.est_beyond
        if self.n_lookups == 0:
            return 0.0
        if not adj:
            return h / self.est_lookups if self.est_lookups else 0.0
        return max(0.0, min(1.0, (h + self.n_lookups - self.est_lookups) / self.n_lookups))

    def capacity_for(self, double share, bint adj=True) -> float:
        """Smallest capacity (blocks, interpolated within a bin) whose estimated ratio reaches
        ``share`` of the infinite cache's; ``inf`` past the bins."""
        cdef double goal, h = 0.0, base = 0.0, need
        cdef int64_t j
        if self.n_lookups == 0 or self.est_lookups == 0:
            return float("inf")
        if adj:
            base = self.n_lookups - self.est_lookups
            goal = share * self.ratio_inf(True) * self.n_lookups
        else:
            goal = share * self.ratio_inf(False) * self.est_lookups
        if base >= goal:
            return 0.0
        for j in range(self.n_bins):
            if base + h + self.bins[j] >= goal:
                need = (goal - base - h) / self.bins[j]
                return (j + need) * self.bin_blocks
            h += self.bins[j]
        return float("inf")


cdef int64_t _max_id(const int64_t[::1] ids) except -1:
    """The largest id (0 if none); a ValueError for an id below 1 (ids start at 1)."""
    cdef int64_t i, m = 0
    for i in range(ids.shape[0]):
        if ids[i] < 1:
            raise ValueError(f"block id {ids[i]} (ids start at 1)")
        if ids[i] > m:
            m = ids[i]
    return m
