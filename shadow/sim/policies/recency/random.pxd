# cython: language_level=3
"""The ``random`` policy's class, cimported by the sampled-recency policies (randomtwo, randomlru)."""

from libc.stdint cimport int64_t, int32_t, uint64_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies.cost_aware.random_compute cimport Dense


cdef class Random(Policy):
    cdef Dense dense            # the resident slots, dense in items[0 .. n) (the draw population)
    cdef uint64_t rng           # splitmix64 state

    cdef int64_t _draws(self, int64_t k, int32_t* cand) noexcept nogil
    cdef int64_t _evict_slot(self, int64_t slot) noexcept nogil
