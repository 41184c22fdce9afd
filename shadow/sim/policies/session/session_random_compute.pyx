# cython: language_level=3
"""session_random_compute: sampled session eviction by cost over idle time (the PrefixSim fork's
SessionRandomCompute).

``n-sample`` draws with replacement from the live sessions (a dense pool: a new session is
appended, a dropped one replaced by the last; splitmix64 seeded by ``seed``, the sampling
policies' draws); the session of lowest ``cost_sum / max(now - last, 1)`` goes (``now - last``: its
idle time in recorded requests), the first drawn winning ties.  ``cost_sum`` is the insert cost of
every claimed block of its latest path, shared ones included.
Memory: _base's + 4 B of pool a live session.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free

from shadow.sim.policies.session._base cimport SessionBase, Sess
from shadow.sim.policies.cost_aware.random_compute cimport rng_below
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="session-level RandomCompute: of n-sample sampled sessions evicts the lowest "
                "claimed cost / idle turns (PrefixSim fork sessionCache.cpp)",
    family="session",
    defaults="n-sample=8,seed=1",
    strict_pins=True,
    weight=2.0,
)


cdef class SessionRandomCompute(SessionBase):
    cdef int32_t* pool
    cdef int64_t pn
    cdef int64_t pcap_
    cdef int64_t n_sample
    cdef uint64_t rng

    def __cinit__(self, int64_t capacity, int64_t n_sample=8, uint64_t seed=1):
        self.n_sample = n_sample
        self.rng = seed
        self.pcap_ = 64
        self.pool = <int32_t*>malloc(self.pcap_ * sizeof(int32_t))
        if self.pool == NULL:
            raise MemoryError()
        self.pn = 0

    def __dealloc__(self):
        free(self.pool)

    cdef int32_t _select(self) noexcept nogil:
        cdef int64_t i, k
        cdef int32_t s, best = -1
        cdef double age, score, best_score = 0.0
        if self.pn == 0:
            return -1
        k = min(self.pn, max(1, self.n_sample))
        for i in range(k):
            s = self.pool[rng_below(&self.rng, self.pn)]
            age = <double>(self.now - self.sess[s].last)
            score = <double>self.sess[s].cost_sum / (age if age > 1.0 else 1.0)
            if best < 0 or score < best_score:
                best = s
                best_score = score
        return best

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        cdef int32_t* np
        if not is_new:
            return
        if self.pn == self.pcap_:
            np = <int32_t*>realloc(self.pool, 2 * self.pcap_ * sizeof(int32_t))
            if np == NULL:
                self.nomem = 1
                return
            self.pool = np
            self.pcap_ *= 2
        self.sess[s].pos = <int32_t>self.pn
        self.pool[self.pn] = s
        self.pn += 1

    cdef void _on_removed(self, int32_t s) noexcept nogil:
        cdef int32_t i = self.sess[s].pos, last
        if i < 0:
            return
        self.pn -= 1
        last = self.pool[self.pn]
        self.pool[i] = last
        self.sess[last].pos = i
        self.sess[s].pos = -1


def make(capacity: int, params: dict) -> SessionRandomCompute:
    n = int(params["n-sample"])
    seed = int(params["seed"])
    if n < 1:
        raise ValueError(f"n-sample must be at least 1, got {n}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in 0 .. 2**64 - 1, got {seed}")
    return SessionRandomCompute(capacity, n, seed)
