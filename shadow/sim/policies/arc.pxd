# cython: language_level=3
"""ARC's class and its operations as inline methods (called directly by the serve loop, ``K_ARC``)."""

from libc.stdint cimport int64_t, int32_t, uint8_t

from shadow.sim.policy cimport Policy
from shadow.sim.policies._dlist cimport DList, dl_push_head, dl_unlink, dl_move_head
from shadow.sim.idtable cimport slotmap_prefetch
from shadow.sim.policies.s3fifo cimport (GhostPool, GhostQ, gp_find, gq_unlink, gq_pop_tail,
                                         gq_push_head, gq_prefetch_tail, dl_first_unpinned,
                                         prefetch_leaving)


cdef class ARC(Policy):
    cdef DList t1
    cdef DList t2
    cdef uint8_t* in_t2
    cdef GhostPool gpool
    cdef GhostQ b1
    cdef GhostQ b2
    cdef readonly double p

    cdef inline void fast_prefetch(self, int64_t block_id) noexcept nogil:
        """Prefetch what a get of ``block_id`` probes: the resident table and the ghost map."""
        self.prefetch(block_id)
        slotmap_prefetch(&self.gpool.map, block_id)

    cdef inline void fast_hit(self, int64_t slot) noexcept nogil:
        if self.in_t2[slot]:
            dl_move_head(&self.t2, slot)
        else:
            dl_unlink(&self.t1, slot)
            self.in_t2[slot] = 1
            dl_push_head(&self.t2, slot)

    cdef inline int64_t fast_insert(self, int64_t block_id) noexcept nogil:
        cdef int32_t node = gp_find(&self.gpool, block_id)
        cdef double delta, cap = <double>self.capacity
        cdef int64_t slot
        if node >= 0:
            if self.gpool.which[node] == 1:
                delta = <double>self.b2.n / <double>self.b1.n
                if delta < 1.0:
                    delta = 1.0
                self.p = self.p + delta
                if self.p > cap:
                    self.p = cap
                gq_unlink(&self.gpool, &self.b1, node)
            else:
                delta = <double>self.b1.n / <double>self.b2.n
                if delta < 1.0:
                    delta = 1.0
                self.p = self.p - delta
                if self.p < 0.0:
                    self.p = 0.0
                gq_unlink(&self.gpool, &self.b2, node)
            slot = self._take_slot(block_id)
            self.in_t2[slot] = 1
            dl_push_head(&self.t2, slot)
        else:
            slot = self._take_slot(block_id)
            self.in_t2[slot] = 0
            dl_push_head(&self.t1, slot)
        return slot

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
        if from_t1:
            gq_push_head(&self.gpool, &self.b1, block_id, 1)
            gq_prefetch_tail(&self.gpool, &self.b1)
        else:
            gq_push_head(&self.gpool, &self.b2, block_id, 2)
            gq_prefetch_tail(&self.gpool, &self.b2)
        # NOTE: the next REPLACE takes (most often) one of the two tails: start loading both.
        prefetch_leaving(&self.table, self.slot_ids, &self.gpool, self.t1.tail)
        prefetch_leaving(&self.table, self.slot_ids, &self.gpool, self.t2.tail)
        return block_id

    cdef inline int64_t fast_evict(self) noexcept nogil:
        cdef int64_t c = self.capacity
        cdef int32_t s
        if self.n_resident == 0:
            return 0
        if self.t1.n + self.b1.n + 1 > c:
            if self.b1.n > 0:
                gq_pop_tail(&self.gpool, &self.b1)
                return self._replace()
            s = dl_first_unpinned(&self.t1, self.pins)
            if s < 0:
                return self._replace()
            dl_unlink(&self.t1, s)
            return self._drop_slot(s)
        if self.t1.n + self.b1.n + self.t2.n + self.b2.n >= 2 * c and self.b2.n > 0:
            gq_pop_tail(&self.gpool, &self.b2)
        return self._replace()
