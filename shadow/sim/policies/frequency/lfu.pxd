# cython: language_level=3
"""LFU's class and its bucket operations (lfu.pyx), cimported by the policies that keep an LFU
order beside their own (lecar, cacheus).

Invariant: every resident slot is in exactly one bucket (``bucket[s]``), linked from its
bucket's front (``bfront``, the next victim) to its back (``bback``, the newest arrival) through
``next``/``prev``; buckets are non-empty, sorted by ``bfreq`` from ``lowest`` upwards through
``bup`` (``bdown`` back); free buckets are chained through ``bup`` from ``bfree``.
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport chain_prefetch_victims


cdef class LFU(Policy):
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

    cdef int _grow(self) noexcept nogil

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

    cdef inline void _lfu_hit(self, int64_t slot) noexcept nogil:
        """Move ``slot`` from its bucket f to the back of bucket f+1."""
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

    cdef inline void _lfu_insert(self, int64_t slot) noexcept nogil:
        """Put the new ``slot`` at the back of bucket 1."""
        cdef int32_t b = self.lowest
        if b < 0 or self.bfreq[b] != 1:
            b = self._new_bucket(1, -1)
            if b < 0:
                # NOTE: out of memory (``nomem`` set): a bucket exists (only more than 64 in use
                # make one grow), so join the lowest, whatever its frequency.
                b = self.lowest
        self._append(b, slot)

    cdef inline int32_t _lfu_victim(self, bint newest) noexcept nogil:
        """The first unpinned slot of the lowest bucket from its front (``newest``: from its
        back), then of the buckets above; that bucket's plain end if every slot is pinned; -1
        if empty."""
        cdef int32_t b = self.lowest, s = -1
        while b >= 0:
            s = self.bback[b] if newest else self.bfront[b]
            while s >= 0 and self.pins[s] > 0:
                s = self.prev[s] if newest else self.next[s]
            if s >= 0:
                return s
            b = self.bup[b]
        if self.lowest < 0:
            return -1
        return self.bback[self.lowest] if newest else self.bfront[self.lowest]

    cdef inline void _prefetch_next(self) noexcept nogil:
        """Start loading the table entries of the next victim (the lowest bucket's front) and
        of the one two evictions ahead in that bucket."""
        if self.lowest >= 0:
            chain_prefetch_victims(self.next, self.bfront[self.lowest], &self.table,
                                   &self.slot_ids, self.pins)
