# cython: language_level=3
"""random: evict a resident block drawn uniformly at random (libCacheSim ``Random``,
libCacheSim/cache/eviction/Random.c).

Eviction order: none; every resident block is equally likely to go and a hit changes nothing.
The resident slots are kept dense in ``dense.items[0 .. n)`` (``Dense`` of
policies/cost_aware/random_compute.pxd: an insert appends, a removal moves the last item into the hole) and
a draw is ``items[((x >> 32) * n) >> 32]`` for the next output ``x`` of splitmix64 seeded with
``seed``: the pure-Python reference (reference/random.py) makes the same draws over the same
order and evicts the same blocks.

NOTE: libCacheSim draws a random non-empty bucket of its hash table and takes the head of the
bucket's chain, with one process-wide generator: uniform while no chain holds two objects (its
table has 2**16 buckets at the default hash power), tilted towards the newest object of a chain
otherwise.  So this equals libCacheSim in distribution, not draw for draw; tests/sim/test_random.py
compares hit ratios with the PyPI package's ``Random``.

Pins: honoured strictly (``strict_pins``).  While some but not all resident blocks are pinned, a
draw that lands on a pinned block is discarded and drawn again, at most ``DRAWS_PER_CANDIDATE``
draws per candidate wanted; if none of them is unpinned, the first unpinned block in population
order is taken.  With every resident block pinned the plain draw is taken (best effort).  With
none pinned no pin count is read.

Memory: base 22 B/slot + dense set 8 (item and position, int32 each) = 30 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.policies.cost_aware.random_compute cimport (dense_init, dense_free, dense_add, dense_del,
                                                 rng_below)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="evict a uniformly random resident block (libCacheSim Random)",
    family="recency",
    defaults="seed=1",
    strict_pins=True,
    weight=1.5,
)

cdef enum:
    # draws per wanted candidate while some resident blocks are pinned: with half of them pinned
    # a single candidate is then found by drawing in all but 2**-64 of the cases
    DRAWS_PER_CANDIDATE = 64


cdef class Random(Policy):
    """See the module docstring.  Invariant: ``dense`` holds exactly the resident slots."""

    def __cinit__(self, int64_t capacity, uint64_t seed=1, *args, **kwargs):
        dense_init(&self.dense, capacity, False)
        self.rng = seed

    def __dealloc__(self):
        dense_free(&self.dense)

    cdef int64_t _draws(self, int64_t k, int32_t* cand) noexcept nogil:
        """Write up to ``k`` drawn slots (with replacement) to ``cand``; return how many (0 only
        when nothing is resident).

        Nothing pinned, or everything (best effort): ``k`` plain draws.  Otherwise only unpinned
        draws are kept, out of at most ``k * DRAWS_PER_CANDIDATE``; none of them: the first
        unpinned slot in population order, alone.
        """
        cdef int64_t n = self.dense.n, got = 0, tries = 0, limit, i
        cdef const int32_t* items = self.dense.items
        cdef int32_t s
        cdef uint64_t rng = self.rng
        if n == 0:
            return 0
        if self.n_pinned == 0 or self.n_pinned >= n:
            while got < k:
                cand[got] = items[rng_below(&rng, n)]
                got += 1
            self.rng = rng
            return got
        limit = k * DRAWS_PER_CANDIDATE
        while got < k and tries < limit:
            s = items[rng_below(&rng, n)]
            tries += 1
            if self.pins[s] == 0:
                cand[got] = s
                got += 1
        self.rng = rng
        if got == 0:
            # NOTE: n_pinned < n, so an unpinned resident slot exists
            for i in range(n):
                if self.pins[items[i]] == 0:
                    cand[0] = items[i]
                    return 1
        return got

    cdef int64_t _evict_slot(self, int64_t slot) noexcept nogil:
        """Drop the resident ``slot`` from the population and the base; return its block id."""
        dense_del(&self.dense, slot, False)
        return self._drop_slot(slot)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        pass

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        dense_add(&self.dense, slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t s
        if self._draws(1, &s) == 0:
            return 0
        return self._evict_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._evict_slot(slot)

    def population(self) -> list[int]:
        """Resident ids in draw-index order (tests)."""
        cdef int64_t i
        return [self.slot_id(self.dense.items[i]) for i in range(self.dense.n)]


def check_seed(name: str, params: dict) -> int:
    """The ``seed`` parameter as a splitmix64 state, or a clear error naming ``name``."""
    seed = int(params["seed"])
    if not 0 <= seed < (1 << 64):
        raise ShadowError(f"policy {name}: seed must be in 0..2**64-1, got {seed}")
    return seed


def make(capacity: int, params: dict) -> Random:
    return Random(capacity, check_seed("random", params))
