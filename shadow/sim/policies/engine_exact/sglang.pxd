# cython: language_level=3
"""SGLang's RadixCache order: the class and its release as an inline method (serve loop
``K_SGLANG``); hit, insert and evict are lru.pxd's."""

from libc.stdint cimport int64_t

from shadow.sim.policies.recency.lru cimport LRU


cdef class SGLang(LRU):
    cdef inline void fast_release(self, int64_t slot) noexcept nogil:
        # NOTE: cache_finished_req's insert stamps the request's whole path again
        self.fast_hit(slot)
