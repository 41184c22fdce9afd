# cython: language_level=3
"""The partial-node policy class, C-level, so that variants subclass it instead of copying it.

:class:`PartialNodeRandomCompute` owns the prefix-tree node machinery (building, splitting,
stamping, sampling, trimming, pins, ``micro``/``drain``); see its module docstring.  A variant
(``partial_node_random_freq``) overrides only the hooks below, each ``noexcept nogil``:

* :meth:`_score_cands` ``(nc, now)``: the eviction scores ``cand_score[0 .. nc)`` of the drawn
  nodes ``cand[0 .. nc)``, lower is evicted first (one call per sample, not per node);
* :meth:`_new_node` ``(tail, stamp, parent)``: a node is born, either built by a request's inserts
  (``parent == -1``) or split off below the deepest touched block of ``parent``;
* :meth:`_touch` ``(nd, req_vtime)``: an arriving request's path runs through ``nd``.

An override of ``_new_node`` or ``_touch`` calls the base method first (it keeps the node
invariants) and then keeps its own per-node arrays, indexed by node id ``0 .. capacity-1``;
``_score_cands`` is replaced outright.  NOTE: ``on_request`` calls ``_new_node`` and ``_touch``
while its marks are set (``~node`` in ``s_node`` of touched slots, ``~tail`` in ``n_tail`` of
nodes not yet split): a hook reads neither of another node.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, INT32_MIN, INT32_MAX, UINT32_MAX

from shadow.sim.core.policy cimport Policy, Access, RequestCtx
from shadow.sim.policies.cost_aware.random_compute cimport Dense


cdef inline int64_t node_age(int64_t now, int64_t stamp) noexcept nogil:
    """``max(1, now - stamp)``: the age a score divides by."""
    cdef int64_t r = now - stamp
    return r if r >= 1 else 1


cdef class PartialNodeRandomCompute(Policy):
    cdef readonly int64_t n_sample
    cdef readonly int64_t micro_batch
    cdef readonly bint drain
    cdef uint64_t rng
    # NOTE: during on_request a touched slot's node is stored as ``~node`` (negative), the mark
    # that says the arriving path holds it; on_request clears every mark before it returns.
    cdef int32_t* s_node           # per slot: its node
    cdef int32_t* s_up             # per slot: the next shallower slot of its node, -1 at the head
    # NOTE: no down links (4 B/slot saved): a node is walked from its tail up; the one step that
    # needs the next deeper slot (``remove`` of a middle block) walks up from the tail to it.
    # NOTE: the llround cost in 32 bits (4 B/slot saved); the first cost outside int32 moves all
    # of them to ``s_cost64`` for good, so every score sees the exact cost.
    cdef int32_t* s_cost32         # per slot: the cost of its last access, while all fit 32 bits
    cdef int64_t* s_cost64         # NULL until a cost outside int32 arrives; then the only one
    # NOTE: during on_request a touched node's tail is stored as ``~tail`` (negative), the mark
    # that says the node is already listed in ``touched``; cleared before the node is split.
    cdef int32_t* n_tail           # per node: its deepest resident slot
    # NOTE: the stamp in 32 bits, as ``stamp - stamp_epoch`` (4 B/node saved); a stamp outside
    # ``stamp_epoch + [0, 2**32)`` moves the epoch to the lowest live stamp if the live stamps
    # span less than 2**31, else moves all of them to ``n_stamp64`` for good (see _rebase_stamp),
    # so every score sees the exact stamp (the age is not clamped, so a clamp would not be exact).
    cdef uint32_t* n_stamp32       # per node: its stamp - stamp_epoch, while n_stamp64 is NULL
    cdef int64_t* n_stamp64        # NULL until the stamps do not fit 32 bits; then the only one
    cdef readonly int64_t stamp_epoch
    # NOTE: ``nodes.pos`` is NULL (4 B/node saved): a node's index in ``nodes.items`` is known
    # where it is deleted (the draw that picked it; ``remove`` searches for it), and a node is
    # always added as ``items[n]``, so the set never needs it (see _node_add, _node_del_at).
    cdef Dense nodes
    cdef int64_t mark              # +1 per on_request
    cdef int32_t* touched          # scratch: nodes touched by the arriving request, then its slots
    cdef int64_t touched_cap       # nodes at touched[0 .. cap), slots at touched[cap .. 2 cap)
    cdef int64_t last_slot, last_id, last_pos, last_mark   # the previous insert
    cdef int32_t* cand
    cdef int32_t* cand_idx         # scratch: the index in nodes.items each cand was drawn at
    cdef double* cand_score
    cdef bint forced               # the last sample had only pinned tails (best effort)
    # NOTE: a variant's per-node score array, prefetched at pf_node + node * pf_node_stride for
    # every draw (NULL: none), so that its score inputs load with the base's.
    cdef const char* pf_node
    cdef int64_t pf_node_stride

    cdef inline int64_t _cost(self, int64_t slot) noexcept nogil:
        if self.s_cost64 != NULL:
            return self.s_cost64[slot]
        return self.s_cost32[slot]

    cdef inline void _set_cost(self, int64_t slot, int64_t c) noexcept nogil:
        if self.s_cost64 != NULL:
            self.s_cost64[slot] = c
        elif INT32_MIN <= c <= INT32_MAX:
            self.s_cost32[slot] = <int32_t>c
        else:
            self._widen_cost(slot, c)

    cdef inline int64_t _stamp(self, int64_t nd) noexcept nogil:
        if self.n_stamp64 != NULL:
            return self.n_stamp64[nd]
        return self.stamp_epoch + <int64_t>self.n_stamp32[nd]

    cdef inline void _set_stamp(self, int64_t nd, int64_t stamp) noexcept nogil:
        if self.n_stamp64 != NULL:
            self.n_stamp64[nd] = stamp
        elif (stamp >= self.stamp_epoch
                and <uint64_t>stamp - <uint64_t>self.stamp_epoch <= UINT32_MAX):
            self.n_stamp32[nd] = <uint32_t>(<uint64_t>stamp - <uint64_t>self.stamp_epoch)
        else:
            self._rebase_stamp(nd, stamp)

    cdef void _widen_cost(self, int64_t slot, int64_t c) noexcept nogil
    cdef void _rebase_stamp(self, int64_t nd, int64_t stamp) noexcept nogil
    cdef int32_t _new_node(self, int32_t tail, int64_t stamp, int32_t parent) noexcept nogil
    cdef void _touch(self, int32_t nd, int64_t req_vtime) noexcept nogil
    cdef void _score_cands(self, int64_t nc, int64_t now) noexcept nogil
    cdef int64_t _draw(self, int64_t now) noexcept nogil
    cdef int32_t _node_add(self) noexcept nogil
    cdef void _node_del_at(self, int64_t i) noexcept nogil
    cdef int64_t _trim(self, int32_t nd, int64_t idx, int64_t take, bint force,
                       int64_t* out) noexcept nogil
    cdef list _node_ids(self, int32_t nd)
