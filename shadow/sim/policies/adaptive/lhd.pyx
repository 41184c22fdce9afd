# cython: language_level=3
"""lhd: least hit density (libCacheSim ``LHD``: libCacheSim/cache/eviction/LHD/lhd.cpp, lhd.hpp,
LHD_Interface.cpp; Beckmann et al., "LHD: Improving Cache Hit Rate by Maximizing Hit Density",
NSDI '18).

Every block has a class and an age.  The age is ``(clock - ts) >> shift``: ``clock`` counts the
accesses (hits and inserts) so far, ``ts`` is the clock at the block's last access and ``shift``
the age coarsening; an age of ``MAX_AGE - 1`` = 19999 or more is an overflow.  The class is the
hit-age class of ``lastHitAge + lastLastHitAge`` (the coarsened ages at its last two hits; an
insert sets them to 0 and ``MAX_AGE``): 15 for a sum of 0, else the number of doublings that
take the sum to ``MAX_AGE`` or past, at most 15.  Per (class, age) the policy keeps hit and
eviction counts and a hit density, all float32 as libCacheSim's ``rank_t``.

Classes with unit sizes: libCacheSim has 16 hit-age classes x 16 application classes, but every
block's application class is ``DEFAULT_APP_ID % 16`` = 1, so only its classes 16..31 are ever
used; they are kept here as classes 0..15 (class ``h`` here is libCacheSim's ``16 + h``: the
initial densities ``(c + 1) / (a + 1)`` are ``(17 + h) / (a + 1)``).  The size a density is
divided by is always 1.

* Rank of a block: ``-FLT_MAX`` at age 19999 or overflow, else ``density[class][age]``, plus 1
  for an explorer.  Initial densities ``(17 + h) / (age + 1)`` (libCacheSim's "~GDSF").
* Eviction: draw 8 resident blocks (32 once more than 50 reconfigurations are done) with
  replacement, as ``random`` draws (splitmix64 seeded with ``seed``; policies/recency/random.pyx), then
  look at the 8 recently admitted ids still resident, in ring order; the first of strictly lowest
  rank goes (the first draw starts it).  Then ``ewmaVictim = 0.9 * ewmaVictim + 0.1 * its rank``;
  its (class, age) eviction count + 1.
* Every access (after the block's hit count at its old (class, age) + 1, for a hit): ``ts =
  clock``; one draw ``rng_below(32) == 0`` says *explore*; an explored access makes the block
  an explorer while the budget (``(int64)(C * 0.01f)`` blocks, an explorer's block returned when
  it leaves or is hit) is positive and fewer than 50 reconfigurations are done, otherwise the
  block is no explorer.  An insert that did not explore and ranks below ``ewmaVictim`` enters the
  ring of recently admitted ids (8, overwriting the oldest).  Then ``clock + 1``, and every
  ``reconfigure-interval`` accesses (libCacheSim's constant 2**20) a reconfiguration: every count
  x 0.9, then the age coarsening is adapted, then the densities are recomputed
  (``hits(>= a) / sum over a' >= a of events(>= a')``, 0 where fewer than 1e-5 events are left).
* Age coarsening: ``shift`` starts at 10; at the 6th and the 26th reconfiguration it becomes the
  least ``s >= 1`` with ``2**s >= n / 200`` (``n``: an EWMA of the resident count, one sample
  per reconfiguration), and the counts are stretched or compressed to the new scale as
  libCacheSim does.

The float32 arithmetic is libCacheSim's, operation by operation; the pure-Python reference
(reference/lhd.py) rounds each to float32 and makes the same draws and decisions.  NOTE:
libCacheSim draws with ``next_rand() % n`` from one process-wide generator, so this equals it in
distribution, not draw for draw; tests/sim/test_lhd.py compares hit ratios with the PyPI
package's ``LHD``.

Pins: honoured (``strict_pins``).  While some but not all resident blocks are pinned only
unpinned draws count (``random``'s rule: a pinned one is drawn again, at most 64 draws per
candidate; none found: the first unpinned block in population order) and pinned recently
admitted blocks are passed over; every block pinned: the plain choice (best effort).

``remove`` (outside eviction) returns an explorer's budget and counts no eviction (libCacheSim's
``LHD_remove`` does neither).

Speed: from 64k slots an eviction prefetches its draws' tags and densities (and costs) before
ranking them; at 8k, where everything sits in L2, the prefetch costs more than it saves and is
off (docs/performance.md, "Measured choices").

Memory: base 22 B/slot + dense set 8 + tag 16 (clock stamp 8, last hit age 2, class 1, explorer
1, padding 4) = 46 B/slot, plus 3.84 MB a cache for the tables (16 classes x 20000 ages x hit
count, eviction count, density, float32 each): 46 + 3840000 / C B/slot (515 at 8k, 75 at 128k).
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.float cimport FLT_MAX

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.core.idtable cimport shadow_big_malloc
from shadow.sim.policies.recency.random cimport Random
from shadow.sim.policies.cost_aware.random_compute cimport rng_below
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil

SPEC = PolicySpec(
    description="least hit density: sampled blocks ranked by a learned hit density per "
                "(class, age) (libCacheSim LHD)",
    family="adaptive",
    defaults="seed=1,reconfigure-interval=1048576",
    strict_pins=True,
    weight=4.0,
)

cdef enum:
    MAX_AGE = 20000
    HIT_AGE_CLASSES = 16
    APP_CLASS = 1                   # DEFAULT_APP_ID % APP_CLASSES: libCacheSim's class 16 + h
    ASSOCIATIVITY = 32
    EARLY_CANDIDATES = 8            # candidates while at most 50 reconfigurations are done
    EARLY_RECONFIGURATIONS = 50
    ADMISSIONS = 8
    EXPLORE_INVERSE_PROBABILITY = 32
    INITIAL_SHIFT = 10
    PF_MIN_SLOTS = 1 << 16          # caches from which an eviction prefetches its draws
    TABLE = HIT_AGE_CLASSES * MAX_AGE

# NOTE: float32 constants, as libCacheSim's ``static constexpr rank_t``: products with them are
# float32 products (1 - 0.9f is 0.100000024f, not 0.1f).
cdef float EWMA_DECAY = 0.9
cdef float EWMA_REST = 1 - EWMA_DECAY
cdef float EXPLORER_BUDGET_FRACTION = 0.01
cdef float AGE_COARSENING_ERROR_TOLERANCE = 0.01

#: The most a reconfiguration interval may be (2**40 accesses).
MAX_INTERVAL = 1 << 40


cdef inline uint8_t hit_age_class(int64_t age) noexcept nogil:
    """libCacheSim's ``hitAgeClass``: 15 for 0, else doublings to reach MAX_AGE, at most 15."""
    cdef uint8_t log = 0
    if age == 0:
        return HIT_AGE_CLASSES - 1
    while age < MAX_AGE and log < HIT_AGE_CLASSES - 1:
        age <<= 1
        log += 1
    return log


cdef class LHD(Random):
    """See the module docstring.  Invariants: ``tags[s]`` describes the block in every resident
    slot ``s``; ``ring_id[i]`` is resident iff ``slot_id(ring_slot[i]) == ring_id[i]`` (an
    insert of a ring id points its entries at the new slot, and a freed or reused slot holds
    another value)."""

    def __cinit__(self, int64_t capacity, uint64_t seed=1, int64_t interval=1 << 20,
                  *args, **kwargs):
        cdef int64_t c, a
        if not 1 <= interval <= MAX_INTERVAL:
            raise ShadowError(f"the reconfiguration interval must be in 1..2**40, got {interval}")
        self.tags = <LHDTag*>shadow_big_malloc(max(capacity, 1) * sizeof(LHDTag))
        # NOTE: one block for the three tables (3.84 MB: huge pages, see core/idtable.pxd)
        self.hits = <float*>shadow_big_malloc(3 * TABLE * sizeof(float))
        self.cand = <int32_t*>malloc(ASSOCIATIVITY * sizeof(int32_t))
        if self.tags == NULL or self.hits == NULL or self.cand == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.evs = self.hits + TABLE
        self.dens = self.hits + 2 * TABLE
        memset(self.hits, 0, 2 * TABLE * sizeof(float))
        for c in range(HIT_AGE_CLASSES):
            for a in range(MAX_AGE):
                # NOTE: libCacheSim's ``1. * (c + 1) / (a + 1)`` in double, stored as float
                self.dens[c * MAX_AGE + a] = <float>(
                    <double>(APP_CLASS * HIT_AGE_CLASSES + c + 1) / <double>(a + 1))
        self.cost = NULL
        for a in range(ADMISSIONS):
            self.ring_id[a] = 0
            self.ring_slot[a] = 0
        self.ring_head = 0
        self.clock = 0
        self.interval = interval
        self.next_reconf = interval
        self.n_reconf = 0
        self.shift = INITIAL_SHIFT
        self.ewma_objects = 0
        self.ewma_mass = 0
        self.ewma_victim = 0
        # NOTE: ``cache_size * EXPLORER_BUDGET_FRACTION``: int64 times float is a float product
        self.explorer_budget = <int64_t>(<float>capacity * EXPLORER_BUDGET_FRACTION)

    def __dealloc__(self):
        free(self.tags)
        free(self.hits)
        free(self.cand)

    cdef float _rank(self, int64_t slot) noexcept nogil:
        """libCacheSim's ``getHitDensity`` (size 1), times the cost for lhd_compute."""
        cdef const LHDTag* t = &self.tags[slot]
        cdef int64_t age = self._age(t)
        cdef float r
        if age == MAX_AGE - 1:
            return -FLT_MAX
        r = self.dens[t.cls * MAX_AGE + age]
        if t.explorer:
            r = r + <float>1.0
        if self.cost != NULL:
            # NOTE: the fork's ``hitDensities[age] * transformed_intensity``: float times double,
            # rounded to float as its rank_t result
            r = <float>(<double>r * self.cost[slot])
        return r

    cdef void _update(self, int64_t slot, bint inserted, const Access* acc) noexcept nogil:
        """libCacheSim's ``LHD::update`` for the block in ``slot`` (just inserted, or hit)."""
        cdef LHDTag* t = &self.tags[slot]
        cdef int64_t age, i
        cdef bint explore
        if inserted:
            t.last_hit_age = 0
            t.cls = 0               # NOTE: hit_age_class(0 + MAX_AGE)
        else:
            age = self._age(t)
            self.hits[t.cls * MAX_AGE + age] += 1
            if t.explorer:
                self.explorer_budget += 1
            t.cls = hit_age_class(age + t.last_hit_age)
            t.last_hit_age = <uint16_t>age
        t.ts = self.clock
        if self.cost != NULL:
            self.cost[slot] = <double>acc.cost
        explore = rng_below(&self.rng, EXPLORE_INVERSE_PROBABILITY) == 0
        if explore and self.explorer_budget > 0 and self.n_reconf < EARLY_RECONFIGURATIONS:
            t.explorer = 1
            self.explorer_budget -= 1
        else:
            t.explorer = 0
        if inserted and not explore and self._rank(slot) < self.ewma_victim:
            i = self.ring_head % ADMISSIONS
            self.ring_id[i] = acc.block_id
            self.ring_slot[i] = slot
            self.ring_head += 1
        self.clock += 1
        self.next_reconf -= 1
        if self.next_reconf == 0:
            self._reconfigure()
            self.next_reconf = self.interval
            self.n_reconf += 1

    cdef void _reconfigure(self) noexcept nogil:
        """libCacheSim's ``reconfigure``: decay every count, adapt the coarsening, remodel."""
        cdef int64_t i
        cdef float* hits = self.hits
        cdef float* evs = self.evs
        for i in range(TABLE):
            hits[i] = hits[i] * EWMA_DECAY
            evs[i] = evs[i] * EWMA_DECAY
        self._adapt_age_coarsening()
        self._model_hit_density()

    cdef void _adapt_age_coarsening(self) noexcept nogil:
        cdef float num_objects, optimal
        cdef int64_t lg, delta, d, c, a, j
        cdef float* h
        cdef float* e
        self.ewma_objects = self.ewma_objects * EWMA_DECAY
        self.ewma_mass = self.ewma_mass * EWMA_DECAY
        self.ewma_objects = self.ewma_objects + <float>self.n_resident
        self.ewma_mass = self.ewma_mass + <float>1.0
        num_objects = self.ewma_objects / self.ewma_mass
        optimal = <float>(<double>num_objects
                          / <double>(AGE_COARSENING_ERROR_TOLERANCE * <float>MAX_AGE))
        if self.n_reconf != 5 and self.n_reconf != 25:
            return
        lg = 1
        while <float>(<int64_t>1 << lg) < optimal:
            lg += 1
        delta = lg - self.shift
        self.shift = lg
        self.ewma_objects = self.ewma_objects * <float>8
        self.ewma_mass = self.ewma_mass * <float>8
        if delta < 0:
            # stretch: the ages past the new range fold into the last one, then a <- a >> d
            d = -delta
            for c in range(HIT_AGE_CLASSES):
                h = &self.hits[c * MAX_AGE]
                e = &self.evs[c * MAX_AGE]
                for a in range(MAX_AGE >> d, MAX_AGE - 1):
                    h[MAX_AGE - 1] = h[MAX_AGE - 1] + h[a]
                    e[MAX_AGE - 1] = e[MAX_AGE - 1] + e[a]
                for a in range(MAX_AGE - 2, -1, -1):
                    h[a] = h[a >> d] / <float>(<int64_t>1 << d)
                    e[a] = e[a >> d] / <float>(<int64_t>1 << d)
        elif delta > 0:
            # compress: a <- the sum of a << d .. (a << d) + 2**d - 1
            for c in range(HIT_AGE_CLASSES):
                h = &self.hits[c * MAX_AGE]
                e = &self.evs[c * MAX_AGE]
                for a in range(MAX_AGE >> delta):
                    h[a] = h[a << delta]
                    e[a] = e[a << delta]
                    for j in range(1, <int64_t>1 << delta):
                        h[a] = h[a] + h[(a << delta) + j]
                        e[a] = e[a] + e[(a << delta) + j]
                for a in range(MAX_AGE >> delta, MAX_AGE - 1):
                    h[a] = 0
                    e[a] = 0

    cdef void _model_hit_density(self) noexcept nogil:
        cdef int64_t c, a
        cdef float total_events, total_hits, lifetime
        cdef const float* h
        cdef const float* e
        cdef float* dn
        for c in range(HIT_AGE_CLASSES):
            h = &self.hits[c * MAX_AGE]
            e = &self.evs[c * MAX_AGE]
            dn = &self.dens[c * MAX_AGE]
            total_events = h[MAX_AGE - 1] + e[MAX_AGE - 1]
            total_hits = h[MAX_AGE - 1]
            lifetime = total_events
            # NOTE: the density at MAX_AGE - 1 keeps its initial value (never read: that age
            # ranks -FLT_MAX), as in libCacheSim
            for a in range(MAX_AGE - 2, -1, -1):
                total_hits = total_hits + h[a]
                total_events = total_events + (h[a] + e[a])
                lifetime = lifetime + total_events
                if <double>total_events > 1e-5:
                    dn[a] = total_hits / lifetime
                else:
                    dn[a] = 0

    cdef int64_t _victim(self) noexcept nogil:
        """libCacheSim's ``rank`` over unpinned candidates while there are any: the slot to
        evict, -1 when nothing is resident.  Updates ``ewma_victim``."""
        cdef int64_t k, got, j, i, b, s, best
        cdef float r, best_rank
        cdef bint skip_pinned
        cdef const LHDTag* t
        k = ASSOCIATIVITY if self.n_reconf > EARLY_RECONFIGURATIONS else EARLY_CANDIDATES
        got = self._draws(k, self.cand)
        if got == 0:
            return -1
        if self.capacity >= PF_MIN_SLOTS:
            # NOTE: the draws are independent: load their tags, then their densities, together
            # (each a miss in a large cache) before ranking them one by one.  In a small cache
            # everything sits in L2 and the prefetch only costs, hence the bound (measured:
            # docs/performance.md, "Measured choices").
            for j in range(got):
                __builtin_prefetch(&self.tags[self.cand[j]])
                if self.cost != NULL:
                    __builtin_prefetch(&self.cost[self.cand[j]])
            for j in range(got):
                t = &self.tags[self.cand[j]]
                __builtin_prefetch(&self.dens[t.cls * MAX_AGE + self._age(t)])
        # NOTE: libCacheSim starts from FLT_MAX with no victim; starting from the first draw
        # decides the same whenever a rank is below FLT_MAX (always, unless lhd_compute's cost
        # makes a rank +inf), and never leaves the victim unset.
        best = self.cand[0]
        best_rank = self._rank(best)
        for j in range(1, got):
            s = self.cand[j]
            r = self._rank(s)
            if r < best_rank:
                best = s
                best_rank = r
        skip_pinned = self.n_pinned > 0 and self.n_pinned < self.dense.n
        for i in range(ADMISSIONS):
            b = self.ring_id[i]
            if b == 0:
                continue
            s = self.ring_slot[i]
            if self.slot_id(s) != b or (skip_pinned and self.pins[s] > 0):
                continue
            r = self._rank(s)
            if r < best_rank:
                best = s
                best_rank = r
        self.ewma_victim = EWMA_DECAY * self.ewma_victim + EWMA_REST * best_rank
        return best

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._update(slot, False, acc)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = Random.insert(self, acc), i
        for i in range(ADMISSIONS):
            if self.ring_id[i] == acc.block_id:
                self.ring_slot[i] = slot
        self._update(slot, True, acc)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        """libCacheSim's ``rank`` then ``replaced``: the victim's eviction is counted."""
        cdef int64_t s = self._victim()
        cdef const LHDTag* t
        if s < 0:
            return 0
        t = &self.tags[s]
        self.evs[t.cls * MAX_AGE + self._age(t)] += 1
        if t.explorer:
            self.explorer_budget += 1
        return self._evict_slot(s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.tags[slot].explorer:
            self.explorer_budget += 1
        self._evict_slot(slot)

    # ---- inspection (tests) ----

    def tag(self, block_id: int) -> tuple[int, int, int, bool]:
        """(ts, last hit age, class 0..15, explorer) of a resident block."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        t = self.tags[s]
        return t.ts, t.last_hit_age, t.cls, bool(t.explorer)

    def rank(self, block_id: int) -> float:
        """The rank of a resident block now (what an eviction compares)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self._rank(s)

    def table(self, which: str, cls: int, age: int) -> float:
        """``hits``, ``evictions`` or ``density`` at (class 0..15, age)."""
        if not (0 <= cls < HIT_AGE_CLASSES and 0 <= age < MAX_AGE):
            raise IndexError((cls, age))
        i = cls * MAX_AGE + age
        if which == "hits":
            return self.hits[i]
        if which == "evictions":
            return self.evs[i]
        if which == "density":
            return self.dens[i]
        raise ValueError(which)

    def state(self) -> dict:
        """The scalar state: clock, shift, reconfigurations, EWMAs, explorer budget, the ring."""
        return {"clock": self.clock, "shift": self.shift, "n_reconf": self.n_reconf,
                "ewma_victim": self.ewma_victim, "ewma_objects": self.ewma_objects,
                "ewma_mass": self.ewma_mass, "explorer_budget": self.explorer_budget,
                "ring": [self.ring_id[i] for i in range(ADMISSIONS)]}


def check_lhd_params(name: str, params: dict) -> tuple[int, int]:
    """(seed, reconfigure-interval) of ``params``, or a clear error naming ``name``."""
    interval = int(params["reconfigure-interval"])
    if not 1 <= interval <= MAX_INTERVAL:
        raise ShadowError(
            f"policy {name}: reconfigure-interval must be in 1..2**40, got {interval}")
    return check_seed(name, params), interval


def make(capacity: int, params: dict) -> LHD:
    seed, interval = check_lhd_params("lhd", params)
    return LHD(capacity, seed, interval)
