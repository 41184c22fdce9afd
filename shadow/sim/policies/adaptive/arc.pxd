# cython: language_level=3
"""ARC's class and its operations as inline methods (called directly by the serve loop, ``K_ARC``)."""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.core.policy cimport Policy
from shadow.sim.policies._shared.dlist cimport (DList, dl_push_head, dl_unlink, dl_move_head,
                                         dl_prefetch_walk)
from shadow.sim.policies.adaptive.s3fifo cimport dl_first_unpinned
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_find, gr_remove, gr_push, gr_prefetch,
                                         gr_key, gr_compact, gr_at)


cdef struct GhostList:
    int64_t n       # live ids of this list in the shared ring
    int64_t off     # offset from the ring's tail before which this list has no live id


cdef class ARC(Policy):
    cdef DList t1
    cdef DList t2
    cdef uint8_t* in_t2
    # NOTE: B1 and B2 share one ring of ids in eviction order (B2's ids negated) and its one
    # position table: a ghost probe is one probe, and the ring holds |B1| + |B2| (about C) ids
    # whichever list has them.  Each list pops its oldest id by scanning from its own offset
    # past the other list's ids and tombstones: the offsets only grow (until the ring's tail
    # passes them or a compaction resets them), so the scan is amortized O(1).
    cdef GhostRing ghost
    cdef GhostList b1
    cdef GhostList b2
    cdef readonly double p
    cdef bint deep_prefetch   # prefetch along the lists (a cache too large for the L2)

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.in_t2[slot]:
            dl_move_head(&self.t2, slot)
        else:
            dl_unlink(&self.t1, slot)
            self.in_t2[slot] = 1
            dl_push_head(&self.t2, slot)

    cdef inline void _ghost_push(self, int64_t block_id, bint second) noexcept nogil:
        if self.ghost.span == self.ghost.cap:
            # NOTE: compact here, carrying the scan offsets over (gr_push would lose them); a
            # ring still full then grows in gr_push, keeping the order and the offsets.
            gr_compact(&self.ghost, &self.b1.off, &self.b2.off)
        # NOTE: counted only if pushed (out of memory it is not: ``nomem``), so a pop never
        # scans for an id the ring does not hold.
        if second:
            if gr_push(&self.ghost, -block_id) == 0:
                self.b2.n += 1
        elif gr_push(&self.ghost, block_id) == 0:
            self.b1.n += 1

    cdef inline void _ghost_pop(self, bint second) noexcept nogil:
        """Drop the oldest id of B2 (``second``) or B1; the list is not empty."""
        cdef GhostRing* g = &self.ghost
        cdef GhostList* L = &self.b2 if second else &self.b1
        cdef int64_t k = L.off, p = g.tail + L.off, v, adv = 0
        if p >= g.cap:
            p -= g.cap
        while True:
            v = gr_at(g, p)
            if (v < 0) if second else (v > 0):
                break
            k += 1
            p = p + 1 if p + 1 < g.cap else 0
        gr_remove(g, p)
        L.n -= 1
        L.off = k + 1
        while g.span > 0 and gr_at(g, g.tail) == 0:
            g.tail = g.tail + 1 if g.tail + 1 < g.cap else 0
            g.span -= 1
            adv += 1
        self.b1.off = self.b1.off - adv if self.b1.off > adv else 0
        self.b2.off = self.b2.off - adv if self.b2.off > adv else 0
        # NOTE: start loading the table entry the next pop of this list deletes (if it is next
        # in the ring; otherwise the scan reads on anyway).
        if L.off < g.span:
            p = g.tail + L.off
            if p >= g.cap:
                p -= g.cap
            v = gr_at(g, p)
            if v != 0:
                gr_prefetch(g, gr_key(v))

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, block_id)
        cdef double delta, cap = <double>self.capacity
        cdef int64_t slot
        if pos >= 0:
            if gr_at(&self.ghost, pos) > 0:
                delta = <double>self.b2.n / <double>self.b1.n
                if delta < 1.0:
                    delta = 1.0
                self.p = self.p + delta
                if self.p > cap:
                    self.p = cap
                self.b1.n -= 1
            else:
                delta = <double>self.b1.n / <double>self.b2.n
                if delta < 1.0:
                    delta = 1.0
                self.p = self.p - delta
                if self.p < 0.0:
                    self.p = 0.0
                self.b2.n -= 1
            gr_remove(&self.ghost, pos)
            slot = self._take_slot(block_id)
            self.in_t2[slot] = 1
            dl_push_head(&self.t2, slot)
        else:
            slot = self._take_slot(block_id)
            self.in_t2[slot] = 0
            dl_push_head(&self.t1, slot)
        return slot

    cdef inline void _prefetch_leaving(self, const DList* d) noexcept nogil:
        """Prefetch what evicting ``d``'s tail into a ghost list touches (its resident-table
        entry: the delete; its ghost-table home: the insert), and from ``LR_RING_MIN`` slots the
        same for the slot two before the tail (:c:func:`dl_prefetch_walk`: one eviction was not
        enough for the table entries to arrive).  Below, the lists sit in the L2 and the walk
        only costs instructions (docs/performance.md, "Measured choices")."""
        cdef int32_t q
        if d.tail < 0:
            return
        self._prefetch_victim(d.tail)
        if self.deep_prefetch:
            q = dl_prefetch_walk(d, &self.slot_ids, self.pins)
            if q >= 0:
                self._prefetch_victim(q)

    cdef inline void _prefetch_victim(self, int32_t s) noexcept nogil:
        cdef int64_t block_id = self.slot_id(s)
        self.prefetch(block_id)
        gr_prefetch(&self.ghost, block_id)

    cdef inline int64_t _replace(self) noexcept nogil:
        """REPLACE: move the chosen list's tail (first unpinned) to its ghost list."""
        cdef int64_t n1 = self.t1.n, n2 = self.t2.n, block_id
        cdef bint from_t1 = (n1 > 0 and <double>n1 > self.p) or n2 == 0
        cdef int32_t s
        s = dl_first_unpinned(&self.t1 if from_t1 else &self.t2, self.pins)
        if s < 0:
            from_t1 = not from_t1
            s = dl_first_unpinned(&self.t1 if from_t1 else &self.t2, self.pins)
            if s < 0:
                from_t1 = not from_t1
                s = self.t1.tail if from_t1 else self.t2.tail
        if from_t1:
            dl_unlink(&self.t1, s)
        else:
            dl_unlink(&self.t2, s)
            self.in_t2[s] = 0
        block_id = self._drop_slot(s)
        self._ghost_push(block_id, not from_t1)
        # NOTE: the next REPLACE takes (most often) one of the two tails: start loading both.
        self._prefetch_leaving(&self.t1)
        self._prefetch_leaving(&self.t2)
        return block_id

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int64_t c = self.capacity
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        if self.t1.n + self.b1.n + 1 > c:
            if self.b1.n > 0:
                self._ghost_pop(False)
                return self._replace()
            s = dl_first_unpinned(&self.t1, self.pins)
            if s < 0:
                return self._replace()
            dl_unlink(&self.t1, s)
            return self._drop_slot(s)
        if self.t1.n + self.b1.n + self.t2.n + self.b2.n >= 2 * c and self.b2.n > 0:
            self._ghost_pop(True)
        return self._replace()
