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

Memory: partial_node_random_compute's 78 B/slot + the per-node freq 8 = 86 B/slot.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, free

from shadow.sim.policies.partial_node_random_compute cimport PartialNodeRandomCompute, node_age
from shadow.sim.policies.partial_node_random_compute import make_node_policy

DEFAULTS = "n-sample=128,eviction-mode=micro,micro-batch=64,seed=1"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "sample prefix-tree nodes by (freq+1) * cost / age, evict from the winner's deep end (micro|drain)"


cdef class PartialNodeRandomFreq(PartialNodeRandomCompute):
    """See the module docstring.  Invariant (besides the base class's): ``n_freq[nd]`` is the
    number of requests whose path ran through live node ``nd`` (or through the node it was split
    from) since its blocks were inserted."""
    cdef int64_t* n_freq

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        # NOTE: the base __cinit__ already ran with the same arguments and checked them.
        self.n_freq = <int64_t*>malloc(capacity * sizeof(int64_t))
        if self.n_freq == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.pf_node = <const char*>self.n_freq
        self.pf_node_stride = sizeof(int64_t)

    def __dealloc__(self):
        free(self.n_freq)

    cdef int32_t _new_node(self, int32_t tail, int64_t stamp, int32_t parent) noexcept nogil:
        cdef int32_t nd = PartialNodeRandomCompute._new_node(self, tail, stamp, parent)
        self.n_freq[nd] = self.n_freq[parent] if parent >= 0 else 0
        return nd

    cdef void _touch(self, int32_t nd, int64_t req_vtime) noexcept nogil:
        PartialNodeRandomCompute._touch(self, nd, req_vtime)
        self.n_freq[nd] += 1

    cdef void _score_cands(self, int64_t nc, int64_t now) noexcept nogil:
        """``cand_score[i] = (freq + 1) * cost(tail) / age`` for the drawn nodes ``cand[i]``."""
        cdef int64_t i
        cdef int32_t nd
        for i in range(nc):
            nd = self.cand[i]
            self.cand_score[i] = (<double>(self.n_freq[nd] + 1) * <double>self._cost(self.n_tail[nd])
                                  / <double>node_age(now, self._stamp(nd)))

    # ---- tests ----

    def node_freqs(self) -> dict[tuple[int, ...], int]:
        """freq of every live node, keyed by its ids head to tail (tests)."""
        cdef int64_t i
        cdef int32_t nd
        out = {}
        for i in range(self.nodes.n):
            nd = self.nodes.items[i]
            out[tuple(self._node_ids(nd))] = self.n_freq[nd]
        return out


def make(capacity: int, params: dict) -> PartialNodeRandomFreq:
    return make_node_policy(PartialNodeRandomFreq, "partial_node_random_freq", capacity, params)
