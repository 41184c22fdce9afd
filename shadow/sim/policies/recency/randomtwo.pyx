# cython: language_level=3
"""randomtwo: draw two resident blocks, evict the one accessed less recently (libCacheSim
``RandomTwo``, libCacheSim/cache/eviction/RandomTwo.c).

Per slot ``stamp`` = the ``vtime`` of the block's last get (libCacheSim's ``last_access_vtime``
= its ``n_req``, set by an insert and by a hit).  Eviction makes two draws with replacement over
the resident slots, exactly as ``random`` draws (policies/recency/random.pyx: a dense array of resident
slots, splitmix64 seeded with ``seed``), and evicts the first draw if its stamp is strictly
below the second's, else the second: equal stamps (the same block drawn twice, or two blocks
touched at one vtime) go to the later draw, as libCacheSim's ``<`` does.  The pure-Python
reference (reference/randomtwo.py) makes the same draws and evicts the same blocks.

The class also serves randomlru (policies/recency/randomlru.pyx): ``k`` draws, the least recent goes,
and ``ties_later`` says which of equal stamps.

Pins: honoured strictly (``strict_pins``), as ``random``: while some but not all resident blocks
are pinned only unpinned draws count (pinned ones are drawn again, at most 64 draws per
candidate wanted) and the least recent of those found goes; none found: the first unpinned
block in population order.  Every block pinned: the plain draws (best effort).

Memory: base 22 B/slot + dense set 8 + stamp 8 (int64: a vtime passes 2**32 in long traces)
= 38 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.core.idtable cimport shadow_big_malloc
from shadow.sim.policies.recency.random cimport Random
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="draw two resident blocks, evict the less recently used (libCacheSim RandomTwo)",
    family="recency",
    defaults="seed=1",
    strict_pins=True,
    weight=2.0,
)


cdef class RandomTwo(Random):
    """See the module docstring.  Invariant: ``stamp[s]`` is the vtime of the last get of the
    block in every resident slot ``s``."""

    def __cinit__(self, int64_t capacity, uint64_t seed=1, int64_t k=2, bint ties_later=True,
                  *args, **kwargs):
        if k < 1 or k > (1 << 30):
            raise ShadowError(f"the number of draws must be in 1..2**30, got {k}")
        self.k = k
        self.ties_later = ties_later
        self.stamp = <int64_t*>shadow_big_malloc(max(capacity, 1) * sizeof(int64_t))
        self.cand = <int32_t*>malloc(k * sizeof(int32_t))
        if self.stamp == NULL or self.cand == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.stamp)
        free(self.cand)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.stamp[slot] = acc.vtime

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = Random.insert(self, acc)
        self.stamp[slot] = acc.vtime
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t got = self._draws(self.k, self.cand), j
        cdef const int64_t* stamp = self.stamp
        cdef int32_t best, s
        if got == 0:
            return 0
        best = self.cand[0]
        for j in range(1, got):
            s = self.cand[j]
            if stamp[s] < stamp[best] or (self.ties_later and stamp[s] == stamp[best]):
                best = s
        return self._evict_slot(best)

    def last_access(self, block_id: int) -> int:
        """The stamp of a resident block (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self.stamp[s]


def make(capacity: int, params: dict) -> RandomTwo:
    return RandomTwo(capacity, check_seed("randomtwo", params), 2, True)
