# cython: language_level=3
"""The LRU stack of :mod:`shadow.sim.mrc.stack` (its module docstring states the invariants);
declared here so the sampled live curve (``shards.pyx``) drives the same stack."""

cimport cython
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t

from shadow.sim.core.idtable cimport IdMap


@cython.final
cdef class StackPass:
    cdef readonly bint deepest_first, weighted
    # id -> last time + 1 (0: never seen); small ids directly (when ``direct_ok``), others in ``big``
    cdef bint direct_ok
    cdef uint32_t* direct
    cdef int64_t direct_n
    cdef IdMap big
    cdef bint big_on
    # the clock: times [0, n_times), the cleared bitmap and its Fenwick tree over 64-time words
    cdef uint64_t* cleared
    cdef uint32_t* fen
    cdef int64_t n_times, n_words
    cdef readonly int64_t now, n_cleared, n_distinct
    # holes: a binary max-heap of their times
    cdef int64_t* holes
    cdef readonly int64_t n_holes
    cdef int64_t holes_cap
    # histograms, index = distance (1 .. hist_cap - 1)
    cdef int64_t* hist_block
    cdef int64_t* hist_prefix
    cdef double* cost_block
    cdef double* cost_prefix
    cdef int64_t hist_cap
    cdef readonly int64_t inf_block, inf_prefix
    cdef readonly double inf_cost_block, inf_cost_prefix
    # totals
    cdef readonly int64_t n_req, n_blocks, n_accesses, exact_from, exact_from_req
    cdef readonly double total_cost
    cdef readonly int64_t n_compactions, top
    cdef readonly bint cumulated
    # False: no histograms (a caller that counts the distances itself, as the sampled curve)
    cdef bint counting
    # per-request scratch: the distances of the looked-up blocks (0: never seen)
    cdef int64_t* dist
    cdef int64_t dist_cap
    # pending Fenwick update (consecutive clears in one word)
    cdef int64_t pend_w, pend_n
    cdef int64_t min_times

    cdef int _grow_times(self, int64_t n) except -1
    cdef int _grow_hist(self, int64_t n) except -1
    cdef int _grow_direct(self, int64_t n) except -1
    cdef int _big_reserve(self, int64_t more) except -1
    cdef int _holes_reserve(self, int64_t n) except -1
    cdef int _compact(self, int64_t need) except -1
    cdef int _reserve(self, int64_t entries, int64_t anonymous, int64_t hi_id,
                      int64_t max_len) except -1
    cdef int64_t _last(self, int64_t b) noexcept nogil
    cdef void _set_last(self, int64_t b, int64_t t) noexcept nogil
    cdef void _flush(self) noexcept nogil
    cdef void _clear(self, int64_t t) noexcept nogil
    cdef int64_t _cleared_before(self, int64_t t) noexcept nogil
    cdef int64_t _cleared_in(self, int64_t lo, int64_t hi) noexcept nogil
    cdef void _hole_push(self, int64_t t) noexcept nogil
    cdef int64_t _hole_pop(self) noexcept nogil
    cdef void _match(self, const int64_t* ids, int64_t M) noexcept nogil
    cdef void _count(self, int64_t M, const double* costs) noexcept nogil
    cdef int64_t _access(self, const int64_t* ids, int64_t B, bint deepest_first) noexcept nogil
    cdef void _anonymous(self, int64_t A) noexcept nogil
    cdef bint _forget(self, int64_t b) noexcept nogil
    cdef void _request(self, const int64_t* ids, int64_t B, int64_t M, int64_t A,
                       const double* costs, int64_t req_index) noexcept nogil
