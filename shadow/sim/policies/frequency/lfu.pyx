# cython: language_level=3
"""LFU (libCacheSim 0.3.5 ``LFU.c``): frequency buckets, O(1) per operation.

An insert enters the frequency-1 bucket; a hit moves the block from bucket f to the bucket f+1,
each time *behind* the blocks already there.  Evict takes the front of the lowest non-empty
bucket: among the least frequently used blocks, the one that reached that frequency first.

Buckets form a list sorted by frequency (``up`` = next higher); only non-empty buckets exist, so
there are at most ``n_resident`` of them.  The bucket pool starts small and doubles when it runs
out (amortised; the number of distinct frequencies is usually tiny).

Pins: honoured.  The victim is the first unpinned block of the lowest bucket (in bucket order),
then of the buckets above; if every block is pinned the plain candidate is taken.

Memory: base 22 B/slot + links 8 + bucket index 4 = 12 B/slot of LFU's own state, plus 28 B per
distinct resident frequency.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, realloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport LR_RING_MIN
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="least frequently used, ties by time of reaching the frequency (libCacheSim LFU)",
    family="frequency",
    weight=1.2,
    libcachesim="LFU",
    prefixsim_evictions=True,
)


cdef class LFU(Policy):
    """See the module docstring; attributes and bucket operations in lfu.pxd."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        cdef int64_t i
        self.prev = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.next = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.bucket = <int32_t*>malloc(capacity * sizeof(int32_t))
        if self.prev == NULL or self.next == NULL or self.bucket == NULL:
            raise MemoryError(f"cannot allocate an LFU cache of {capacity} slots")
        for i in range(capacity):
            self.prev[i] = -1
            self.next[i] = -1
            self.bucket[i] = -1
        self.nb_cap = 0
        self.bfree = -1
        self.lowest = -1
        self.deep_prefetch = capacity >= LR_RING_MIN
        if self._grow() < 0:
            raise MemoryError("cannot allocate LFU buckets")

    def __dealloc__(self):
        free(self.prev)
        free(self.next)
        free(self.bucket)
        free(self.bfreq)
        free(self.bfront)
        free(self.bback)
        free(self.bup)
        free(self.bdown)

    cdef int _grow(self) noexcept nogil:
        cdef int32_t old = self.nb_cap, cap = self.nb_cap * 2 if self.nb_cap else 64, i
        cdef int64_t* f = <int64_t*>realloc(self.bfreq, cap * sizeof(int64_t))
        if f == NULL:
            return -1
        self.bfreq = f
        cdef int32_t* a = <int32_t*>realloc(self.bfront, cap * sizeof(int32_t))
        if a == NULL:
            return -1
        self.bfront = a
        a = <int32_t*>realloc(self.bback, cap * sizeof(int32_t))
        if a == NULL:
            return -1
        self.bback = a
        a = <int32_t*>realloc(self.bup, cap * sizeof(int32_t))
        if a == NULL:
            return -1
        self.bup = a
        a = <int32_t*>realloc(self.bdown, cap * sizeof(int32_t))
        if a == NULL:
            return -1
        self.bdown = a
        for i in range(old, cap):
            self.bup[i] = i + 1 if i + 1 < cap else self.bfree
        self.bfree = old
        self.nb_cap = cap
        return 0

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._lfu_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._lfu_insert(slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s = self._lfu_victim(False)
        if s < 0:
            return 0
        self._unlink(s)
        if self.deep_prefetch:
            self._prefetch_next()
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._unlink(slot)
        self._drop_slot(slot)

    def buckets(self) -> list[tuple[int, list[int]]]:
        """(frequency, ids from the next victim to the newest) per bucket, lowest first."""
        cdef int32_t b = self.lowest, s
        out = []
        while b >= 0:
            ids = []
            s = self.bfront[b]
            while s >= 0:
                ids.append(self.slot_id(s))
                s = self.next[s]
            out.append((self.bfreq[b], ids))
            b = self.bup[b]
        return out


def make(capacity: int, params: dict) -> LFU:
    return LFU(capacity)
