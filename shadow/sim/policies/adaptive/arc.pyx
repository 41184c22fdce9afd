# cython: language_level=3
"""ARC (libCacheSim 0.3.5 ``ARC.c``): resident LRU lists T1/T2, ghost lists B1/B2, adaptive ``p``.

* hit: a block in T1 or T2 moves to T2's head.
* insert: an id in B1 leaves it, ``p = min(p + max(|B2|/|B1|, 1), C)`` (sizes before the removal),
  and goes to T2's head; an id in B2 leaves it, ``p = max(p - max(|B1|/|B2|, 1), 0)``, T2's head;
  otherwise T1's head.  (libCacheSim adapts ``p`` in ``find`` during the same ``get``; the serve
  loop has already made room, so no eviction falls in between and the order is immaterial.)
* evict: libCacheSim's case IV ("miss on all queues"), the only one its ``evict`` runs from the
  serve loop: if ``|T1| + |B1| + 1 > C``: with B1 non-empty drop B1's tail then REPLACE, else evict
  T1's tail without a ghost; otherwise drop B2's tail if ``|T1|+|B1|+|T2|+|B2| >= 2C`` and B2 is
  non-empty, then REPLACE.  REPLACE: if ``(|T1| > 0 and |T1| > p) or |T2| == 0`` T1's tail moves to
  B1's head, else T2's tail moves to B2's head.

Pins: honoured.  The chosen list's first unpinned block from the tail is the victim (it still
becomes a ghost of that list); a list with only pinned blocks sends the eviction to the other list;
if neither has one the plain tail is taken.

Memory: base 22 B/slot (18 from 32k slots: ``TABLE_PER_SLOT``) + lists 8 + list tag 1 B/slot + one ghost ring for B1 and B2 sized for
C + 16 ids (16 B per id: 4 B x 2 in the ring, 4 B x 2 in its table (x 8 below 32k slots); 8 B
more once an id past 2**31 - 1 has been pushed; B1 and B2 together hold at most about C ids once
the cache is full; the ring grows by half when a burst of evictions needs more); measured with
the ghosts empty and full: docs/performance.md, "Memory per slot".
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport DList, dl_init, dl_free, dl_unlink, LR_RING_MIN
from shadow.sim.policies._shared.ghost cimport gr_init, gr_free, gr_ids
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="ARC: adaptive replacement cache, T1/T2 with ghosts B1/B2 (libCacheSim ARC)",
    family="adaptive",
    weight=1.8,
    libcachesim="ARC",
)


cdef class ARC(Policy):
    """See the module docstring.  ``t1``/``t2`` share one pair of link arrays; B1/B2 one pool.

    The operations are the inline ``fast_*`` methods of arc.pxd.
    """
    TABLE_PER_SLOT = 3    # NOTE: resident table 12 B/slot from 32k slots (budget: see Memory)

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        dl_init(&self.t1, capacity)
        self.t2 = self.t1
        self.in_t2 = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.in_t2 == NULL:
            raise MemoryError(f"cannot allocate an ARC cache of {capacity} slots")
        # NOTE: B2's oldest ids stay long at the ring's tail while B1 pops past them, leaving
        # tombstones: a ring of twice the ids compacts half as often as the default 1.25.
        gr_init(&self.ghost, capacity + 16, &self.nomem, 2 * (capacity + 16))
        self.b1.n = self.b1.off = 0
        self.b2.n = self.b2.off = 0
        self.p = 0.0
        self.deep_prefetch = capacity >= LR_RING_MIN

    def __dealloc__(self):
        dl_free(&self.t1)      # NOTE: t2 shares t1's arrays
        free(self.in_t2)
        gr_free(&self.ghost)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.in_t2[slot]:
            dl_unlink(&self.t2, slot)
            self.in_t2[slot] = 0
        else:
            dl_unlink(&self.t1, slot)
        self._drop_slot(slot)

    def queues(self) -> dict[str, object]:
        """Ids per list from the head (most recent) to the tail, and ``p``."""
        cdef int32_t s
        out = {"t1": [], "t2": [], "b1": [], "b2": [], "p": self.p}
        s = self.t1.head
        while s >= 0:
            out["t1"].append(self.slot_id(s))
            s = self.t1.next[s]
        s = self.t2.head
        while s >= 0:
            out["t2"].append(self.slot_id(s))
            s = self.t2.next[s]
        for v in gr_ids(&self.ghost):
            if v > 0:
                out["b1"].append(v)
            else:
                out["b2"].append(-v)
        return out


def make(capacity: int, params: dict) -> ARC:
    return ARC(capacity)
