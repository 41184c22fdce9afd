# cython: language_level=3
"""Segmented LRU (libCacheSim 0.3.5 ``SLRU.c``): ``n-seg`` LRU segments, segment 0 the lowest.

Segment sizes: libCacheSim makes each ``C // n-seg``; here the remainder ``C % n-seg`` goes one
block each to the lowest segments, so the segments always cover the cache.  Identical to
libCacheSim when ``C`` is a multiple of ``n-seg``; otherwise libCacheSim's segment 0 runs over its
size and a *hit* can evict (an eviction inside the access phase, which the loop cannot allow).

* insert: the head of the lowest segment with room (the loop guarantees a free slot, so one has).
* hit: in the top segment the block moves to its head; otherwise it moves to the head of the next
  segment, and while that segment is over its size its tail is *cooled* to the head of the segment
  below, cascading; cooling segment 0 would evict its tail (cannot happen while the segments cover
  the cache; kept for fidelity).
* evict: the tail of the lowest non-empty segment.

Pins: honoured.  The victim is the first unpinned block from the tail of the lowest non-empty
segment, then of the segments above; if every block is pinned the plain candidate is taken.  A
spilled eviction skips pinned blocks within segment 0 only.

Memory: base 22 B/slot + lists 8 + segment tag 1 = 31 B/slot (measured: docs/performance.md,
"Memory per slot").
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport calloc, malloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head, chain_prefetch_victims, LR_RING_MIN)
from shadow.sim.policies.adaptive.s3fifo cimport dl_first_unpinned
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="segmented LRU, n-seg equal segments (libCacheSim SLRU)",
    family="frequency",
    defaults="n-seg=4",
    weight=1.3,
    libcachesim="SLRU",
)

cdef enum:
    MAX_SEG = 16


cdef class SLRU(Policy):
    """See the module docstring.  All segments share one pair of link arrays."""

    cdef DList segs[MAX_SEG]
    cdef uint8_t* seg_of
    cdef readonly int n_seg
    cdef int64_t seg_size[MAX_SEG]
    cdef bint deep_prefetch   # prefetch along segment 0 (a cache too large for the L2)

    def __cinit__(self, int64_t capacity, int n_seg=4, *args, **kwargs):
        cdef int i
        self.n_seg = n_seg
        for i in range(n_seg):
            self.seg_size[i] = capacity // n_seg + (1 if i < capacity % n_seg else 0)
        dl_init(&self.segs[0], capacity)
        for i in range(1, n_seg):
            self.segs[i] = self.segs[0]
        self.deep_prefetch = capacity >= LR_RING_MIN
        self.seg_of = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        if self.seg_of == NULL:
            raise MemoryError(f"cannot allocate an SLRU cache of {capacity} slots")

    def __dealloc__(self):
        dl_free(&self.segs[0])     # NOTE: every segment shares segment 0's arrays
        free(self.seg_of)

    cdef void _cool(self, int i) noexcept nogil:
        """Move segment ``i``'s tail down one segment (segment 0: evict it), cascading."""
        cdef int32_t s
        if i == 0:
            s = dl_first_unpinned(&self.segs[0], self.pins)
            if s < 0:
                s = self.segs[0].tail
            dl_unlink(&self.segs[0], s)
            self._drop_slot(s)
            return
        s = self.segs[i].tail
        dl_unlink(&self.segs[i], s)
        self.seg_of[s] = <uint8_t>(i - 1)
        dl_push_head(&self.segs[i - 1], s)
        while self.segs[i - 1].n > self.seg_size[i - 1]:
            self._cool(i - 1)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int i = self.seg_of[slot]
        if i == self.n_seg - 1:
            dl_move_head(&self.segs[i], slot)
            return
        dl_unlink(&self.segs[i], slot)
        self.seg_of[slot] = <uint8_t>(i + 1)
        dl_push_head(&self.segs[i + 1], slot)
        while self.segs[i + 1].n > self.seg_size[i + 1]:
            self._cool(i + 1)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int i, seg = 0
        cdef int64_t slot
        for i in range(self.n_seg):
            if self.segs[i].n + 1 <= self.seg_size[i]:
                seg = i
                break
        slot = self._take_slot(acc.block_id)
        self.seg_of[slot] = <uint8_t>seg
        dl_push_head(&self.segs[seg], slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int i
        cdef int32_t s
        for i in range(self.n_seg):
            s = dl_first_unpinned(&self.segs[i], self.pins)
            if s >= 0:
                dl_unlink(&self.segs[i], s)
                if self.deep_prefetch and i == 0:
                    # NOTE: victims come from segment 0's tail: start loading the table entries
                    # of the next one and of the one two evictions ahead.
                    chain_prefetch_victims(self.segs[0].prev, self.segs[0].tail, &self.table,
                                           &self.slot_ids, self.pins)
                return self._drop_slot(s)
        for i in range(self.n_seg):
            s = self.segs[i].tail
            if s >= 0:
                dl_unlink(&self.segs[i], s)
                return self._drop_slot(s)
        return 0

    cdef void remove(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.segs[self.seg_of[slot]], slot)
        self._drop_slot(slot)

    @property
    def seg_sizes(self) -> list[int]:
        return [self.seg_size[i] for i in range(self.n_seg)]

    def segments(self) -> list[list[int]]:
        """Ids per segment (0 = lowest), each from the head (most recent) to the tail."""
        cdef int i
        cdef int32_t s
        out = []
        for i in range(self.n_seg):
            ids = []
            s = self.segs[i].head
            while s >= 0:
                ids.append(self.slot_id(s))
                s = self.segs[i].next[s]
            out.append(ids)
        return out


def make(capacity: int, params: dict) -> SLRU:
    n_seg = int(params.get("n-seg", 4))
    if not 1 <= n_seg <= MAX_SEG:
        raise ShadowError(f"policy slru: n-seg must be in [1, {MAX_SEG}], got {n_seg}")
    return SLRU(capacity, n_seg)
