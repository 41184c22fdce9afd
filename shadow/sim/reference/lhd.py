"""lhd reference: libCacheSim ``LHD`` (libCacheSim/cache/eviction/LHD/lhd.cpp, lhd.hpp) in plain
Python, every float operation rounded to float32 as libCacheSim's ``rank_t``, with ``random``'s
splitmix64 draws (reference/random.py); the same decisions as ``policies/adaptive/lhd.pyx``, which
documents the policy.

Class ``h`` (0..15) here is libCacheSim's class ``16 + h`` (every block's application class is
``DEFAULT_APP_ID % 16`` = 1); sizes are 1.
"""

from __future__ import annotations

import ctypes
import functools

from shadow.sim.reference.random import Random

DEFAULTS = "seed=1,reconfigure-interval=1048576"
HONOURS_PINS = True

MAX_AGE = 20000
CLASSES = 16
ASSOCIATIVITY = 32
EARLY_CANDIDATES = 8
EARLY_RECONFIGURATIONS = 50
ADMISSIONS = 8
EXPLORE_INVERSE_PROBABILITY = 32
INITIAL_SHIFT = 10


def f32(x: float) -> float:
    """``x`` rounded to float32 (C's conversion: +-inf past the range).

    NOTE: one double operation on float32 operands rounded to float32 equals the float32
    operation (double has more than 2 * 24 + 2 bits), so ``f32(a * b)`` is C's ``a * b`` in float.
    """
    return ctypes.c_float(x).value


EWMA_DECAY = f32(0.9)
EWMA_REST = f32(1 - EWMA_DECAY)
EXPLORER_BUDGET_FRACTION = f32(0.01)
AGE_COARSENING_ERROR_TOLERANCE = f32(0.01)
FLT_LOWEST = -f32(3.4028234663852886e38)


def hit_age_class(age: int) -> int:
    """libCacheSim's ``hitAgeClass``."""
    if age == 0:
        return CLASSES - 1
    log = 0
    while age < MAX_AGE and log < CLASSES - 1:
        age <<= 1
        log += 1
    return log


@functools.lru_cache(maxsize=1)
def _initial_densities() -> tuple[tuple[float, ...], ...]:
    """``(c + 1) / (a + 1)`` in double, stored as float, for libCacheSim's classes c = 16..31."""
    return tuple(tuple(f32((16 + h + 1) / (a + 1)) for a in range(MAX_AGE)) for h in range(CLASSES))


class LHD(Random):
    """``tag[b] = [ts, last_hit_age, cls, explorer]``; ``hits``, ``evs``, ``dens`` per class and
    age.  ``top``: every count at an age in ``top .. MAX_AGE - 2`` is 0.0 (see _reconfigure)."""

    def __init__(self, capacity: int, seed: int = 1, interval: int = 1 << 20) -> None:
        super().__init__(capacity, seed)
        self.tag: dict[int, list] = {}
        self.cost: dict[int, float] | None = None       # lhd_compute's costs
        self.hits = [[0.0] * MAX_AGE for _ in range(CLASSES)]
        self.evs = [[0.0] * MAX_AGE for _ in range(CLASSES)]
        self.dens = [list(row) for row in _initial_densities()]
        self.top = 0
        self.ring = [0] * ADMISSIONS
        self.ring_head = 0
        self.clock = 0
        self.interval = interval
        self.next_reconf = interval
        self.n_reconf = 0
        self.shift = INITIAL_SHIFT
        self.ewma_objects = 0.0
        self.ewma_mass = 0.0
        self.ewma_victim = 0.0
        self.explorer_budget = int(f32(f32(capacity) * EXPLORER_BUDGET_FRACTION))

    # ---- libCacheSim's LHD methods ----

    def age(self, b: int) -> int:
        return min((self.clock - self.tag[b][0]) >> self.shift, MAX_AGE - 1)

    def rank(self, b: int) -> float:
        ts, _, cls, explorer = self.tag[b]
        a = self.age(b)
        if a == MAX_AGE - 1:
            return FLT_LOWEST
        r = self.dens[cls][a]
        if explorer:
            r = f32(r + 1.0)
        if self.cost is not None:
            r = f32(r * self.cost[b])
        return r

    def _count(self, table: list[list[float]], cls: int, a: int) -> None:
        table[cls][a] = f32(table[cls][a] + 1.0)
        if a < MAX_AGE - 1:
            self.top = max(self.top, a + 1)

    def update(self, b: int, inserted: bool, acc) -> None:
        if inserted:
            self.tag[b] = [0, 0, hit_age_class(MAX_AGE + 0), False]
        else:
            t = self.tag[b]
            a = self.age(b)
            self._count(self.hits, t[2], a)
            if t[3]:
                self.explorer_budget += 1
            t[2] = hit_age_class(a + t[1])
            t[1] = a
        t = self.tag[b]
        t[0] = self.clock
        if self.cost is not None:
            self.cost[b] = float(acc.cost)
        explore = self.rng.below(EXPLORE_INVERSE_PROBABILITY) == 0
        if explore and self.explorer_budget > 0 and self.n_reconf < EARLY_RECONFIGURATIONS:
            t[3] = True
            self.explorer_budget -= 1
        else:
            t[3] = False
        if inserted and not explore and self.rank(b) < self.ewma_victim:
            self.ring[self.ring_head % ADMISSIONS] = b
            self.ring_head += 1
        self.clock += 1
        self.next_reconf -= 1
        if self.next_reconf == 0:
            self._reconfigure()
            self.next_reconf = self.interval
            self.n_reconf += 1

    def _reconfigure(self) -> None:
        """Decay, adapt the coarsening, remodel.  NOTE: the loops stop at ``top``: past it every
        count is 0.0, 0.0 * 0.9 and 0.0 / 2**d are 0.0 and x + 0.0 is x, so the skipped steps
        would change nothing; libCacheSim's (and the Cython's) full loops give the same tables."""
        top = self.top
        for cls in range(CLASSES):
            for table in (self.hits, self.evs):
                row = table[cls]
                for a in list(range(top)) + [MAX_AGE - 1]:
                    row[a] = f32(row[a] * EWMA_DECAY)
        self._adapt_age_coarsening()
        self._model_hit_density()

    def _adapt_age_coarsening(self) -> None:
        self.ewma_objects = f32(self.ewma_objects * EWMA_DECAY)
        self.ewma_mass = f32(self.ewma_mass * EWMA_DECAY)
        self.ewma_objects = f32(self.ewma_objects + f32(len(self)))
        self.ewma_mass = f32(self.ewma_mass + 1.0)
        num_objects = f32(self.ewma_objects / self.ewma_mass)
        optimal = f32(num_objects / f32(AGE_COARSENING_ERROR_TOLERANCE * MAX_AGE))
        if self.n_reconf not in (5, 25):
            return
        lg = 1
        while (1 << lg) < optimal:
            lg += 1
        delta = lg - self.shift
        self.shift = lg
        self.ewma_objects = f32(self.ewma_objects * 8)
        self.ewma_mass = f32(self.ewma_mass * 8)
        top = self.top
        if delta < 0:
            d = -delta
            for table in (self.hits, self.evs):
                for row in table:
                    for a in range(MAX_AGE >> d, min(top, MAX_AGE - 1)):
                        row[MAX_AGE - 1] = f32(row[MAX_AGE - 1] + row[a])
                    for a in range(min(top << d, MAX_AGE - 1) - 1, -1, -1):
                        row[a] = f32(row[a >> d] / (1 << d))
            self.top = min(top << d, MAX_AGE - 1)
        elif delta > 0:
            # NOTE: the full loops (only when the coarsening grows, a cache of 200k blocks and
            # more): the last bucket may sum the count at MAX_AGE - 1 in, as libCacheSim's does
            for table in (self.hits, self.evs):
                for row in table:
                    for a in range(MAX_AGE >> delta):
                        s = row[a << delta]
                        for j in range(1, 1 << delta):
                            s = f32(s + row[(a << delta) + j])
                        row[a] = s
                    for a in range(MAX_AGE >> delta, MAX_AGE - 1):
                        row[a] = 0.0
            self.top = MAX_AGE >> delta

    def _model_hit_density(self) -> None:
        for cls in range(CLASSES):
            h, e, dn = self.hits[cls], self.evs[cls], self.dens[cls]
            total_events = f32(h[MAX_AGE - 1] + e[MAX_AGE - 1])
            total_hits = h[MAX_AGE - 1]
            lifetime = total_events
            start = MAX_AGE - 2
            if total_events == 0.0:
                # NOTE: nothing at MAX_AGE - 1 and every count from top on is 0.0: no events
                # are left at those ages, so their densities are 0 (see _reconfigure)
                for a in range(self.top, MAX_AGE - 1):
                    dn[a] = 0.0
                start = self.top - 1
            for a in range(start, -1, -1):
                total_hits = f32(total_hits + h[a])
                total_events = f32(total_events + f32(h[a] + e[a]))
                lifetime = f32(lifetime + total_events)
                dn[a] = f32(total_hits / lifetime) if total_events > 1e-5 else 0.0

    def victim(self, pinned: set[int]) -> int:
        """libCacheSim's ``rank``: draws, then the recently admitted; pinned ones are passed
        over while some resident block is not pinned."""
        k = ASSOCIATIVITY if self.n_reconf > EARLY_RECONFIGURATIONS else EARLY_CANDIDATES
        cands = self.draws(k, pinned)
        if not cands:
            return 0
        best, best_rank = cands[0], self.rank(cands[0])
        for b in cands[1:]:
            r = self.rank(b)
            if r < best_rank:
                best, best_rank = b, r
        n_pinned = sum(1 for b in pinned if b in self.dense)
        for b in self.ring:
            if b == 0 or b not in self.dense or (0 < n_pinned < len(self) and b in pinned):
                continue
            r = self.rank(b)
            if r < best_rank:
                best, best_rank = b, r
        self.ewma_victim = f32(f32(EWMA_DECAY * self.ewma_victim) + f32(EWMA_REST * best_rank))
        return best

    # ---- the reference interface ----

    def hit(self, b: int, acc) -> None:
        self.update(b, False, acc)

    def insert(self, b: int, acc) -> None:
        super().insert(b, acc)
        self.update(b, True, acc)

    def evict(self, acc, pinned: set[int]) -> int:
        b = self.victim(pinned)
        if b == 0:
            return 0
        self._count(self.evs, self.tag[b][2], self.age(b))
        if self.tag[b][3]:
            self.explorer_budget += 1
        self._drop(b)
        return b

    def remove(self, b: int) -> None:
        if self.tag[b][3]:
            self.explorer_budget += 1
        self._drop(b)

    def _drop(self, b: int) -> None:
        super().remove(b)
        del self.tag[b]
        if self.cost is not None:
            del self.cost[b]


def make(capacity: int, params: dict) -> LHD:
    return LHD(capacity, int(params["seed"]), int(params["reconfigure-interval"]))
