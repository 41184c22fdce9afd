# cython: language_level=3
"""GDSF, greedy dual size frequency (libCacheSim 0.3.5 ``cpp/GDSF.cpp``): a priority min-heap.

Every resident block has a priority ``L + freq * 1e6 / size`` (size 1), set on insert (freq 1)
and on each hit (freq + 1); ``L`` is the priority of the last evicted block.  Evict takes the
lowest priority; equal priorities go by the time of the last insert/hit, oldest first (libCacheSim
orders by ``n_req`` at that time; a per-cache counter gives the same order).  Cost is ignored,
as in libCacheSim; ``cost-aware=true`` (off by default, not libCacheSim) uses ``freq * cost`` with
the access's integer cost instead of ``freq * 1e6``.

Pins: honoured.  The victim is the lowest-priority unpinned block (found by walking the pinned
region at the top of the heap); if every block is pinned the plain minimum is taken.  ``L``
becomes the victim's priority.

Layout (for caches far beyond L2, where every cache line a sift touches is a memory access): a
**4-ary** heap of 16-byte entries (priority, 32-bit stamp, slot), aligned so that the four
children of a node share one 64-byte line: a sift touches half the levels of a binary heap and
one line per level.  The stamps only order entries of equal priority, so only their relative
order matters: when the 32-bit counter runs out, the live stamps are renumbered ``0 .. n-1`` in
the same order (in place, O(n log n), once per ~4e9 inserts/hits), which changes no comparison.

Memory: base 22 B/slot + heap entry 16 + position 4 + freq 4 = 46 B/slot below 32k slots; from
32k slots the resident table keeps 3 entries a slot instead of 4 (``TABLE_PER_SLOT``): 42 B/slot,
under the 48 B budget (measured: docs/performance.md, "Memory per slot").
"""

from libc.stdint cimport int64_t, int32_t, uint16_t, uint32_t
from libc.stdlib cimport malloc, free

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.core.idtable cimport slotmap_prefetch, sids_addr
from shadow.sim.registry import PolicySpec

cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)

SPEC = PolicySpec(
    description="greedy dual size frequency: priority L + freq*1e6/size (libCacheSim GDSF)",
    family="cost-aware",
    defaults="cost-aware=false",
    weight=2.5,
    libcachesim="GDSF",
)

# NOTE: the stamp value that triggers a renumbering; lowered only by tests (set_stamp_limit).
cdef int64_t _stamp_limit = 0xFFFFFFFF


def set_stamp_limit(limit: int) -> int:
    """Set the stamp value at which new caches renumber their stamps (tests); return the old one."""
    global _stamp_limit
    old = _stamp_limit
    _stamp_limit = max(2, min(int(limit), 0xFFFFFFFF))
    return old


cdef class GDSF(Policy):
    """See the module docstring (attributes: gdsf.pxd).  Invariants: ``heap[0 .. n_heap)`` is a 4-ary min-heap on
    (priority, stamp) (children of ``i``: ``4i+1 .. 4i+4``); ``pos[heap[i].slot] == i``; the live
    stamps are distinct and below ``clock + 1``."""
    TABLE_PER_SLOT = 3    # NOTE: resident table 12 B/slot from 32k slots (budget: see Memory)

    def __cinit__(self, int64_t capacity, bint cost_aware=False, *args, **kwargs):
        # NOTE: entry 0 sits 48 bytes into a 64-byte line, so entries 4i+1 .. 4i+4 (the children
        # of i) fill exactly one line.
        if posix_memalign(<void**>&self.heap_raw, 64, (capacity + 4) * sizeof(HeapEnt)) != 0:
            self.heap_raw = NULL
        self.heap = self.heap_raw + 3 if self.heap_raw != NULL else NULL
        self.pos = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        self.freq = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        if self.heap_raw == NULL or self.pos == NULL or self.freq == NULL:
            raise MemoryError(f"cannot allocate a GDSF cache of {capacity} slots")
        self.n_heap = 0
        self.clock = 0
        # NOTE: a renumbering leaves the stamps 0 .. n-1: the limit must leave room above that.
        self.stamp_limit = max(_stamp_limit, capacity + 1)
        self.n_renumber = 0
        self.L = 0.0
        self.cost_aware = cost_aware

    def __dealloc__(self):
        free(self.heap_raw)
        free(self.pos)
        free(self.freq)

    cdef void _up(self, int64_t i, HeapEnt e) noexcept nogil:
        """Place ``e`` at hole ``i``, sifting it towards the root."""
        cdef int64_t parent
        cdef HeapEnt* heap = self.heap
        while i > 0:
            parent = (i - 1) >> 2
            if not ent_less(&e, &heap[parent]):
                break
            heap[i] = heap[parent]
            self.pos[heap[i].slot] = <int32_t>i
            i = parent
        heap[i] = e
        self.pos[e.slot] = <int32_t>i

    cdef void _down(self, int64_t i, HeapEnt e) noexcept nogil:
        """Place ``e`` at hole ``i``, sifting it towards the leaves."""
        cdef int64_t c, m, last, n = self.n_heap
        cdef HeapEnt* heap = self.heap
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            m = c
            last = c + 3 if c + 3 < n else n - 1
            c += 1
            while c <= last:
                if ent_less(&heap[c], &heap[m]):
                    m = c
                c += 1
            if not ent_less(&heap[m], &e):
                break
            heap[i] = heap[m]
            self.pos[heap[i].slot] = <int32_t>i
            i = m
        heap[i] = e
        self.pos[e.slot] = <int32_t>i

    cdef void _renumber(self) noexcept nogil:
        """Give the live entries the stamps ``0 .. n-1`` in their current stamp order (so every
        comparison stays the same) and restart the clock at ``n``.  ``pos`` serves as the
        scratch array of heap indices (a heapsort by stamp) and is rebuilt afterwards."""
        cdef int64_t n = self.n_heap, i, end, root, child
        cdef int32_t* idx = self.pos
        cdef HeapEnt* heap = self.heap
        cdef int32_t t
        for i in range(n):
            idx[i] = <int32_t>i
        # heapsort of idx[0 .. n) by heap[idx[.]].stamp, ascending (a binary max-heap)
        i = n // 2
        end = n
        while end > 1:
            if i > 0:
                i -= 1
                root = i
            else:
                end -= 1
                t = idx[end]
                idx[end] = idx[0]
                idx[0] = t
                root = 0
            while True:
                child = 2 * root + 1
                if child >= end:
                    break
                if child + 1 < end and heap[idx[child + 1]].stamp > heap[idx[child]].stamp:
                    child += 1
                if heap[idx[child]].stamp > heap[idx[root]].stamp:
                    t = idx[child]
                    idx[child] = idx[root]
                    idx[root] = t
                    root = child
                else:
                    break
        for i in range(n):
            heap[idx[i]].stamp = <uint32_t>i
        for i in range(n):
            self.pos[heap[i].slot] = <int32_t>i
        self.clock = n
        self.n_renumber += 1

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.freq[slot] += 1
        self._place(slot, self.L + <double>self.freq[slot] * self._weight(acc))

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self._add(acc.block_id, self.L + self._weight(acc))

    cdef int64_t _min_unpinned(self) noexcept nogil:
        """Heap index of the lowest unpinned entry, the root being pinned; -1 if none.

        NOTE: it is an unpinned child of a pinned node that is reachable from the root through
        pinned nodes only.  That pinned region (the request's own blocks, usually few) is walked
        depth first without a stack: down to a node's first pinned child, else on to the next
        pinned sibling of the node or of its nearest ancestor that has one."""
        cdef int64_t n = self.n_heap, best = -1, cur = 0, c, first, last, j
        cdef const HeapEnt* heap = self.heap
        cdef const uint16_t* pins = self.pins
        while True:
            # the children of cur: unpinned ones are candidates, the first pinned one is next
            first = -1
            c = 4 * cur + 1
            last = c + 3 if c + 3 < n else n - 1
            while c <= last:
                if pins[heap[c].slot] > 0:
                    if first < 0:
                        first = c
                elif best < 0 or ent_less(&heap[c], &heap[best]):
                    best = c
                c += 1
            if first >= 0:
                cur = first
                continue
            # no pinned child: the next pinned sibling of cur or of an ancestor
            while cur > 0:
                last = ((cur - 1) >> 2) * 4 + 4
                if last > n - 1:
                    last = n - 1
                j = cur + 1
                while j <= last and pins[heap[j].slot] == 0:
                    j += 1
                if j <= last:
                    cur = j
                    break
                cur = (cur - 1) >> 2
            if cur == 0:
                return best

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t best = -1, victim
        cdef HeapEnt e
        if self.n_heap == 0:
            return 0
        if self.pins[self.heap[0].slot] > 0:
            best = self._min_unpinned()
        if best < 0:
            # NOTE: start loading the victim's base table entry before the sift, which hides it.
            slotmap_prefetch(&self.table, self.slot_id(self.heap[0].slot))
            e = self._pop()          # the minimum (best effort when everything is pinned)
        else:
            e = self.heap[best]
            self._delete(e.slot)
        self.L = e.pri
        victim = self._drop_slot(e.slot)
        if self.n_heap > 0:
            # NOTE: evictions come in runs (a request's misses): the next root is the next victim.
            __builtin_prefetch(&self.pins[self.heap[0].slot])
            __builtin_prefetch(sids_addr(&self.slot_ids, self.heap[0].slot))
        return victim

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._delete(slot)
        self._drop_slot(slot)

    def order(self) -> list[tuple[int, float]]:
        """(id, priority) of the resident blocks from the next victim on (heap sorted; tests)."""
        cdef int64_t i
        items = [(self.heap[i].pri, self.heap[i].stamp, self.slot_id(self.heap[i].slot))
                 for i in range(self.n_heap)]
        items.sort()
        return [(b, p) for p, _, b in items]

    def check_heap(self) -> None:
        """Assert the heap and position invariants (tests)."""
        cdef int64_t i
        for i in range(1, self.n_heap):
            assert not ent_less(&self.heap[i], &self.heap[(i - 1) >> 2]), i
        for i in range(self.n_heap):
            assert self.pos[self.heap[i].slot] == i, i
        assert len({self.heap[i].stamp for i in range(self.n_heap)}) == self.n_heap


def make(capacity: int, params: dict) -> GDSF:
    return GDSF(capacity, bool(params.get("cost-aware", False)))
