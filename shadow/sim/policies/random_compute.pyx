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
from libc.stdlib cimport malloc, realloc, free
from libc.math cimport exp

from shadow.errors import ShadowError
from shadow.sim.policy cimport Policy, Access

DEFAULTS = "n-sample=128,n-refill=8,timestamp=request,seed=1"
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


cdef inline bint _cand_lt(const Cand* a, const Cand* b) noexcept nogil:
    if a.score != b.score:
        return a.score < b.score
    return a.seq < b.seq


cdef class SampledPolicy(Policy):
    """See random_compute.pxd."""

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t n_refill=8,
                  uint64_t seed=1, *args, **kwargs):
        if n_sample < 1 or n_sample > (1 << 30):
            raise ShadowError(f"n-sample must be in 1..2**30, got {n_sample}")
        if n_refill < 1 or n_refill > (1 << 30):
            raise ShadowError(f"n-refill must be in 1..2**30, got {n_refill}")
        self.n_sample = n_sample
        self.n_refill = n_refill
        self.rng = seed
        dense_init(&self.dense, capacity, False)
        self.hcap = 2 * n_sample + 64
        self.heap = <Cand*>malloc(self.hcap * sizeof(Cand))
        self.hn = 0
        if self.heap == NULL:
            raise MemoryError("cannot allocate the sampling buffers")

    def __dealloc__(self):
        dense_free(&self.dense)
        free(self.heap)

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        return 0.0

    cdef bint _push(self, int32_t slot, int64_t now) noexcept nogil:
        """Add a candidate to the heap; False if the heap cannot grow (the draw is dropped)."""
        cdef Cand c
        cdef Cand* grown
        cdef int64_t i, p
        if self.hn == self.hcap:
            grown = <Cand*>realloc(self.heap, 2 * self.hcap * sizeof(Cand))
            if grown == NULL:
                return False
            self.heap = grown
            self.hcap *= 2
        c.score = self._score(slot, now)
        c.seq = self.seq
        c.slot = slot
        self.seq += 1
        i = self.hn
        self.hn += 1
        while i > 0:
            p = (i - 1) >> 1
            if not _cand_lt(&c, &self.heap[p]):
                break
            self.heap[i] = self.heap[p]
            i = p
        self.heap[i] = c
        return True

    cdef int32_t _pop_live(self) noexcept nogil:
        """Pop candidates until one is still resident (an earlier pop of a repeated draw may
        have evicted it); -1 when the heap runs out."""
        cdef Cand top, last
        cdef int64_t i, c
        while self.hn > 0:
            top = self.heap[0]
            self.hn -= 1
            last = self.heap[self.hn]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= self.hn:
                    break
                if c + 1 < self.hn and _cand_lt(&self.heap[c + 1], &self.heap[c]):
                    c += 1
                if not _cand_lt(&self.heap[c], &last):
                    break
                self.heap[i] = self.heap[c]
                i = c
            if self.hn > 0:
                self.heap[i] = last
            if self.slot_ids[top.slot] != 0:
                return top.slot
        return -1

    cdef int64_t _draw(self, int64_t want, int64_t now) noexcept nogil:
        """Draw ``want`` unpinned candidates with replacement (at most ``4 * want`` tries)."""
        cdef int64_t nc = 0, attempts = 0, s
        cdef Dense* d = &self.dense
        if d.n == 0:
            return 0
        while nc < want and attempts < 4 * want:
            attempts += 1
            s = d.items[rng_below(&self.rng, d.n)]
            if self.pins[s] > 0:
                continue
            self._push(<int32_t>s, now)
            nc += 1
        return nc

    cdef int64_t _fallback(self, int64_t now) noexcept nogil:
        """No live candidate was drawn: take the first ``n_sample`` unpinned blocks in population
        order, or, if every block is pinned, the first ``n_sample`` blocks (best effort)."""
        cdef int64_t nc = 0, i, s
        cdef Dense* d = &self.dense
        for i in range(d.n):
            s = d.items[i]
            if self.pins[s] == 0:
                self._push(<int32_t>s, now)
                nc += 1
                if nc == self.n_sample:
                    return nc
        if nc == 0:
            for i in range(min(d.n, self.n_sample)):
                self._push(<int32_t>d.items[i], now)
                nc += 1
        return nc

    cdef int64_t _sample_evict(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        """Evict up to ``n`` blocks of the population: the lowest-scored of everything drawn so
        far in this call, after ``n_sample`` draws for the first victim and ``n_refill`` more for
        each further one."""
        cdef int64_t k = 0
        cdef int32_t s
        self.hn = 0
        self.seq = 0
        while k < n and self.dense.n > 0:
            self._draw(self.n_sample if k == 0 else self.n_refill, acc.vtime)
            s = self._pop_live()
            if s < 0:
                self._fallback(acc.vtime)
                s = self._pop_live()
                if s < 0:
                    break
            dense_del(&self.dense, s, False)
            out[k] = self._drop_slot(s)
            k += 1
        self.hn = 0
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

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t n_refill=8,
                  uint64_t seed=1, bint per_request=True, *args, **kwargs):
        self.per_request = per_request
        self.last = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.freq = <double*>malloc(capacity * sizeof(double))
        self.cost = <int64_t*>malloc(capacity * sizeof(int64_t))
        if self.last == NULL or self.freq == NULL or self.cost == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.last)
        free(self.freq)
        free(self.cost)

    cdef void _init_stats(self, int64_t slot, const Access* acc) noexcept nogil:
        self.last[slot] = acc.req_vtime if self.per_request else acc.vtime
        self.freq[slot] = 1.0
        self.cost[slot] = acc.cost

    cdef void _touch(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int64_t stamp = acc.req_vtime if self.per_request else acc.vtime
        cdef int64_t d = stamp - self.last[slot]
        if d > 0:
            self.freq[slot] = self.freq[slot] * exp(-<double>d / DECAY) + 1.0
        else:
            self.freq[slot] += 1.0
        self.last[slot] = stamp
        self.cost[slot] = acc.cost

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        cdef int64_t r = now - self.last[slot]
        if r < 1:
            r = 1
        return <double>self.cost[slot] * self.freq[slot] * exp(-<double>r / DECAY) / <double>r

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
        return (self.last[s], self.freq[s], self.cost[s])


def check_sampling_params(name: str, params: dict) -> None:
    """Clear errors for the parameters every sampling policy shares."""
    if not 1 <= int(params["n-sample"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: n-sample must be in 1..2**30, got {params['n-sample']}")
    if not 1 <= int(params["n-refill"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: n-refill must be in 1..2**30, got {params['n-refill']}")
    if int(params["seed"]) < 0 or int(params["seed"]) >= (1 << 64):
        raise ShadowError(f"policy {name}: seed must be in 0..2**64-1, got {params['seed']}")
    if "timestamp" in params and params["timestamp"] not in ("request", "access"):
        raise ShadowError(f"policy {name}: timestamp must be 'request' or 'access', got {params['timestamp']!r}")


def make(capacity: int, params: dict) -> RandomCompute:
    check_sampling_params("random_compute", params)
    return RandomCompute(capacity, int(params["n-sample"]), int(params["n-refill"]),
                         int(params["seed"]), params["timestamp"] == "request")
