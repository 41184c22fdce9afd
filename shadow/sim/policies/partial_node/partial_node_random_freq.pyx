# cython: language_level=3
"""partial_node_random_freq: partial_node_random_compute with a frequency term in the score.

The fork's ``_freq`` variant (the notes: "freq is (freq+1)·cost/recency, which matches
RandomFreeBlockManager").  Nodes, splitting, stamping, sampling, trimming, pins and the
``micro``/``drain`` modes are exactly partial_node_random_compute's: this class subclasses it
(``partial_node_random_compute.pxd``) and overrides only its hooks.  The only differences:

* every node has a **freq**: 0 when a request's inserts create it; +1 each time an arriving
  request's path runs through it (``_touch``, called from ``on_request`` where the node is also
  stamped); a branch split off below the deepest touched block keeps the old freq, as it keeps the
  old stamp (``_new_node`` with a parent);
* eviction picks the lowest ``(freq + 1) * cost(tail) / max(1, now - stamp)`` among the drawn
  nodes (ties: first drawn), so a node that many requests went through outlives an equally old
  node that only one request built.

Memory: partial_node_random_compute's 42 B/slot + the per-node freq 4 = 46 B/slot from 32k slots,
50 below (measured: docs/performance.md, "Memory per slot").  NOTE: the freq is kept in 32 bits
until one passes 2**32 - 1, then in 64 bits for good (+4 B/node): the counts stay exact.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, UINT32_MAX
from libc.stdlib cimport malloc, free

from shadow.sim.policies.partial_node.partial_node_random_compute cimport PartialNodeRandomCompute, node_age
from shadow.sim.policies.partial_node.partial_node_random_compute import make_node_policy
from shadow.sim.registry import PolicySpec

# NOTE: a freq is kept in 32 bits up to this value; the next +1 moves every freq to 64 bits for
# good.  Lowered only by tests (a freq of 2**32 needs 2**32 requests through one node).
cdef int64_t _freq32_max = UINT32_MAX


def set_freq32_max(n: int) -> int:
    """Set the largest freq kept in 32 bits (tests; at most 2**32 - 1); return the old one."""
    global _freq32_max
    old = _freq32_max
    _freq32_max = min(max(0, int(n)), UINT32_MAX)
    return old


SPEC = PolicySpec(
    description="sample prefix-tree nodes by (freq+1) * cost / age, evict from the winner's deep end (micro|drain)",
    family="partial-node",
    defaults="n-sample=128,eviction-mode=micro,micro-batch=64,seed=1",
    deterministic=False,
    weight=2.0,
    reference_params="micro-batch=1",
)


cdef class PartialNodeRandomFreq(PartialNodeRandomCompute):
    """See the module docstring.  Invariant (besides the base class's): the freq of ``nd`` is the
    number of requests whose path ran through live node ``nd`` (or through the node it was split
    from) since its blocks were inserted."""
    # NOTE: the freq in 32 bits (4 B/node saved) while every freq is at most _freq32_max; the
    # +1 past it moves all of them to ``n_freq64`` for good (see _widen_freq): exact counts.
    cdef uint32_t* n_freq32        # per node: its freq, while n_freq64 is NULL
    cdef int64_t* n_freq64         # NULL until a freq passes _freq32_max; then the only one

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        # NOTE: the base __cinit__ already ran with the same arguments and checked them.
        self.n_freq32 = <uint32_t*>malloc(capacity * sizeof(uint32_t))
        self.n_freq64 = NULL
        if self.n_freq32 == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.pf_node = <const char*>self.n_freq32
        self.pf_node_stride = sizeof(uint32_t)

    def __dealloc__(self):
        free(self.n_freq32)
        free(self.n_freq64)

    cdef inline int64_t _freq(self, int32_t nd) noexcept nogil:
        if self.n_freq64 != NULL:
            return self.n_freq64[nd]
        return self.n_freq32[nd]

    cdef int32_t _new_node(self, int32_t tail, int64_t stamp, int32_t parent) noexcept nogil:
        cdef int32_t nd = PartialNodeRandomCompute._new_node(self, tail, stamp, parent)
        cdef int64_t f = self._freq(parent) if parent >= 0 else 0
        # NOTE: a parent's freq fits whichever width the freqs are in.
        if self.n_freq64 != NULL:
            self.n_freq64[nd] = f
        else:
            self.n_freq32[nd] = <uint32_t>f
        return nd

    cdef void _touch(self, int32_t nd, int64_t req_vtime) noexcept nogil:
        PartialNodeRandomCompute._touch(self, nd, req_vtime)
        if self.n_freq64 != NULL:
            self.n_freq64[nd] += 1
        elif self.n_freq32[nd] < _freq32_max:
            self.n_freq32[nd] += 1
        else:
            self._widen_freq()
            if self.n_freq64 != NULL:
                self.n_freq64[nd] += 1

    cdef void _widen_freq(self) noexcept nogil:
        """Move the live nodes' freqs to 64 bits for good.  NOTE: if that allocation fails the
        freqs stay in 32 bits and this one saturates (nothing here may raise), and ``nomem``
        fails the cache."""
        cdef int64_t i
        cdef int32_t x
        cdef int64_t* f64 = <int64_t*>malloc(max(self.capacity, 1) * sizeof(int64_t))
        if f64 == NULL:
            self.nomem = 1
            return
        for i in range(self.nodes.n):
            x = self.nodes.items[i]
            f64[x] = self.n_freq32[x]
        free(self.n_freq32)
        self.n_freq32 = NULL
        self.n_freq64 = f64
        self.pf_node = <const char*>f64
        self.pf_node_stride = sizeof(int64_t)

    cdef void _score_cands(self, int64_t nc, int64_t now) noexcept nogil:
        """``cand_score[i] = (freq + 1) * cost(tail) / age`` for the drawn nodes ``cand[i]``."""
        cdef int64_t i
        cdef int32_t nd
        for i in range(nc):
            nd = self.cand[i]
            self.cand_score[i] = (<double>(self._freq(nd) + 1) * <double>self._cost(self.n_tail[nd])
                                  / <double>node_age(now, self._stamp(nd)))

    # ---- tests ----

    def freq_bits(self) -> int:
        """32 or 64: the width the freqs are kept in (tests)."""
        return 64 if self.n_freq64 != NULL else 32

    def node_freqs(self) -> dict[tuple[int, ...], int]:
        """freq of every live node, keyed by its ids head to tail (tests)."""
        cdef int64_t i
        cdef int32_t nd
        out = {}
        for i in range(self.nodes.n):
            nd = self.nodes.items[i]
            out[tuple(self._node_ids(nd))] = self._freq(nd)
        return out


def make(capacity: int, params: dict) -> PartialNodeRandomFreq:
    return make_node_policy(PartialNodeRandomFreq, "partial_node_random_freq", capacity, params)
