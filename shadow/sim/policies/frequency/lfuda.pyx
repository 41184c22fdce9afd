# cython: language_level=3
"""LFUDA, LFU with dynamic aging, as libCacheSim implements it (``LFUDA.c``, 0.3.5).

State: ``L`` (libCacheSim's ``min_freq``, 0 at the start) and frequency buckets keyed by a block's
key ``f``, each a queue in the order blocks entered it.

* insert: ``f = L + 1``, appended to the back of bucket ``f``;
* hit: ``f = f + L`` (not ``f + 1``: before the first eviction ``L`` is 0 and a hit only moves the
  block to the back of its bucket).  If the block left bucket ``L`` and emptied it, ``L`` moves
  up to the lowest non-empty bucket above it *before* the block joins its new bucket, so a block
  whose new key lies in a gap below that bucket ends up below ``L``;
* evict: the front of bucket ``L`` (bucket 1 while ``L`` is 0); ``L`` becomes that bucket's key,
  and if the bucket is then empty ``L`` moves up to the lowest non-empty bucket above it (it
  stays if there is none).

NOTE: libCacheSim dereferences NULL (segfault) when bucket ``L`` is empty at an eviction: after
an eviction or a hit left no bucket above ``L``, or when the blocks left are all below ``L``.
Here the victim then comes from the lowest non-empty bucket, and ``L`` becomes its key.  Keys
saturate at 2**63 - 1 (libCacheSim's int64 would overflow).

Pins: honoured.  The candidates are the ordinary victim's bucket from front to back, then the
buckets above it, then those below it, each in key order; the first unpinned one is the victim.
If every block is pinned the ordinary victim is taken.  ``L`` is set from the ordinary victim's
bucket either way; it moves up only if that bucket is left empty.

One list holds every resident block sorted by (key, time of entering its bucket), so each bucket
is a run of it, and a hash map finds a bucket by key (only non-empty buckets exist, at most
``n_resident``).  A new bucket is placed by walking up the buckets from the block's old one (a
hit) or from bucket ``L`` (an insert), past the keys in between.

Memory: base 22 B/slot + list 8 + bucket index 4 + a bucket per slot (key 8, front 4, back 4) +
the key map (24 per slot, ``IdMap``) = 74 B/slot, all allocated up front.
"""

from libc.stdint cimport int64_t, int32_t, INT64_MAX
from libc.stdlib cimport malloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport DList, dl_init, dl_free, dl_push_head, dl_push_tail, dl_unlink
from shadow.sim.core.idtable cimport IdMap, idmap_init, idmap_free, idmap_get, idmap_put, idmap_del
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="LFU with dynamic aging: key L+1 on insert, key+L on a hit (libCacheSim LFUDA)",
    family="frequency",
    weight=1.5,
)


cdef inline int64_t sat_add(int64_t a, int64_t b) noexcept nogil:
    """``a + b`` for ``a, b >= 0``, saturating at INT64_MAX."""
    if a > INT64_MAX - b:
        return INT64_MAX
    return a + b


cdef class LFUDA(Policy):
    """See the module docstring.  Invariants: ``order`` holds every resident slot sorted by
    (key, time of entering its bucket), so each non-empty bucket is the run ``bfront ..
    bback`` of it; ``keymap`` maps exactly the keys of the non-empty buckets to them."""

    cdef DList order         # head: the lowest bucket's front
    cdef int32_t* bucket     # per slot
    # per bucket (``capacity`` of them: at most ``n_resident`` are ever in use)
    cdef int64_t* bfreq
    cdef int32_t* bfront
    cdef int32_t* bback      # also the free-bucket chain
    cdef int32_t bfree
    cdef IdMap keymap
    cdef readonly int64_t L

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        cdef int64_t i, n = max(capacity, 1)
        dl_init(&self.order, n)
        self.bucket = <int32_t*>malloc(n * sizeof(int32_t))
        self.bfreq = <int64_t*>malloc(n * sizeof(int64_t))
        self.bfront = <int32_t*>malloc(n * sizeof(int32_t))
        self.bback = <int32_t*>malloc(n * sizeof(int32_t))
        if self.bucket == NULL or self.bfreq == NULL or self.bfront == NULL or self.bback == NULL:
            raise MemoryError(f"cannot allocate an LFUDA cache of {capacity} slots")
        idmap_init(&self.keymap, n)
        for i in range(n):
            self.bucket[i] = -1
            self.bback[i] = <int32_t>(i + 1) if i + 1 < n else -1
        self.bfree = 0
        self.L = 0

    def __dealloc__(self):
        dl_free(&self.order)
        free(self.bucket)
        free(self.bfreq)
        free(self.bfront)
        free(self.bback)
        idmap_free(&self.keymap)

    cdef inline int32_t _above(self, int32_t b) noexcept nogil:
        """The next non-empty bucket up from ``b`` (-1: none)."""
        cdef int32_t q = self.order.next[self.bback[b]]
        return self.bucket[q] if q >= 0 else -1

    cdef void _join(self, int64_t s, int64_t key, int32_t below) noexcept nogil:
        """Append ``s`` to the bucket of ``key``, making the bucket if there is none; a new one
        goes after the last bucket with a smaller key, found by walking up from ``below`` (a
        bucket with a smaller key, or -1: from the lowest)."""
        cdef int32_t b = idmap_get(&self.keymap, key), after, above
        if b < 0:
            if below < 0 and self.order.head >= 0 and self.bfreq[self.bucket[self.order.head]] < key:
                below = self.bucket[self.order.head]
            if below >= 0:
                above = self._above(below)
                while above >= 0 and self.bfreq[above] < key:
                    below = above
                    above = self._above(below)
            b = self.bfree
            self.bfree = self.bback[b]
            self.bfreq[b] = key
            self.bfront[b] = <int32_t>s
            idmap_put(&self.keymap, key, b)
            after = self.bback[below] if below >= 0 else -1
        else:
            after = self.bback[b]
        self.bback[b] = <int32_t>s
        self.bucket[s] = b
        if after < 0:
            dl_push_head(&self.order, s)
        elif after == self.order.tail:
            dl_push_tail(&self.order, s)
        else:
            self.order.prev[s] = after
            self.order.next[s] = self.order.next[after]
            self.order.prev[self.order.next[after]] = <int32_t>s
            self.order.next[after] = <int32_t>s
            self.order.n += 1

    cdef void _leave(self, int64_t s) noexcept nogil:
        """Take ``s`` out of its bucket.  An emptied bucket is dropped; if it was bucket ``L``,
        ``L`` moves up to the next non-empty bucket (libCacheSim's ``update_min_freq``)."""
        cdef int32_t b = self.bucket[s], above
        if self.bfront[b] == s and self.bback[b] == s:
            above = self._above(b)
            if self.bfreq[b] == self.L and above >= 0:
                self.L = self.bfreq[above]
            idmap_del(&self.keymap, self.bfreq[b])
            self.bback[b] = self.bfree
            self.bfree = b
        elif self.bfront[b] == s:
            self.bfront[b] = self.order.next[s]
        elif self.bback[b] == s:
            self.bback[b] = self.order.prev[s]
        dl_unlink(&self.order, s)
        self.bucket[s] = -1

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int32_t b = self.bucket[slot], p, below = b
        cdef int64_t f = self.bfreq[b]
        cdef int64_t nf = sat_add(f, self.L)
        if self.bfront[b] == slot and self.bback[b] == slot:
            if nf == f:
                return                  # alone in its bucket: already at its back
            p = self.order.prev[slot]
            below = self.bucket[p] if p >= 0 else -1
        # NOTE: nf == f (L is 0: no eviction yet): libCacheSim re-appends to the same bucket
        self._leave(slot)
        self._join(slot, nf, below)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._join(slot, sat_add(self.L, 1), idmap_get(&self.keymap, self.L) if self.L >= 1 else -1)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t b0, s, first
        if self.order.head < 0:
            return 0
        # libCacheSim's min-frequency node if it is non-empty, else the lowest bucket
        b0 = idmap_get(&self.keymap, self.L if self.L >= 1 else 1)
        if b0 < 0:
            b0 = self.bucket[self.order.head]
        self.L = self.bfreq[b0]
        first = self.bfront[b0]
        s = first
        if self.n_pinned > 0:
            # NOTE: bucket b0 and those above run to the tail, those below from the head
            while self.pins[s] > 0:
                s = self.order.next[s]
                if s < 0:
                    s = self.order.head
                if s == first:
                    break               # every resident block is pinned: best effort
        self._leave(s)
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._leave(slot)
        self._drop_slot(slot)

    def buckets(self) -> list[tuple[int, list[int]]]:
        """(key, ids from the front to the back) per non-empty bucket, lowest key first."""
        cdef int32_t s = self.order.head, b = -1
        out = []
        ids = None
        while s >= 0:
            if self.bucket[s] != b:
                b = self.bucket[s]
                ids = []
                out.append((self.bfreq[b], ids))
            ids.append(self.slot_id(s))
            s = self.order.next[s]
        return out


def make(capacity: int, params: dict) -> LFUDA:
    return LFUDA(capacity)
