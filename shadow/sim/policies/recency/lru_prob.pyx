# cython: language_level=3
"""lru_prob: LRU whose hits promote the block to the head only with a probability (libCacheSim
``LRU_Prob``, libCacheSim/cache/eviction/LRUProb.c).

One recency order (lru's ring).  An insert goes to the head; a hit draws ``x`` (splitmix64, ``seed``) and moves
the block to the head iff ``x % threshold == 0``, else leaves it in place; the tail is evicted.
``threshold = floor(1 / float32(prob))``, as libCacheSim computes it (``prob`` parsed with
``strtof``, then ``(int)1.0 / prob`` truncated into an int), so a hit is promoted with probability
``1 / threshold``: 1/2 for the default ``prob=0.5``.  NOTE: that is not always ``prob``: 0.2 reads
as 0.200000003 and gives threshold 4 (1/4), 0.1 gives 9; the PyPI libcachesim's LRUProb measures
the same (0.24 and 0.11 of hits promoted).  ``prob=1`` is plain LRU.

Random draws: one per hit, none per insert or eviction, from splitmix64 seeded with ``seed`` (the
reference ``shadow/sim/reference/lru_prob.py`` makes the same draws); libCacheSim draws from its own
generator (``next_rand``, utils/include/mymath.h), so the two agree in distribution, not per draw.

Pins: honoured.  Eviction walks from the tail towards the head past pinned slots and takes the
first unpinned one; if every resident block is pinned it takes the tail (best effort).
Memory: lru's, base 22 B/slot + recency ring 12 B/slot (``LRing``, policies/_shared/dlist.pxd) = 34 B/slot.
"""

from libc.stdint cimport int64_t, uint64_t

from shadow.sim.core.policy cimport Access
from shadow.sim.policies.recency.lru cimport LRU
from shadow.sim.policies.cost_aware.random_compute cimport rng_next
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="LRU promoting a hit to the head with probability 1/floor(1/prob) "
                "(libCacheSim LRU_Prob)",
    family="recency",
    defaults="prob=0.5,seed=1",
    strict_pins=True,
    weight=1.0,
)

#: the largest ``threshold`` accepted (``prob`` down to about 4.7e-10)
MAX_THRESHOLD = 2**31 - 1


def threshold_of(prob: float) -> int:
    """libCacheSim's ``threshold``: ``floor(1 / float32(prob))``; ValueError outside (0, 1]."""
    cdef float p32 = <float>prob
    if not (0.0 < prob <= 1.0) or p32 <= 0.0:
        raise ValueError(f"prob must be in (0, 1], got {prob}")
    t = int(1.0 / <double>p32)
    if t > MAX_THRESHOLD:
        raise ValueError(f"prob {prob} is too small (1/prob must stay below 2**31)")
    return t


cdef class LRUProb(LRU):
    """lru's recency ring (insert, eviction, pins, ``order``), with a hit that promotes only when
    its draw says so; a subclass, so the serve loop calls it through the generic path."""

    cdef uint64_t rng
    cdef readonly uint64_t threshold

    def __cinit__(self, int64_t capacity, uint64_t threshold=2, uint64_t seed=1, *args, **kwargs):
        if threshold < 1:
            raise ValueError("threshold must be at least 1")
        self.threshold = threshold
        self.rng = seed

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        if rng_next(&self.rng) % self.threshold == 0:
            self.fast_hit(slot)


def make(capacity: int, params: dict) -> LRUProb:
    seed = int(params["seed"])
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in 0..2**64-1, got {seed}")
    return LRUProb(capacity, threshold_of(float(params["prob"])), seed)
