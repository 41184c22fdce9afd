# cython: language_level=3
"""2Q (libCacheSim 0.3.5 ``TwoQ.c``): Ain a FIFO, Aout a FIFO of ghost ids, Am an LRU.

Sizes: ``Ain = int(C * Ain-size-ratio)``, ``Aout = int(C * Aout-size-ratio)``, ``Am = C - Ain``.

* hit: in Ain nothing happens; in Am the block moves to Am's head.
* insert: an id in Aout leaves it and goes to Am's head; libCacheSim inserts through ``Am->get``,
  so a full Am first evicts its own LRU tail (a *spilled* eviction, outside ``evict``: the loop sees
  ``n_resident`` drop); otherwise the id goes to Ain's head.
* evict: Am's tail when Am is non-empty and Ain holds at most its size; otherwise Ain's tail,
  whose id enters Aout (a full Aout drops its oldest id).

Pins: honoured.  The chosen queue's first unpinned block from the tail is the victim; a queue with
only pinned blocks sends the eviction to the other one; if both have none the plain candidate is
taken.  A spilled Am eviction skips pinned blocks within Am only.

Memory: base 22 B/slot + lists 8 + queue tag 1 B/slot + Aout ghosts (a ghost ring: 13 B per
entry, 18 once an id past 2**31 - 1 has been pushed; ``Aout-size-ratio`` of C); measured with
Aout empty and full: docs/performance.md, "Memory per slot".
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access, RequestCtx
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head, dl_prefetch_walk, LR_RING_MIN)
from shadow.sim.policies.adaptive.s3fifo cimport dl_first_unpinned
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove,
                                         gr_push_bounded, gr_ids, gr_prefetch)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="2Q: FIFO Ain, ghost FIFO Aout, LRU Am (libCacheSim TwoQ)",
    family="adaptive",
    defaults="Ain-size-ratio=0.25,Aout-size-ratio=0.5",
    weight=1.6,
    libcachesim="TwoQ",
)


cdef class TwoQ(Policy):
    """See the module docstring.  ``ain``/``am`` share one pair of link arrays."""

    cdef DList ain
    cdef DList am
    cdef uint8_t* in_am
    cdef GhostRing aout
    cdef readonly int64_t ain_size, aout_size, am_size
    cdef bint deep_prefetch   # prefetch along the lists (a cache too large for the L2)

    def __cinit__(self, int64_t capacity, double ain_ratio=0.25, double aout_ratio=0.5,
                  *args, **kwargs):
        self.ain_size = <int64_t>(capacity * ain_ratio)
        self.aout_size = <int64_t>(capacity * aout_ratio)
        self.am_size = capacity - self.ain_size
        dl_init(&self.ain, capacity)
        self.am = self.ain
        self.in_am = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.in_am == NULL:
            raise MemoryError(f"cannot allocate a 2Q cache of {capacity} slots")
        gr_init(&self.aout, self.aout_size, &self.nomem)
        self.deep_prefetch = capacity >= LR_RING_MIN

    def __dealloc__(self):
        dl_free(&self.ain)     # NOTE: am shares ain's arrays
        free(self.in_am)
        gr_free(&self.aout)

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        """Prefetch the ghost table entries the request's inserts will probe (its misses)."""
        cdef int64_t i
        # NOTE: the serve loop prefetches the resident table only; the ghost probe of each
        # miss is a cache miss of its own at large sizes unless it is started here.
        if self.aout.limit > 0:
            for i in range(ctx.n_blocks):
                gr_prefetch(&self.aout, ctx.block_ids[i])

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        if self.in_am[slot]:
            dl_move_head(&self.am, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos = gr_find(&self.aout, acc.block_id)
        cdef int32_t s
        cdef int64_t slot
        if pos >= 0:
            gr_remove(&self.aout, pos)
            # NOTE: libCacheSim's Am->get evicts Am's own tail when Am is at its size, even
            # if the whole cache has room: a spilled eviction.
            while self.am.n + 1 > self.am_size and self.am.n > 0:
                s = dl_first_unpinned(&self.am, self.pins)
                if s < 0:
                    s = self.am.tail
                dl_unlink(&self.am, s)
                self._drop_slot(s)
            slot = self._take_slot(acc.block_id)
            self.in_am[slot] = 1
            dl_push_head(&self.am, slot)
        else:
            slot = self._take_slot(acc.block_id)
            self.in_am[slot] = 0
            dl_push_head(&self.ain, slot)
        return slot

    cdef inline int64_t _from_am(self) noexcept nogil:
        cdef int32_t s = dl_first_unpinned(&self.am, self.pins)
        if s < 0:
            return 0
        dl_unlink(&self.am, s)
        return self._drop_slot(s)

    cdef inline int64_t _from_ain(self, bint force) noexcept nogil:
        cdef int32_t s = self.ain.tail if force else dl_first_unpinned(&self.ain, self.pins)
        cdef int64_t block_id
        if s < 0:
            return 0
        dl_unlink(&self.ain, s)
        block_id = self._drop_slot(s)
        gr_push_bounded(&self.aout, block_id)
        return block_id

    cdef inline void _prefetch_victim(self, int32_t s, bint ghost) noexcept nogil:
        cdef int64_t block_id = self.slot_id(s)
        self.prefetch(block_id)
        if ghost and self.aout.limit > 0:
            gr_prefetch(&self.aout, block_id)

    cdef inline void _prefetch_next(self, DList* d, bint ghost) noexcept nogil:
        """Start loading what the next evictions from ``d`` touch, as ARC does: the table
        entries of its tail and (:c:func:`dl_prefetch_walk`) of the slot two before it, and
        their Aout homes for Ain, whose victims enter Aout."""
        cdef int32_t q
        if d.tail < 0:
            return
        self._prefetch_victim(d.tail, ghost)
        q = dl_prefetch_walk(d, &self.slot_ids, self.pins)
        if q >= 0:
            self._prefetch_victim(q, ghost)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t victim = self._evict()
        if self.deep_prefetch:
            self._prefetch_next(&self.ain, True)
            self._prefetch_next(&self.am, False)
        return victim

    cdef inline int64_t _evict(self) noexcept nogil:
        cdef int64_t victim
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        if self.am.n > 0 and self.ain.n <= self.ain_size:
            victim = self._from_am()
            if victim == 0:
                victim = self._from_ain(False)
            if victim == 0:
                s = self.am.tail
                dl_unlink(&self.am, s)
                victim = self._drop_slot(s)
        else:
            victim = self._from_ain(False)
            if victim == 0:
                victim = self._from_am()
            if victim == 0:
                victim = self._from_ain(True)
        return victim

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.in_am[slot]:
            dl_unlink(&self.am, slot)
        else:
            dl_unlink(&self.ain, slot)
        self._drop_slot(slot)

    def queues(self) -> dict[str, list[int]]:
        """Ids per queue from the head (newest / most recent) to the tail."""
        cdef int32_t s
        out = {"ain": [], "am": [], "aout": []}
        s = self.ain.head
        while s >= 0:
            out["ain"].append(self.slot_id(s))
            s = self.ain.next[s]
        s = self.am.head
        while s >= 0:
            out["am"].append(self.slot_id(s))
            s = self.am.next[s]
        out["aout"] = gr_ids(&self.aout)
        return out


def make(capacity: int, params: dict) -> TwoQ:
    ain = float(params.get("Ain-size-ratio", 0.25))
    aout = float(params.get("Aout-size-ratio", 0.5))
    if not 0.0 <= ain < 1.0:
        raise ShadowError(f"policy twoq: Ain-size-ratio must be in [0, 1), got {ain}")
    if not 0.0 <= aout <= 4.0:
        raise ShadowError(f"policy twoq: Aout-size-ratio must be in [0, 4], got {aout}")
    return TwoQ(capacity, ain, aout)
