# cython: language_level=3
"""belady: exact offline MIN (libCacheSim Belady), evict the resident block reused farthest ahead.

Each resident block carries the ``next_access`` of its last get (absolute forward vtime; -1, never
reused, counts as +infinity).  A binary max-heap over the slots orders them by
``(next_access, block id)``; the block id only breaks ties among never-reused blocks (next-access
vtimes of distinct blocks are distinct), which makes the victim a function of the cache contents
alone, so the reference and any other exact implementation pick the very same block.

NOTE: the annotation counts vtime forward through the file while gets are replayed deepest block
first; the two agree at request boundaries and differ by at most the request length inside one.
Belady compares next accesses only with each other, never with the clock, so this skew cannot
change a decision.  A block whose next access fell in a request the loop skipped would keep a
stale, too-early next access: the loop must hand over next-access values recomputed without
skipped requests.

Pins: honoured.  Pinned blocks at the top of the heap are set aside until an unpinned one
surfaces, then put back; if every block is pinned the top is taken (best effort).

Memory: base 22 B/slot + next 8 + heap 4 + heap index 4 = 38 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, INT64_MAX
from libc.stdlib cimport malloc, realloc, free

from shadow.sim.core.policy cimport Policy, Access, slot_is_free
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="offline optimum: evict the block whose next access is farthest (libCacheSim Belady)",
    family="oracle",
    needs_future=True,
    weight=1.3,
    libcachesim="Belady",
    prefixsim_evictions=True,
)


cdef class Belady(Policy):
    """See the module docstring.  Invariant: ``heap[0 .. hn)`` is a max-heap of the resident slots
    under :meth:`_above`, and ``hpos[heap[i]] == i``."""
    cdef int64_t* key          # next access of the slot's block, INT64_MAX for never
    cdef int32_t* heap
    cdef int32_t* hpos
    cdef int64_t hn
    cdef int32_t* stash        # pinned tops set aside during one eviction
    cdef int64_t stash_cap

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.key = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.heap = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.hpos = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.hn = 0
        self.stash = NULL
        self.stash_cap = 0
        if self.key == NULL or self.heap == NULL or self.hpos == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.key)
        free(self.heap)
        free(self.hpos)
        free(self.stash)

    cdef inline bint _above(self, int32_t a, int32_t b) noexcept nogil:
        """True if slot ``a`` is evicted before slot ``b``."""
        if self.key[a] != self.key[b]:
            return self.key[a] > self.key[b]
        return self.slot_id(a) > self.slot_id(b)

    cdef inline void _place(self, int64_t i, int32_t s) noexcept nogil:
        self.heap[i] = s
        self.hpos[s] = <int32_t>i

    cdef void _sift_up(self, int64_t i) noexcept nogil:
        cdef int32_t s = self.heap[i]
        cdef int64_t p
        while i > 0:
            p = (i - 1) >> 1
            if not self._above(s, self.heap[p]):
                break
            self._place(i, self.heap[p])
            i = p
        self._place(i, s)

    cdef void _sift_down(self, int64_t i) noexcept nogil:
        cdef int32_t s = self.heap[i]
        cdef int64_t c
        while True:
            c = 2 * i + 1
            if c >= self.hn:
                break
            if c + 1 < self.hn and self._above(self.heap[c + 1], self.heap[c]):
                c += 1
            if not self._above(self.heap[c], s):
                break
            self._place(i, self.heap[c])
            i = c
        self._place(i, s)

    cdef void _push(self, int32_t s) noexcept nogil:
        self.heap[self.hn] = s
        self.hpos[s] = <int32_t>self.hn
        self.hn += 1
        self._sift_up(self.hn - 1)

    cdef void _delete(self, int32_t s) noexcept nogil:
        """Take slot ``s`` out of the heap."""
        cdef int64_t i = self.hpos[s]
        cdef int32_t last
        self.hn -= 1
        self.hpos[s] = -1
        if i == self.hn:
            return
        last = self.heap[self.hn]
        self._place(i, last)
        if i > 0 and self._above(last, self.heap[(i - 1) >> 1]):
            self._sift_up(i)
        else:
            self._sift_down(i)

    cdef inline void _set_key(self, int64_t slot, int64_t next_access) noexcept nogil:
        self.key[slot] = next_access if next_access >= 0 else INT64_MAX

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int64_t old = self.key[slot]
        self._set_key(slot, acc.next_access)
        if self.key[slot] > old:
            self._sift_up(self.hpos[slot])
        elif self.key[slot] < old:
            self._sift_down(self.hpos[slot])

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._set_key(slot, acc.next_access)
        self._push(<int32_t>slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t k = 0, i
        cdef int32_t s
        cdef int32_t* grown
        if self.hn == 0:
            return 0
        s = self.heap[0]
        # NOTE: set aside pinned tops; they go back unchanged, so the order is not disturbed.
        while self.pins[s] > 0 and self.hn > 1:
            if k == self.stash_cap:
                grown = <int32_t*>realloc(self.stash, (2 * self.stash_cap + 64) * sizeof(int32_t))
                if grown == NULL:
                    self.nomem = 1
                    break
                self.stash = grown
                self.stash_cap = 2 * self.stash_cap + 64
            self.stash[k] = s
            k += 1
            self._delete(s)
            s = self.heap[0]
        if self.pins[s] > 0 and k > 0:
            # NOTE: every block is pinned: take the overall top, the first set aside (best effort).
            s = self.stash[0]
        else:
            self._delete(s)
        for i in range(k):
            if self.stash[i] != s:
                self._push(self.stash[i])
        return self._drop_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._delete(<int32_t>slot)
        self._drop_slot(slot)

    def order(self) -> list[int]:
        """Resident ids in eviction order, first victim first (tests; O(n log n))."""
        cdef int64_t s
        items = [(self.key[s], self.slot_id(s)) for s in range(self.capacity)
                 if not slot_is_free(&self.slot_ids, s)]
        items.sort(reverse=True)
        return [bid for _, bid in items]

    def check(self) -> None:
        """Assert the heap invariant (tests)."""
        cdef int64_t i
        assert self.hn == self.n_resident, (self.hn, self.n_resident)
        for i in range(self.hn):
            assert self.hpos[self.heap[i]] == i
            if i > 0:
                assert not self._above(self.heap[i], self.heap[(i - 1) >> 1]), i


def make(capacity: int, params: dict) -> Belady:
    return Belady(capacity)
