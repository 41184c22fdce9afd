# cython: language_level=3
"""hyperbolic: draw ``n-sample`` resident blocks, evict the lowest ``freq / age`` of them
(libCacheSim ``Hyperbolic``, libCacheSim/cache/eviction/Hyperbolic.c; Blankstein et al.,
"Hyperbolic Caching", ATC '17).

Per slot ``freq`` (1 on insert, +1 per hit) and ``enter`` (the ``vtime`` of the insert:
libCacheSim's ``vtime_enter_cache`` = its ``n_req``; a hit does not move it).  Eviction makes
``n-sample`` draws with replacement over the resident slots, as ``random`` draws
(policies/recency/random.pyx: a dense array of resident slots, splitmix64 seeded with ``seed``), and
scores each ``1e8 * freq / (now - enter)`` with ``now`` the access's ``vtime``, in double, as
libCacheSim does.  The first draw of strictly lowest score below libCacheSim's starting bound
1e16 goes; a block entered at ``now`` scores +inf.  NOTE: if no draw scores below 1e16
(every draw entered at ``now``) libCacheSim has no candidate and dereferences NULL; here the
first draw goes.  The pure-Python reference (reference/hyperbolic.py) makes the same draws and
evicts the same blocks.

NOTE: libCacheSim draws a random non-empty hash bucket and takes its chain's head, so this
equals libCacheSim in distribution, not draw for draw (see policies/recency/random.pyx);
tests/sim/test_hyperbolic.py compares hit ratios with the PyPI package's ``Hyperbolic``.

Pins: honoured strictly (``strict_pins``), as ``random``: while some but not all resident blocks
are pinned only unpinned draws count (pinned ones are drawn again, at most 64 draws per
candidate wanted) and the lowest score of those found goes; none found: the first unpinned
block in population order.  Every block pinned: the plain draws (best effort).

It is randomtwo's class (policies/recency/randomtwo.pyx) with ``n-sample`` draws, its per-slot stamp
kept at the insert's vtime, a count beside it and this score.

Memory: base 22 B/slot + dense set 8 + enter 8 + freq 8 = 46 B/slot (the draws' scratch is
4 B a sample).
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.core.idtable cimport shadow_big_malloc
from shadow.sim.policies.recency.randomtwo cimport RandomTwo
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="draw n-sample resident blocks, evict the lowest freq / age (libCacheSim Hyperbolic)",
    family="frequency",
    defaults="n-sample=64,seed=1",
    strict_pins=True,
    weight=8.0,
)


cdef class Hyperbolic(RandomTwo):
    """See the module docstring: randomtwo's class with ``k`` = n-sample draws, whose ``stamp``
    stays at the insert's vtime (``enter``: a hit only counts).  Invariant: ``freq[s]`` and
    ``stamp[s]`` describe the block in every resident slot ``s``."""

    cdef int64_t* freq

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.freq = <int64_t*>shadow_big_malloc(max(capacity, 1) * sizeof(int64_t))
        if self.freq == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")

    def __dealloc__(self):
        free(self.freq)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.freq[slot] += 1

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = RandomTwo.insert(self, acc)
        self.freq[slot] = 1
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t got = self._draws(self.k, self.cand), j
        cdef int32_t best, s
        cdef double best_score = 1.0e16, sc
        if got == 0:
            return 0
        best = self.cand[0]
        for j in range(got):
            s = self.cand[j]
            sc = 1.0e8 * <double>self.freq[s] / <double>(acc.vtime - self.stamp[s])
            if best_score > sc:
                best = s
                best_score = sc
        return self._evict_slot(best)

    def stats(self, block_id: int) -> tuple[int, int]:
        """(freq, enter) of a resident block (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self.freq[s], self.stamp[s]


def make(capacity: int, params: dict) -> Hyperbolic:
    n = int(params["n-sample"])
    if not 1 <= n <= (1 << 30):
        raise ShadowError(f"policy hyperbolic: n-sample must be in 1..2**30, got {n}")
    return Hyperbolic(capacity, check_seed("hyperbolic", params), n, False)
