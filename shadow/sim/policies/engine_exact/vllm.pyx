# cython: language_level=3
"""vLLM's BlockPool eviction order: an LRU *free queue* keyed on release order.

A block is in the free queue iff no running request holds it (its reference count is 0).  A hit
takes the block out of the queue (vLLM's ``touch``) and raises its count; an insert starts at 1,
outside the queue; ``on_release`` lowers the count and, at 0, appends the block at the queue's
most-recent end.  The loop releases a request's blocks tail first (vLLM's
``free_blocks(reversed(req_blocks))``), so within one request the deepest block is evicted first
and the root last; eviction pops the least-recent end.

How it differs from ``lru``: recency is the *release* time, not the access time, and blocks held
by running requests are not evictable at all.  Offline (``feed``: each request released right
after its access phase, deepest-first replay) the order equals ``lru``'s; with prefix-order replay
or live admissions (``admit`` ... ``release``) it does not.  Not modelled: vLLM stops matching at
the first miss and may hold duplicate copies of a hash (see docs/sim.md).

Pins: honoured (skip pinned blocks still in the queue; all pinned: the least recent).  Returns 0
when the free queue is empty (every resident block is held by a running request).
Memory: base 22 B/slot + free-queue ring 12 B/slot (``LRing``, policies/_shared/dlist.pxd) + count 4 B/slot
= 38 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.core.idtable cimport shadow_big_calloc
from shadow.sim.policies._shared.dlist cimport LRing, lr_init, lr_free, lr_drop
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="vLLM BlockPool: LRU free queue in release order, tail blocks released first",
    family="engine-exact",
    strict_pins=True,
    weight=1.3,
)


cdef class VLLM(Policy):
    """See the module docstring; the operations are the inline ``fast_*`` methods of vllm.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        lr_init(&self.q, capacity)
        self.ref = <int32_t*>shadow_big_calloc(capacity, sizeof(int32_t))
        if self.ref == NULL:
            raise MemoryError()
        self.wants_release = True

    def __dealloc__(self):
        lr_free(&self.q)
        free(self.ref)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef void on_release(self, int64_t slot) noexcept nogil:
        self.fast_release(slot)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self._queued(slot):
            lr_drop(&self.q, slot)
        self.ref[slot] = 0
        self._drop_slot(slot)

    def free_queue(self) -> list[int]:
        """Ids in the free queue from the next victim to the most recently released."""
        out = []
        cdef int64_t i
        for i in range(self.q.t, self.q.w):
            if self.q.pos[self.q.r[i]] == <uint32_t>i:
                out.append(self.slot_id(self.q.r[i]))
        return out


def make(capacity: int, params: dict) -> VLLM:
    return VLLM(capacity)
