# cython: language_level=3
"""CAR, Clock with Adaptive Replacement (Bansal & Modha, FAST'04; the PrefixSim fork's
libCacheSim ``CAR.c``, ``p=0``).

T1 and T2 are clocks of resident blocks with a reference bit each; B1 and B2 hold the ids they
demoted (ghosts); ``p`` (a double) is T1's target size.  A clock appends at its tail and its hand
reads its head.  Parameter ``p``: the starting ``p`` (the fork's default 0; one above C is C).

* hit: the block's reference bit is set.
* insert: an id in B1 leaves it, ``p = min(p + max(1, |B2| // |B1|), C)`` (integer division, sizes
  before the removal: the C code's int64 sizes), and the block enters T2's tail; an id in B2
  leaves it, ``p = max(p - max(1, |B1| // |B2|), 0)``, T2's tail; otherwise T1's tail.  The bit
  starts clear.  (CAR.c adapts ``p`` in ``find`` during the block's own ``get``, after the room for
  it was made: the serve loop makes room for a request first, so the order is the same.)
* evict: REPLACE, then if ``|T1| + |B1| >= C`` B1's oldest id is dropped, else if
  ``|T1| + |T2| + |B1| + |B2| >= 2C`` B2's oldest (the paper's directory bound).  REPLACE loops:
  take T1 if ``|T1| >= max(1, p)`` (T2 if T1 is empty, T1 if T2 is); a head with its bit set has
  it cleared and moves to T2's tail (from T1 or T2); else the head is evicted and its id becomes
  B1's (from T1) or B2's (from T2) newest ghost.  Every ``evict`` replaces (the fork's fix; the
  original replaced only when the cache was full, which stalls a loop that makes room for a whole
  request first).

Pins: honoured.  A pinned head whose bit is clear moves to its own clock's tail: the hand passes
it, as a referenced head is passed, but it keeps its clock and its (clear) bit.  A clock whose hand
has passed all of its blocks pinned with nothing else happening to it meanwhile is exhausted for
this eviction and the other clock is taken; when both are, every resident block is pinned and the
chosen clock's head is evicted (best effort).  So a pinned block is never the victim while an
unpinned one is resident.

The lists, ghost ring, ``p`` and ``remove`` are ARC's (``CAR`` extends ``policies.arc.ARC``, whose
T1/T2 ``DList`` heads are CAR's clock tails and whose tails are the hands).

Memory: ARC's + the reference bit 1 B/slot (measured with the ghosts empty and full:
docs/performance.md, "The other policies").
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.policies._shared.dlist cimport DList, dl_push_head, dl_unlink, dl_move_head
from shadow.sim.policies._shared.ghost cimport gr_find, gr_remove, gr_at
from shadow.sim.policies.adaptive.arc cimport ARC
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="CAR: clock with adaptive replacement, clocks T1/T2 with ghosts B1/B2 (PrefixSim fork's CAR)",
    family="adaptive",
    defaults="p=0",
    strict_pins=True,
    weight=2.4,
)


cdef class CAR(ARC):
    """See the module docstring."""

    cdef uint8_t* ref

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.ref = <uint8_t*>calloc(capacity if capacity > 0 else 1, sizeof(uint8_t))
        if self.ref == NULL:
            raise MemoryError(f"cannot allocate a CAR cache of {capacity} slots")

    def __init__(self, int64_t capacity, double p=0.0):
        self.p = p

    def __dealloc__(self):
        free(self.ref)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.ref[slot] = 1

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, acc.block_id), slot, delta
        cdef double cap = <double>self.capacity
        if pos >= 0:
            if gr_at(&self.ghost, pos) > 0:
                delta = self.b2.n // self.b1.n
                self.p = self.p + <double>(delta if delta > 1 else 1)
                if self.p > cap:
                    self.p = cap
                self.b1.n -= 1
            else:
                delta = self.b1.n // self.b2.n
                self.p = self.p - <double>(delta if delta > 1 else 1)
                if self.p < 0.0:
                    self.p = 0.0
                self.b2.n -= 1
            gr_remove(&self.ghost, pos)
            slot = self._take_slot(acc.block_id)
            self.in_t2[slot] = 1
            dl_push_head(&self.t2, slot)
        else:
            slot = self._take_slot(acc.block_id)
            self.in_t2[slot] = 0
            dl_push_head(&self.t1, slot)
        self.ref[slot] = 0
        return slot

    cdef int64_t _car_replace(self) noexcept nogil:
        """REPLACE (see the module docstring); returns the evicted id."""
        cdef int64_t rot1 = 0, rot2 = 0, n1, n2, block_id
        cdef bint use1, done1, done2, best_effort
        cdef int32_t h
        cdef DList* clock
        while True:
            n1 = self.t1.n
            n2 = self.t2.n
            use1 = <double>n1 >= (self.p if self.p > 1.0 else 1.0)
            if n1 == 0:
                use1 = False
            elif n2 == 0:
                use1 = True
            done1 = n1 == 0 or rot1 >= n1
            done2 = n2 == 0 or rot2 >= n2
            best_effort = done1 and done2
            if not best_effort and (done1 if use1 else done2):
                use1 = not use1
            clock = &self.t1 if use1 else &self.t2
            h = clock.tail
            if self.ref[h]:
                self.ref[h] = 0
                if use1:
                    dl_unlink(&self.t1, h)
                    self.in_t2[h] = 1
                    dl_push_head(&self.t2, h)
                    rot1 = 0
                else:
                    dl_move_head(&self.t2, h)
                rot2 = 0
            elif self.pins[h] > 0 and not best_effort:
                # NOTE: the hand passes a pinned block, which keeps its clock and clear bit
                dl_move_head(clock, h)
                if use1:
                    rot1 += 1
                else:
                    rot2 += 1
            else:
                dl_unlink(clock, h)
                self.in_t2[h] = 0
                block_id = self._drop_slot(h)
                self._ghost_push(block_id, not use1)
                return block_id

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t c = self.capacity, block_id
        if self.n_resident == 0:
            return 0
        block_id = self._car_replace()
        if self.t1.n + self.b1.n >= c:
            if self.b1.n > 0:
                self._ghost_pop(False)
        elif self.t1.n + self.t2.n + self.b1.n + self.b2.n >= 2 * c and self.b2.n > 0:
            self._ghost_pop(True)
        # NOTE: the next REPLACE reads (most often) one of the two hands: start loading both.
        self._prefetch_leaving(&self.t1)
        self._prefetch_leaving(&self.t2)
        return block_id

    cdef list _hand_order(self, const DList* d, set refs):
        cdef int32_t s = d.tail
        cdef list out = []
        while s >= 0:
            out.append(self.slot_id(s))
            if self.ref[s]:
                refs.add(self.slot_id(s))
            s = d.prev[s]
        return out

    def clocks(self) -> dict[str, object]:
        """T1 and T2 from the hand to the tail, the ids with their bit set, B1 and B2 oldest
        first, and ``p``."""
        refs = set()
        ghosts = self.queues()       # NOTE: ARC's, newest ghost first
        return {"t1": self._hand_order(&self.t1, refs), "t2": self._hand_order(&self.t2, refs),
                "ref": refs, "b1": ghosts["b1"][::-1], "b2": ghosts["b2"][::-1], "p": self.p}


def make(capacity: int, params: dict) -> CAR:
    p = int(params.get("p", 0))
    if p < 0:
        raise ShadowError(f"policy car: p must be >= 0, got {p}")
    # NOTE: one parameter string serves every cache size: a p above C is C (T1's whole target)
    return CAR(capacity, float(min(p, capacity)))
