# cython: language_level=3
"""The ``randomtwo`` policy's class, cimported by randomlru (the same choice over more draws)."""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policies.recency.random cimport Random


cdef class RandomTwo(Random):
    cdef int64_t* stamp         # per slot: vtime of the block's last get (insert or hit)
    cdef int32_t* cand          # scratch: the drawn slots (k)
    cdef int64_t k              # draws per eviction
    cdef bint ties_later        # equal stamps: the later draw goes (else the earlier)
