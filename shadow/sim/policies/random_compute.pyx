# cython: language_level=3
"""random_compute: sampled eviction by decayed frequency x cost / age (the PrefixSim fork's RandomCompute).

Per resident block: ``last`` (stamp of its last access), ``freq`` (decayed access count) and
``cost`` (llround cost of its last access).  An insert sets ``freq = 1`` and ``last = stamp``; a hit
with ``d = stamp - last > 0`` sets ``freq = freq * exp(-d / 20000) + 1``, otherwise ``freq += 1``,
then ``last = stamp``.  The stamp is the request's ``req_vtime`` (``timestamp=request``, the seeds'
per-request stamp) or the get's ``vtime`` (``timestamp=access``, per-block as in the older build).

Eviction draws ``n-sample`` resident blocks uniformly with replacement (splitmix64, ``seed``) and
evicts the one of lowest ``cost * freq * exp(-r / 20000) / r`` with ``r = max(1, now - last)``;
ties go to the first drawn.  ``evict_n`` takes the ``evict-batch`` lowest distinct candidates of
one sample before drawing again (``evict-batch=1`` is the one-victim-per-sample behaviour).

Pins: honoured.  Draws that land on a pinned block are discarded and redrawn (at most
``4 * n-sample`` draws per sample); if none of them is unpinned the population is scanned in
order for unpinned blocks, and only if every block is pinned is a pinned one taken (best effort).

Memory: base 40 B/slot + dense set 8 + last 8 + freq 8 + cost 8 = 72 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.math cimport exp

from shadow.errors import ShadowError
from shadow.sim.policy cimport Policy, Access

DEFAULTS = "n-sample=128,evict-batch=8,timestamp=request,seed=1"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "sampled eviction of the lowest decayed-frequency x cost / age (PrefixSim fork)"

cdef double DECAY = 20000.0


cdef int dense_init(Dense* d, int64_t cap, bint full_permutation) except -1:
    cdef int64_t i
    d.items = <int32_t*>malloc(max(cap, 1) * sizeof(int32_t))
    d.pos = <int32_t*>malloc(max(cap, 1) * sizeof(int32_t))
    if d.items == NULL or d.pos == NULL:
        free(d.items)
        free(d.pos)
        d.items = NULL
        d.pos = NULL
        raise MemoryError(f"cannot allocate a sampling set of {cap} items")
    for i in range(cap):
        d.items[i] = <int32_t>i if full_permutation else -1
        d.pos[i] = <int32_t>i if full_permutation else -1
    d.n = 0
    d.cap = cap
    return 0


cdef void dense_free(Dense* d) noexcept nogil:
    free(d.items)
    free(d.pos)
    d.items = NULL
    d.pos = NULL


cdef int64_t pick_best(const int32_t* cand, const double* score, int64_t n, int64_t b,
                       int32_t* out, double* out_score) noexcept nogil:
    """Write the up to ``b`` distinct slots of lowest score (ties: earlier draw first) to ``out``,
    in ascending order; return how many."""
    cdef int64_t i, j, m = 0
    cdef int32_t s
    cdef double sc
    cdef bint dup
    for i in range(n):
        s = cand[i]
        sc = score[i]
        if m == b and not (sc < out_score[m - 1]):
            continue
        # NOTE: a repeated draw has the same score as its first occurrence, which is either still
        # in the list (skip it) or was pushed out by strictly better ones (the test above skips it).
        dup = False
        for j in range(m):
            if out[j] == s:
                dup = True
                break
        if dup:
            continue
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
    """See random_compute.pxd."""

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, *args, **kwargs):
        if n_sample < 1 or n_sample > (1 << 30):
            raise ShadowError(f"n-sample must be in 1..2**30, got {n_sample}")
        if evict_batch < 1 or evict_batch > (1 << 30):
            raise ShadowError(f"evict-batch must be in 1..2**30, got {evict_batch}")
        self.n_sample = n_sample
        self.evict_batch = evict_batch
        self.rng = seed
        dense_init(&self.dense, capacity, False)
        self.cand = <int32_t*>malloc(n_sample * sizeof(int32_t))
        self.cand_score = <double*>malloc(n_sample * sizeof(double))
        self.best = <int32_t*>malloc(evict_batch * sizeof(int32_t))
        self.best_score = <double*>malloc(evict_batch * sizeof(double))
        if self.cand == NULL or self.cand_score == NULL or self.best == NULL or self.best_score == NULL:
            raise MemoryError("cannot allocate the sampling buffers")

    def __dealloc__(self):
        dense_free(&self.dense)
        free(self.cand)
        free(self.cand_score)
        free(self.best)
        free(self.best_score)

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        return 0.0

    cdef int64_t _draw(self, int64_t now) noexcept nogil:
        """Fill ``cand``/``cand_score`` with one sample; return its size (0 only if empty)."""
        cdef int64_t nc = 0, attempts = 0, limit = 4 * self.n_sample, i
        cdef int64_t s
        cdef Dense* d = &self.dense
        if d.n == 0:
            return 0
        while nc < self.n_sample and attempts < limit:
            attempts += 1
            s = d.items[rng_below(&self.rng, d.n)]
            if self.pins[s] > 0:
                continue
            self.cand[nc] = <int32_t>s
            self.cand_score[nc] = self._score(s, now)
            nc += 1
        if nc == 0:
            # NOTE: every draw was pinned: look for unpinned blocks in population order, and only
            # if there are none take pinned ones (best effort; the loop never needs this unpinned).
            for i in range(d.n):
                s = d.items[i]
                if self.pins[s] == 0:
                    self.cand[nc] = <int32_t>s
                    self.cand_score[nc] = self._score(s, now)
                    nc += 1
                    if nc == self.n_sample:
                        break
        if nc == 0:
            for i in range(min(d.n, self.n_sample)):
                s = d.items[i]
                self.cand[nc] = <int32_t>s
                self.cand_score[nc] = self._score(s, now)
                nc += 1
        return nc

    cdef int64_t _sample_evict(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        """Evict up to ``n`` blocks of the population, ``evict_batch`` per sample."""
        cdef int64_t k = 0, nc, got, i, s
        while k < n and self.dense.n > 0:
            nc = self._draw(acc.vtime)
            got = pick_best(self.cand, self.cand_score, nc, min(n - k, self.evict_batch),
                            self.best, self.best_score)
            for i in range(got):
                s = self.best[i]
                dense_del(&self.dense, s, False)
                out[k] = self._drop_slot(s)
                k += 1
        return k

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t victim = 0
        if self.evict_n(acc, 1, &victim) == 1:
            return victim
        return 0

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        return self._sample_evict(acc, n, out)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.dense.pos[slot] >= 0:
            dense_del(&self.dense, slot, False)
        self._drop_slot(slot)

    def population(self) -> list[int]:
        """Ids of the sampling population in draw-index order (tests)."""
        cdef int64_t i
        return [self.slot_ids[self.dense.items[i]] for i in range(self.dense.n)]


cdef class RandomCompute(SampledPolicy):
    """See the module docstring."""

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, bint per_request=True, *args, **kwargs):
        self.per_request = per_request
        self.st = <RCStat*>malloc(capacity * sizeof(RCStat))
        if self.st == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.st)

    cdef void _init_stats(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef RCStat* st = &self.st[slot]
        st.last = acc.req_vtime if self.per_request else acc.vtime
        st.freq = 1.0
        st.cost = acc.cost

    cdef void _touch(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef RCStat* st = &self.st[slot]
        cdef int64_t stamp = acc.req_vtime if self.per_request else acc.vtime
        cdef int64_t d = stamp - st.last
        if d > 0:
            st.freq = st.freq * exp(-<double>d / DECAY) + 1.0
        else:
            st.freq += 1.0
        st.last = stamp
        st.cost = acc.cost

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        cdef const RCStat* st = &self.st[slot]
        cdef int64_t r = now - st.last
        if r < 1:
            r = 1
        return <double>st.cost * st.freq * exp(-<double>r / DECAY) / <double>r

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._touch(slot, acc)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._init_stats(slot, acc)
        dense_add(&self.dense, slot)
        return slot

    def stats(self, block_id: int) -> tuple:
        """(last, freq, cost) of a resident block (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return (self.st[s].last, self.st[s].freq, self.st[s].cost)


def check_sampling_params(name: str, params: dict) -> None:
    """Clear errors for the parameters every sampling policy shares."""
    if not 1 <= int(params["n-sample"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: n-sample must be in 1..2**30, got {params['n-sample']}")
    if not 1 <= int(params["evict-batch"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: evict-batch must be in 1..2**30, got {params['evict-batch']}")
    if int(params["seed"]) < 0 or int(params["seed"]) >= (1 << 64):
        raise ShadowError(f"policy {name}: seed must be in 0..2**64-1, got {params['seed']}")
    if "timestamp" in params and params["timestamp"] not in ("request", "access"):
        raise ShadowError(f"policy {name}: timestamp must be 'request' or 'access', got {params['timestamp']!r}")


def make(capacity: int, params: dict) -> RandomCompute:
    check_sampling_params("random_compute", params)
    return RandomCompute(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                         int(params["seed"]), params["timestamp"] == "request")
