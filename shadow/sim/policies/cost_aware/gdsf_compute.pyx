# cython: language_level=3
"""gdsf_compute: GDSF with the block's compute cost as its worth (the PrefixSim fork's
``cpp/GDSF_compute.cpp`` at b02bcdf9, the newest of its versions).

* insert: ``freq = 1``, the block's cost is kept (``cost`` = the llround cost of the inserting
  access), priority ``L + cost``;
* hit: ``freq += 1``, priority ``L + freq * cost`` with the cost kept at insert (the fork reads
  ``obj->cost``, set only by insert);
* evict: the lowest priority leaves and ``L`` becomes its priority.  Equal priorities go by the
  time of the last insert/hit, oldest first (the fork's ordered set compares ``n_req`` at that
  time; one stamp per insert/hit gives the same order).

No size division (every block has size 1).  NOTE: the fork's ``find`` adds 1 to ``n_req`` on every
call, the read-only probe included; the released tool fixed that (PrefixSim article, on residency
checks): here ``find`` has no side effect and the tie stamps count accesses only.

Pins: honoured.  The victim is the lowest-priority unpinned block; only if every block is pinned
is the plain minimum taken.  ``L`` becomes the victim's priority either way.

The heap, its pinned walk and the stamp renumbering are gdsf's (a subclass of ``gdsf.GDSF``, see
gdsf.pxd).  Memory: gdsf's 42 B/slot from 32k slots (46 below) + the kept cost 8 = 50 B/slot.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, free

from shadow.sim.core.policy cimport Access
from shadow.sim.policies.cost_aware.gdsf cimport GDSF
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="GDSF with compute cost: priority L + freq*cost, no size (PrefixSim fork GDSF_compute)",
    family="cost-aware",
    defaults="",
    weight=3.6,
)


cdef class GDSFCompute(GDSF):
    """See the module docstring.  ``cost[slot]`` is the cost its insert saw (resident slots)."""
    cdef int64_t* cost

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.cost = <int64_t*>malloc(max(capacity, 1) * sizeof(int64_t))
        if self.cost == NULL:
            raise MemoryError(f"cannot allocate a gdsf_compute cache of {capacity} slots")

    def __dealloc__(self):
        free(self.cost)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        # NOTE: the inserting access's cost, no clamp (the fork: ``L + req->cost``).
        cdef int64_t slot = self._add(acc.block_id, self.L + <double>acc.cost)
        self.cost[slot] = acc.cost
        return slot

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.freq[slot] += 1
        self._place(slot, self.L + <double>self.freq[slot] * <double>self.cost[slot])


def make(capacity: int, params: dict) -> GDSFCompute:
    return GDSFCompute(capacity)
