# cython: language_level=3
"""CLOCK (libCacheSim ``Clock``, ``n-bit-counter=1,init-freq=0``) as a queue with reinsertion.

A hit raises the block's counter (capped at ``2**n_bit_counter - 1``); inserts go to the head with
``init-freq``.  Eviction looks at the tail: a block with a counter >= 1 loses one and moves to the
head, the first block with 0 is evicted.

Pins: honoured.  A pinned block with counter 0 is passed over in place (its counter untouched)
and the scan goes on towards the head; if the scan runs out, every candidate was pinned and the
first pinned candidate met (what the unpinned policy would have taken) is evicted.
Memory: base 22 B/slot + list 8 B/slot + counter 1 B/slot = 31 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport DList, dl_init, dl_free, dl_unlink
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="CLOCK / second chance with an n-bit counter (libCacheSim Clock)",
    family="recency",
    defaults="n-bit-counter=1,init-freq=0",
    strict_pins=True,
    libcachesim="Clock",
    prefixsim_evictions=True,
)


cdef class Clock(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of clock.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        dl_init(&self.q, capacity)
        self.freq = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.freq == NULL:
            raise MemoryError()
        self.max_freq = 1
        self.init_freq = 0

    def __init__(self, int64_t capacity, int n_bit_counter=1, int init_freq=0):
        if not 1 <= n_bit_counter <= 8:
            raise ValueError("n-bit-counter must be 1..8")
        self.max_freq = <uint8_t>((1 << n_bit_counter) - 1)
        if not 0 <= init_freq <= self.max_freq:
            raise ValueError(f"init-freq must be 0..{self.max_freq}")
        self.init_freq = <uint8_t>init_freq

    def __dealloc__(self):
        dl_free(&self.q)
        free(self.freq)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.q, slot)
        self._drop_slot(slot)


def make(capacity: int, params: dict) -> Clock:
    return Clock(capacity, int(params.get("n-bit-counter", 1)), int(params.get("init-freq", 0)))
