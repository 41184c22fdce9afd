"""Pure-Python asym_cache (arXiv 2606.02964 §4.2-4.5, AsymCache's block evictor): the
differential oracle for policies/cost_aware/asym_cache.pyx.

The victim minimises the expected recompute cost ``E = f(tau) * dT`` (Eq. 3) with ``dT =
max(cost, 1)`` (the access's integer cost at insert), ``tau = max(0, now - last_access)`` and
``f(tau) = min(exp(-tau / alpha), exp(-(tau - tau0) / beta))`` (Eq. 9), where ``alpha = -L /
ln(p)``, ``beta = alpha / r``, ``tau0 = L (1 - 1/r)`` meet at ``tau = L`` with ``f = p``.

``L`` is the P99 of the reuse gaps (``now - last_access > 0`` at a hit) seen before the first
eviction (at most 200,000 samples), ``max(1, gaps[min(n-1, int(0.99 n))])``, or
``default-lifespan`` (also at least 1) if there were none; it is frozen at the first eviction.

Order, as the two heaps of policies/cost_aware/asym_cache.pyx compute it (this module scans):

* branch 1 (``tau < L``) by ``(ln dT + last_access / alpha, stamp)``;
* branch 2 (``tau >= L``) by ``(ln dT + (last_access + tau0) / beta, stamp)``;
* the two minima by ``(ln E, stamp)``, ``ln E = ln dT - tau / alpha`` (branch 1) or ``ln dT -
  (tau - tau0) / beta`` (branch 2): logs, so no ``E`` underflows to a tie;

``stamp`` counts hits and inserts (the last access's order).  Clock: ``clock=seconds`` reads the
request's arrival seconds (its ``vtime`` when it has none), ``clock=block`` always its ``vtime``
(block accesses before it); ``now`` never moves backwards.

Pins: the minimum over the unpinned blocks; over all of them if every block is pinned.
"""

from __future__ import annotations

import math

from shadow.sim.params import parse_params
from shadow.sim.policies.cost_aware._asym_cache_params import check_params

DEFAULTS = "reuse-prob=0.5,slope-ratio=40.0,default-lifespan=180.0,clock=seconds"
HONOURS_PINS = True

#: reuse-gap samples kept for the lifespan (the fork's kGapSampleCap)
GAP_SAMPLE_CAP = 200_000


class AsymCache:
    WANTS_REQUEST_CTX = True

    def __init__(self, capacity: int, params: dict | None = None) -> None:
        p = {**parse_params(None, DEFAULTS), **(params or {})}
        self.p, self.r, self.default_lifespan, self.clock = check_params(p)
        self.capacity = capacity
        self.now = 0.0
        self.stamp = 0
        self.gaps: list[float] = []
        self.frozen = False
        self.L = self.alpha = self.beta = 1.0
        self.tau0 = 0.0
        self.meta: dict[int, list] = {}        # id -> [last_access, ln dT, stamp]

    def __len__(self) -> int:
        return len(self.meta)

    def find(self, b: int) -> bool:
        return b in self.meta

    def set_request_ctx(self, a) -> None:
        t = a.timestamp_s if self.clock == "seconds" and a.timestamp_s >= 0 else float(a.vtime)
        self.now = max(self.now, t)

    def on_request(self, ctx) -> None:
        pass

    def hit(self, b: int, acc) -> None:
        m = self.meta[b]
        gap = self.now - m[0]
        if not self.frozen and gap > 0.0 and len(self.gaps) < GAP_SAMPLE_CAP:
            self.gaps.append(gap)
        self.stamp += 1
        m[0], m[2] = self.now, self.stamp

    def insert(self, b: int, acc) -> None:
        self.stamp += 1
        self.meta[b] = [self.now, math.log(float(max(int(acc.cost), 1))), self.stamp]

    def freeze(self) -> None:
        life = self.default_lifespan
        if self.gaps:
            g = sorted(self.gaps)
            life = g[min(len(g) - 1, int(0.99 * len(g)))]
        self.L = max(1.0, life)
        self.alpha = -self.L / math.log(self.p)
        self.beta = self.alpha / self.r
        self.tau0 = self.L * (1.0 - 1.0 / self.r)
        self.gaps = []
        self.frozen = True

    def tau(self, b: int) -> float:
        return max(0.0, self.now - self.meta[b][0])

    def key(self, b: int) -> tuple[float, int]:
        """(heap key, stamp) of ``b`` in its current branch."""
        last, lnc, st = self.meta[b]
        if self.now - last >= self.L:
            return (lnc + (last + self.tau0) / self.beta, st)
        return (lnc + last / self.alpha, st)

    def log_e(self, b: int) -> float:
        last, lnc, _ = self.meta[b]
        tau = self.tau(b)
        if self.now - last >= self.L:
            return lnc - (tau - self.tau0) / self.beta
        return lnc - tau / self.alpha

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.meta:
            return 0
        if not self.frozen:
            self.freeze()
        cands = [b for b in self.meta if b not in pinned] or list(self.meta)
        b1 = [b for b in cands if self.now - self.meta[b][0] < self.L]
        b2 = [b for b in cands if self.now - self.meta[b][0] >= self.L]
        mins = [min(bs, key=self.key) for bs in (b1, b2) if bs]
        victim = min(mins, key=lambda b: (self.log_e(b), self.meta[b][2]))
        del self.meta[victim]
        return victim

    def remove(self, b: int) -> None:
        del self.meta[b]


def make(capacity: int, params: dict | None = None) -> AsymCache:
    return AsymCache(capacity, params)
