# cython: language_level=3
"""Shared pieces of the sampling policies (random_compute, random_compute_small_queue,
belady_compute, partial_node_random_compute), C-level.

* :c:func:`rng_next` / :c:func:`rng_below`: splitmix64 and a multiply-shift range reduction.  The
  pure-Python references (``shadow/sim/reference/_sampling.py``) make exactly the same draws, so a
  Cython policy and its reference can be compared decision by decision.
* :c:type:`Dense`: a set of int32 items kept dense (``items[0 .. n)``) with each item's index in
  ``pos`` (``-1`` when absent); removal swaps the last item into the hole.  Sampling draws an index
  into ``items``, so the draw order depends only on the order of adds and removes, which the
  references reproduce with a list and the same swap.  ``items[n .. cap)`` hold the absent items
  when the set was created with ``full_permutation`` (used as a free list of node ids).
* :c:func:`pick_best`: the up to ``b`` distinct slots of lowest score among ``n`` drawn
  candidates; ties go to the earlier draw, so ``b == 1`` is libCacheSim's "first drawn wins".
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t

from shadow.sim.core.policy cimport Policy, Access


cdef inline uint64_t rng_next(uint64_t* state) noexcept nogil:
    """splitmix64: advance ``state`` and return the next 64-bit output."""
    cdef uint64_t z
    state[0] += <uint64_t>0x9E3779B97F4A7C15ULL
    z = state[0]
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef inline int64_t rng_below(uint64_t* state, int64_t n) noexcept nogil:
    """A draw in ``[0, n)`` for ``0 < n < 2**32`` (upper 32 bits times n, shifted down)."""
    return <int64_t>(((rng_next(state) >> 32) * <uint64_t>n) >> 32)


cdef struct Dense:
    int32_t* items
    int32_t* pos
    int64_t n
    int64_t cap


cdef inline void dense_add(Dense* d, int64_t x) noexcept nogil:
    """Append ``x`` (absent) at index n.  With a full permutation, x's old place is swapped over."""
    cdef int64_t i = d.pos[x]
    cdef int32_t y
    if i >= 0:
        # NOTE: full-permutation mode: x sits among the absent items at i >= n; swap it to n.
        y = d.items[d.n]
        d.items[i] = y
        d.pos[y] = <int32_t>i
    d.items[d.n] = <int32_t>x
    d.pos[x] = <int32_t>d.n
    d.n += 1


cdef inline void dense_del(Dense* d, int64_t x, bint keep_absent) noexcept nogil:
    """Remove ``x`` (present): the last item moves into its hole.  ``keep_absent`` parks x at
    index n (full-permutation mode) instead of marking it absent with -1."""
    cdef int64_t i = d.pos[x]
    cdef int32_t y
    d.n -= 1
    y = d.items[d.n]
    d.items[i] = y
    d.pos[y] = <int32_t>i
    if keep_absent:
        d.items[d.n] = <int32_t>x
        d.pos[x] = <int32_t>d.n
    else:
        d.pos[x] = -1


cdef int dense_init(Dense* d, int64_t cap, bint full_permutation) except -1
cdef void dense_free(Dense* d) noexcept nogil
cdef int64_t pick_best(const int32_t* cand, const double* score, int64_t n, int64_t b,
                       int32_t* out, double* out_score) noexcept nogil


cdef inline int64_t pick_push(int32_t* out, double* out_score, int64_t m, int64_t b,
                              int32_t s, double sc) noexcept nogil:
    """One step of :c:func:`pick_best`: offer draw ``s`` of score ``sc`` to the ``m`` kept so far
    (ascending, at most ``b``); return the new count."""
    cdef int64_t j
    if m == b and not (sc < out_score[m - 1]):
        return m
    # NOTE: a repeated draw has the same score as its first occurrence, which is either still
    # in the list (skip it) or was pushed out by strictly better ones (the test above skips it).
    for j in range(m):
        if out[j] == s:
            return m
    if m < b:
        j = m
        m += 1
    else:
        j = m - 1
    while j > 0 and sc < out_score[j - 1]:
        out[j] = out[j - 1]
        out_score[j] = out_score[j - 1]
        j -= 1
    out[j] = s
    out_score[j] = sc
    return m


cdef class SampledPolicy(Policy):
    """Base of the slot-sampling policies: ``n_sample`` draws from ``dense``, lowest score evicted.

    A subclass defines ``_score`` (lower = evicted first) and keeps ``dense`` equal to its
    sampling population; ``_sample_evict`` evicts up to ``evict_batch`` victims per sample.
    """
    cdef int64_t n_sample
    cdef int64_t evict_batch
    cdef uint64_t rng
    cdef Dense dense            # the sampling population (slot numbers)
    cdef int32_t* cand          # scratch: drawn slots (n_sample)
    cdef double* cand_score     # scratch: their scores
    cdef int32_t* best          # scratch: chosen slots (evict_batch)
    cdef double* best_score
    cdef const char* pf_base    # prefetched at pf_base + slot * pf_stride per draw (NULL: none)
    cdef int64_t pf_stride
    cdef const char* pf2_base   # a second per-slot array the score reads (NULL: none)
    cdef int64_t pf2_stride

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil
    cdef int64_t _draw_slots(self) noexcept nogil
    cdef int64_t _draw(self, int64_t now) noexcept nogil
    cdef int64_t _pick(self, int64_t now, int64_t b) noexcept nogil
    cdef int64_t _sample_evict(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil


cdef struct RCStat:
    # NOTE: everything a draw and a hit read, 16 B a slot (4 to a cache line, never straddling
    # one): a draw loads one line per candidate and computes the score's numerator itself
    # (``<double>cost * freq``: bit for bit the ``num`` a touch used to store, the same two
    # operands).  ``last`` is 32 bits relative to the policy's ``epoch`` (see ``_rel``) and
    # ``cost`` 32 bits until a cost outside int32 arrives (then ``cost64`` holds every cost).
    uint32_t last               # stamp of the last access - epoch
    int32_t cost                # llround cost of the last access (unused once cost64 is set)
    double freq                 # decayed access count


cdef class RandomCompute(SampledPolicy):
    cdef bint per_request       # stamp = the request's req_vtime (True) or the get's vtime
    cdef RCStat* st             # per slot, 16 B (64 B aligned base)
    cdef int64_t* cost64        # NULL until a cost outside int32 arrives; then the only costs
    cdef readonly int64_t epoch # st[s].last + epoch is the absolute stamp

    cdef void _init_stats(self, int64_t slot, const Access* acc) noexcept nogil
    cdef void _touch(self, int64_t slot, const Access* acc) noexcept nogil
    cdef uint32_t _rel(self, int64_t stamp) noexcept nogil
    cdef uint32_t _rel_slow(self, int64_t stamp) noexcept nogil
    cdef void _set_cost(self, int64_t slot, int64_t c) noexcept nogil
    cdef void _widen(self) noexcept nogil
