# cython: language_level=3
"""lhd_compute: lhd with its rank times the block's cost (the PrefixSim fork's ``LHD_compute``:
LauYeeYu/libCacheSim, libCacheSim/cache/eviction/LHD/lhd_compute.cpp, lhd_compute.hpp,
LHD_compute_interface.cpp).

Everything is lhd's (policies/adaptive/lhd.pyx), except the rank of a block that has not overflowed:
``(float)(lhd's rank * transform(cost))``, a float32 density times a double, rounded to float32,
where ``cost`` is the integer cost (``llround`` of the cost model) of the block's last access,
refreshed on every access before the access's explore draw and admission check, and
``transform`` is the identity (the fork's default ``compute_intensity_transform``).  The
admission check and ``ewmaVictim`` use that rank as well, as in the fork.

NOTE: the fork's ``getHitDensity`` multiplies the bare density: it drops lhd's explorer bonus
(+1) and its ``-FLT_MAX`` for an age of 19999 or overflow (it reads the never-updated density at
19999 instead).  Here both stay, so that lhd_compute is lhd's rank scaled by the cost: a uniform
cost of 1 makes exactly lhd's decisions (tests/sim/test_lhd_compute.py), and an overflowed
block still goes first.

Pins: as lhd (``strict_pins``).

Memory: lhd's 46 B/slot + the cost (double) 8 = 54 B/slot, plus lhd's 3.84 MB of tables.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free

from shadow.sim.core.idtable cimport shadow_big_malloc
from shadow.sim.policies.adaptive.lhd cimport LHD
from shadow.sim.policies.adaptive.lhd import check_lhd_params
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="lhd with the rank times the block's cost (the PrefixSim fork's LHD_compute)",
    family="cost-aware",
    defaults="seed=1,reconfigure-interval=1048576",
    strict_pins=True,
    weight=4.0,
)


cdef class LHDCompute(LHD):
    """See the module docstring.  Invariant: ``cost[s]`` is the cost of the last access of the
    block in every resident slot ``s`` (set by lhd's ``_update``)."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.cost = <double*>shadow_big_malloc(max(capacity, 1) * sizeof(double))
        if self.cost == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.cost)
        self.cost = NULL

    def block_cost(self, block_id: int) -> float:
        """The cost a resident block's rank is multiplied by (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self.cost[s]


def make(capacity: int, params: dict) -> LHDCompute:
    seed, interval = check_lhd_params("lhd_compute", params)
    return LHDCompute(capacity, seed, interval)
