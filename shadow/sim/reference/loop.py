"""The serve loop in plain Python: slow, obviously correct, the oracle for the Cython loop.

Same phases and counters as ``shadow/sim/loop.pyx`` (read that module's docstring); policies
are the ``reference/<name>.py`` classes, keyed by block id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from shadow.sim.cost import CostModel, parse_cost_model


def llround(x: float) -> int:
    """C's llround: round half away from zero."""
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


@dataclass
class Acc:
    block_id: int
    cost: int
    cost_exact: float
    next_access: int
    vtime: int
    req_vtime: int
    position: int


@dataclass
class Ctx:
    block_ids: list[int]
    n_blocks: int
    timestamp_s: float
    req_vtime: int
    vtime: int


@dataclass
class Served:
    """What one request did: ``status`` 'served' | 'skipped' | 'failed'."""

    status: str
    hits: list[bool] = field(default_factory=list)
    n_hits: int = 0
    n_prefix_hits: int = 0


class RefCache:
    """One (policy, capacity) cache and its counters."""

    def __init__(self, policy: Any, capacity: int, *, cost_model: str | CostModel = "uniform",
                 pin: bool = True, replay_order: str = "deepest-first", verify: bool = True) -> None:
        self.policy = policy
        self.capacity = capacity
        self.cost = parse_cost_model(cost_model) if isinstance(cost_model, str) else cost_model
        self.pin = pin
        self.deepest_first = replay_order == "deepest-first"
        self.verify = verify
        self.pins: dict[int, int] = {}
        self.vtime = 0
        self.n_req = self.n_req_skipped = self.n_blocks = self.n_hits = self.n_prefix_hits = 0
        self.total_cost = self.saved_cost = self.prefix_saved_cost = 0.0
        self.n_eviction = self.n_self_eviction = self.n_unexpected_eviction = 0
        self.holes: list[tuple[int, int]] = []
        self.failed: str | None = None

    def pinned(self) -> set[int]:
        return {b for b, c in self.pins.items() if c > 0}

    def _evicted(self, victim: int) -> None:
        self.pins.pop(victim, None)

    def serve(self, ids: Sequence[int], next_access: Sequence[int] | None = None,
              timestamp_s: float = -1.0, n_match: int | None = None,
              n_anonymous: int = 0) -> Served:
        """Serve one request; only ``ids[:n_match]`` are looked up (counted), all are accessed.

        ``n_anonymous`` slots (no block in them) are made free for the request's duration and
        are free again afterwards.
        """
        ids = [int(x) for x in ids]
        B = len(ids)
        M = B if n_match is None else max(0, min(int(n_match), B))
        nxt = list(next_access) if next_access is not None else [-1] * B
        if self.failed:
            return Served("failed")
        alpha = set(ids)
        if len(alpha) + n_anonymous > self.capacity:
            self.n_req_skipped += 1
            return Served("skipped")
        self.n_req += 1
        p = self.policy
        # 1. match
        hits = [p.find(b) for b in ids]
        costs = [self.cost.cost(i) for i in range(B)]
        missing: set[int] = set()
        first_miss = None
        in_prefix = True
        n_hits = n_prefix = 0
        for i, (b, h) in enumerate(zip(ids, hits)):
            if not h:
                missing.add(b)
                if first_miss is None:
                    first_miss = i
            if i >= M:
                continue                     # accessed, not looked up
            self.n_blocks += 1
            self.total_cost += costs[i]
            if h:
                n_hits += 1
                self.saved_cost += costs[i]
                if in_prefix:
                    n_prefix += 1
                    self.prefix_saved_cost += costs[i]
            else:
                in_prefix = False
        self.n_hits += n_hits
        self.n_prefix_hits += n_prefix
        i = 0
        while i < M:
            if not hits[i]:
                s = i
                while i < M and not hits[i]:
                    i += 1
                self.holes.append((s, i - s))
            else:
                i += 1
        hit_ids = [b for b, h in zip(ids, hits) if h]
        if self.pin:
            for b in hit_ids:
                self.pins[b] = self.pins.get(b, 0) + 1
        # 2. allocate
        V0 = self.vtime
        needed = len(missing) + n_anonymous - (self.capacity - len(p))
        if needed > 0:
            f = first_miss
            if f is None:
                # NOTE: every block hit; only the anonymous slots need room (no block behind them)
                acc = Acc(0, 0, 0.0, -1, V0, V0 + B, -1)
            else:
                acc = Acc(ids[f], llround(costs[f]), costs[f], nxt[f], V0, V0 + B, f)
            progress = 0
            batched = getattr(p, "evict_n", None)
            while progress < needed:
                # NOTE: like the Cython loop, a policy with a batched evict_n is asked for all the
                # victims still needed at once (sampling policies draw one sample per batch).
                if batched is not None:
                    victims = list(batched(acc, needed - progress, self.pinned()))
                else:
                    victims = [p.evict(acc, self.pinned())]
                assert victims and all(victims), "reference policy could not evict"
                for victim in victims:
                    self._evicted(victim)
                    self.n_eviction += 1
                    if victim in alpha:
                        self.n_self_eviction += 1
                    else:
                        progress += 1
        # 3. access
        spills = hasattr(p, "spilled")
        if spills:
            # NOTE: a policy that can evict inside hit/insert (twoq, slru) reads the pins from
            # ``pinned`` there; its victims come back in ``spilled`` (unexpected evictions).
            p.spilled.clear()
            p.pinned = self.pinned()
        p.on_request(Ctx(ids, B, timestamp_s, V0 + B, V0))
        order = range(B - 1, -1, -1) if self.deepest_first else range(B)
        for i in order:
            self.vtime += 1
            acc = Acc(ids[i], llround(costs[i]), costs[i], nxt[i], self.vtime, V0 + B, i)
            if p.find(ids[i]):
                p.hit(ids[i], acc)
            else:
                if len(p) >= self.capacity:
                    victim = p.evict(acc, self.pinned())
                    assert victim, "reference policy could not evict in the access phase"
                    self._evicted(victim)
                    if spills:
                        p.pinned.discard(victim)
                    self.n_unexpected_eviction += 1
                p.insert(ids[i], acc)
            if spills and p.spilled:
                for victim in p.spilled:
                    self._evicted(victim)
                    p.pinned.discard(victim)
                    self.n_unexpected_eviction += 1
                p.spilled.clear()
        # 4. verify
        if self.verify:
            for b in ids:
                if not p.find(b):
                    self.failed = f"block {b} not resident"
                    return Served("failed")
        # 5. unpin, release tail first
        if self.pin:
            for b in hit_ids:
                if b in self.pins:
                    self.pins[b] -= 1
                    if self.pins[b] <= 0:
                        del self.pins[b]
        if getattr(p, "WANTS_RELEASE", False):
            for b in reversed(ids):
                p.on_release(b)
        assert len(p) <= self.capacity
        return Served("served", hits, n_hits, n_prefix)

    def stats(self) -> dict[str, float]:
        return {
            "n_req": self.n_req,
            "n_req_skipped": self.n_req_skipped,
            "n_blocks": self.n_blocks,
            "n_hits": self.n_hits,
            "n_prefix_hits": self.n_prefix_hits,
            "total_cost": self.total_cost,
            "saved_cost": self.saved_cost,
            "prefix_saved_cost": self.prefix_saved_cost,
            "n_eviction": self.n_eviction,
            "n_self_eviction": self.n_self_eviction,
            "n_unexpected_eviction": self.n_unexpected_eviction,
        }
