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

from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies._dlist cimport chain_prefetch_victims, LR_RING_MIN
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="least frequently used, ties by time of reaching the frequency (libCacheSim LFU)",
    family="frequency",
    weight=1.2,
    libcachesim="LFU",
    prefixsim_evictions=True,
)


cdef class LFU(Policy):
    """See the module docstring."""

    # per slot
    cdef int32_t* prev       # towards the front of its bucket (older)
    cdef int32_t* next       # towards the back of its bucket (newer)
    cdef int32_t* bucket
    # per bucket
    cdef int64_t* bfreq
    cdef int32_t* bfront     # next victim of the bucket
    cdef int32_t* bback
    cdef int32_t* bup        # next higher-frequency bucket
    cdef int32_t* bdown
    cdef int32_t nb_cap
    cdef int32_t bfree       # free-bucket chain through ``bup``
    cdef int32_t lowest      # lowest-frequency bucket, -1 when empty
    cdef bint deep_prefetch  # prefetch the next victims (a cache too large for the L2)

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

    cdef inline int32_t _new_bucket(self, int64_t freq, int32_t below) noexcept nogil:
        """A new empty bucket of ``freq`` placed just above ``below`` (-1: at the bottom)."""
        cdef int32_t b, above
        if self.bfree < 0:
            if self._grow() < 0:
                self.nomem = 1      # NOTE: the cache fails after this request (no raise here)
                return -1
        b = self.bfree
        self.bfree = self.bup[b]
        self.bfreq[b] = freq
        self.bfront[b] = -1
        self.bback[b] = -1
        above = self.bup[below] if below >= 0 else self.lowest
        self.bdown[b] = below
        self.bup[b] = above
        if below >= 0:
            self.bup[below] = b
        else:
            self.lowest = b
        if above >= 0:
            self.bdown[above] = b
        return b

    cdef inline void _drop_bucket(self, int32_t b) noexcept nogil:
        cdef int32_t below = self.bdown[b], above = self.bup[b]
        if below >= 0:
            self.bup[below] = above
        else:
            self.lowest = above
        if above >= 0:
            self.bdown[above] = below
        self.bup[b] = self.bfree
        self.bfree = b

    cdef inline void _append(self, int32_t b, int64_t s) noexcept nogil:
        cdef int32_t back = self.bback[b]
        self.bucket[s] = b
        self.next[s] = -1
        self.prev[s] = back
        if back >= 0:
            self.next[back] = <int32_t>s
        else:
            self.bfront[b] = <int32_t>s
        self.bback[b] = <int32_t>s

    cdef inline void _unlink(self, int64_t s) noexcept nogil:
        """Take ``s`` out of its bucket; an emptied bucket is dropped."""
        cdef int32_t b = self.bucket[s], p = self.prev[s], q = self.next[s]
        if p >= 0:
            self.next[p] = q
        else:
            self.bfront[b] = q
        if q >= 0:
            self.prev[q] = p
        else:
            self.bback[b] = p
        self.prev[s] = -1
        self.next[s] = -1
        self.bucket[s] = -1
        if self.bfront[b] < 0:
            self._drop_bucket(b)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int32_t b = self.bucket[slot], up = self.bup[b], nb
        cdef int64_t f = self.bfreq[b] + 1
        if up >= 0 and self.bfreq[up] == f:
            nb = up
        else:
            nb = self._new_bucket(f, b)
            if nb < 0:
                return
        self._unlink(slot)
        self._append(nb, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        cdef int32_t b = self.lowest
        if b < 0 or self.bfreq[b] != 1:
            b = self._new_bucket(1, -1)
            if b < 0:
                # NOTE: out of memory (``nomem`` set): a bucket exists (only more than 64 in use
                # make one grow), so join the lowest, whatever its frequency.
                b = self.lowest
        self._append(b, slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t b = self.lowest, s = -1
        while b >= 0:
            s = self.bfront[b]
            while s >= 0 and self.pins[s] > 0:
                s = self.next[s]
            if s >= 0:
                break
            b = self.bup[b]
        if s < 0:
            if self.lowest < 0:
                return 0
            s = self.bfront[self.lowest]
        self._unlink(s)
        if self.deep_prefetch:
            self._prefetch_next()
        return self._drop_slot(s)

    cdef inline void _prefetch_next(self) noexcept nogil:
        """Start loading the table entries of the next victim (the lowest bucket's front) and
        of the one two evictions ahead in that bucket."""
        if self.lowest >= 0:
            chain_prefetch_victims(self.next, self.bfront[self.lowest], &self.table,
                                   &self.slot_ids, self.pins)

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
