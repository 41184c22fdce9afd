# cython: language_level=3
"""The ``lhd`` policy's class, cimported by lhd_compute (lhd with its rank times the cost)."""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t, uint64_t

from shadow.sim.core.policy cimport Access
from shadow.sim.policies.recency.random cimport Random


cdef struct LHDTag:
    # NOTE: libCacheSim's Tag less what is constant here (app, size) or kept by the base (id);
    # lastLastHitAge is only ever read to form the class, so the class is kept instead.
    int64_t ts                  # the LHD clock at the block's last access
    uint16_t last_hit_age       # coarsened age at its last hit (0 after an insert), < MAX_AGE
    uint8_t cls                 # hit-age class of lastHitAge + lastLastHitAge, 0..15
    uint8_t explorer            # 1: an explorer (rank + 1 while explorers are handed out)


cdef class LHD(Random):
    cdef LHDTag* tags           # per slot
    cdef float* hits            # [class][age]: EWMA-decayed hit counts (HIT_AGE_CLASSES x MAX_AGE)
    cdef float* evs             # [class][age]: EWMA-decayed eviction counts
    cdef float* dens            # [class][age]: hit densities, read by the rank
    cdef double* cost           # NULL (lhd) or per slot the cost of the block's last access
    cdef int32_t* cand          # scratch: the drawn slots (ASSOCIATIVITY)
    cdef int64_t ring_id[8]     # recently admitted ids (0: none), libCacheSim's recentlyAdmitted
    cdef int64_t ring_slot[8]   # the slot each of them was admitted to (see _ring_valid)
    cdef int64_t ring_head
    cdef int64_t clock          # libCacheSim's timestamp: +1 per access (hit or insert)
    cdef int64_t interval       # accesses between reconfigurations
    cdef int64_t next_reconf    # accesses left until the next one
    cdef readonly int64_t n_reconf
    cdef readonly int64_t shift # ageCoarseningShift
    cdef float ewma_objects     # ewmaNumObjects
    cdef float ewma_mass        # ewmaNumObjectsMass
    cdef float ewma_victim      # ewmaVictimHitDensity
    cdef readonly int64_t explorer_budget

    cdef inline int64_t _age(self, const LHDTag* t) noexcept nogil:
        """libCacheSim's ``getAge``: the coarsened age, an overflow clamped to 19999."""
        cdef uint64_t age = <uint64_t>(self.clock - t.ts) >> self.shift
        return 19999 if age >= 20000 else <int64_t>age

    cdef float _rank(self, int64_t slot) noexcept nogil
    cdef int64_t _victim(self) noexcept nogil
    cdef void _update(self, int64_t slot, bint inserted, const Access* acc) noexcept nogil
    cdef void _reconfigure(self) noexcept nogil
    cdef void _adapt_age_coarsening(self) noexcept nogil
    cdef void _model_hit_density(self) noexcept nogil
