"""The serve loop in plain Python: slow, obviously correct, the oracle for the Cython loop.

Same phases and counters as ``shadow/sim/core/loop.pyx`` (read that module's docstring); policies
are the ``reference/<name>.py`` classes, keyed by block id.

Offline, :meth:`RefCache.serve` serves a request whole.  A reference with ``WANTS_REQUEST_CTX =
True`` gets ``set_request_ctx(Arrival)`` once the request passes the skip check, before the match.  Live (docs/sim.md "Live API"),
:meth:`RefCache.admit` serves it but keeps its blocks pinned and its anonymous slots reserved,
and :meth:`RefCache.release` later inserts its generated blocks and lets it go.

Leaf-only eviction (a policy whose ``leaf_only`` is true): ``parent`` maps each resident block
to its prefix parent (the previous id of the request, or generated run, that inserted it) and
``kids`` each parent id to its resident children; a resident block with children is *held*: the
policy gets it in its ``pinned`` set beside the request pins, so a pin-honouring policy evicts
leaves only.  The room held by running requests is still counted from request pins alone.

Invariant after every call: ``len(policy) + reserved <= capacity``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from shadow.sim.cost.models import CostModel, parse_cost_model


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
class Arrival:
    """What ``set_request_ctx`` gets (core/policy.pxd's ``ArrivalCtx``), before match and allocation."""

    timestamp_s: float
    category: int
    session_id: int
    session_next_req: int
    n_blocks: int
    vtime: int


@dataclass
class Ctx:
    block_ids: list[int]
    n_blocks: int
    timestamp_s: float
    req_vtime: int
    vtime: int


@dataclass
class Served:
    """What one request did: ``status`` 'served' | 'skipped' | 'failed'.

    The match statistics (hits, ``cost``, ``saved``, ``prefix_saved``) cover the looked-up
    blocks of a served request and are zero otherwise.
    """

    status: str
    hits: list[bool] = field(default_factory=list)
    n_hits: int = 0
    n_prefix_hits: int = 0
    cost: float = 0.0
    saved: float = 0.0
    prefix_saved: float = 0.0


class RefCache:
    """One (policy, capacity) cache and its counters.

    ``pins`` counts, per resident block, the holders keeping it: the arriving request's match
    hits while it is served, and every block of each admitted (live) request until its
    release.  ``reserved`` is the anonymous slots the admitted requests hold.  With leaf-only
    eviction ``parent`` and ``kids`` are the prefix tree of the resident blocks (module doc).
    """

    def __init__(self, policy: Any, capacity: int, *, cost_model: str | CostModel = "uniform",
                 pin: bool = True, replay_order: str = "deepest-first", verify: bool = True) -> None:
        self.policy = policy
        self.capacity = capacity
        self.cost = parse_cost_model(cost_model) if isinstance(cost_model, str) else cost_model
        self.pin = pin
        self.deepest_first = replay_order == "deepest-first"
        self.verify = verify
        self.pins: dict[int, int] = {}
        self.reserved = 0
        self.vtime = 0
        self.n_req = self.n_req_skipped = self.n_blocks = self.n_hits = self.n_prefix_hits = 0
        self.total_cost = self.saved_cost = self.prefix_saved_cost = 0.0
        self.n_eviction = self.n_self_eviction = self.n_unexpected_eviction = 0
        self.holes: list[tuple[int, int]] = []
        self.failed: str | None = None
        self.leaf = bool(getattr(policy, "leaf_only", False))
        self.parent: dict[int, int] = {}
        self.kids: dict[int, int] = {}

    def pinned(self) -> set[int]:
        return {b for b, c in self.pins.items() if c > 0}

    def held(self) -> set[int]:
        """Resident blocks with a resident child (leaf-only eviction; empty otherwise)."""
        p = self.policy
        return {b for b in self.kids if p.find(b)}

    def blocked(self) -> set[int]:
        """What the policy must pass over: request pins, and leaf holds under leaf-only."""
        return self.pinned() | self.held() if self.leaf else self.pinned()

    def _leaf_insert(self, b: int, parent: int) -> None:
        """``b`` was just inserted with prefix parent ``parent`` (0: none)."""
        if not self.leaf:
            return
        if parent == b:
            parent = 0                       # a raw trace's repeated id is no parent of itself
        self.parent[b] = parent
        if parent:
            self.kids[parent] = self.kids.get(parent, 0) + 1

    def _pin(self, b: int) -> None:
        self.pins[b] = self.pins.get(b, 0) + 1

    def _unpin(self, b: int) -> None:
        """Drop one pin of ``b``; none left (it was evicted meanwhile, or never pinned): no-op."""
        if self.pins.get(b, 0) > 0:
            self.pins[b] -= 1
            if self.pins[b] == 0:
                del self.pins[b]

    def _evicted(self, victim: int) -> None:
        # a block that leaves takes its pins with it (a later copy starts unpinned)
        self.pins.pop(victim, None)
        q = self.parent.pop(victim, 0)
        if q:
            self.kids[q] -= 1
            if self.kids[q] == 0:
                del self.kids[q]

    def _spill_start(self) -> bool:
        """Before hits and inserts: a policy that can evict inside them (twoq, slru) reads the
        pins from its ``pinned`` set and reports its victims in ``spilled``."""
        p = self.policy
        if not hasattr(p, "spilled"):
            return False
        p.spilled.clear()
        p.pinned = self.blocked()
        return True

    def _spilled(self) -> int:
        """Drop what the policy evicted inside its last hit or insert; how many blocks."""
        p = self.policy
        n = len(p.spilled)
        for victim in p.spilled:
            self._evicted(victim)
            p.pinned.discard(victim)
        p.spilled.clear()
        return n

    def serve(self, ids: Sequence[int], next_access: Sequence[int] | None = None,
              timestamp_s: float = -1.0, n_match: int | None = None,
              n_anonymous: int = 0, category: int = 0, session_id: int = -1,
              session_next_req: int = -1) -> Served:
        """Serve one request; only ``ids[:n_match]`` are looked up (counted), all are accessed.

        ``n_anonymous`` slots (no block in them) are made free for the request's duration and
        are free again afterwards.  ``timestamp_s``, ``category``, ``session_id`` and
        ``session_next_req`` are what ``set_request_ctx`` gets.
        """
        return self._serve(ids, next_access, timestamp_s, n_match, n_anonymous, hold=False,
                           info=(category, session_id, session_next_req))

    def admit(self, ids: Sequence[int], next_access: Sequence[int] | None = None,
              timestamp_s: float = -1.0, n_match: int | None = None,
              n_anonymous: int = 0, category: int = 0, session_id: int = -1,
              session_next_req: int = -1) -> Served:
        """Live admission: :meth:`serve`, but every block stays pinned and ``n_anonymous`` slots
        stay reserved until :meth:`release`.

        Skipped (nothing changes but ``n_req_skipped``) when the request does not fit beside the
        anonymous slots already reserved, or when the room it needs is held: fewer unpinned
        blocks than it must evict (an engine would make it wait).
        """
        return self._serve(ids, next_access, timestamp_s, n_match, n_anonymous, hold=True,
                           info=(category, session_id, session_next_req))

    def _serve(self, ids: Sequence[int], next_access: Sequence[int] | None, timestamp_s: float,
               n_match: int | None, n_anonymous: int, hold: bool,
               info: tuple[int, int, int] = (0, -1, -1)) -> Served:
        ids = [int(x) for x in ids]
        B = len(ids)
        M = B if n_match is None else max(0, min(int(n_match), B))
        nxt = list(next_access) if next_access is not None else [-1] * B
        if self.failed:
            return Served("failed")
        alpha = set(ids)
        # 0. skip: the room is what the admitted requests' anonymous slots leave
        room = self.capacity - self.reserved
        if len(alpha) + n_anonymous > room:
            self.n_req_skipped += 1
            return Served("skipped")
        p = self.policy
        if getattr(p, "WANTS_REQUEST_CTX", False):
            p.set_request_ctx(Arrival(float(timestamp_s), int(info[0]), int(info[1]), int(info[2]),
                                      B, self.vtime))
        # 1. match: statistics kept aside until the request is known to be served
        hits = [p.find(b) for b in ids]
        costs = [self.cost.cost(i) for i in range(B)]
        missing: set[int] = set()
        first_miss = None
        in_prefix = True
        n_hits = n_prefix = 0
        cost = saved = prefix_saved = 0.0
        for i, (b, h) in enumerate(zip(ids, hits)):
            if not h:
                missing.add(b)
                if first_miss is None:
                    first_miss = i
            if i >= M:
                continue                     # accessed, not looked up
            cost += costs[i]
            if h:
                n_hits += 1
                saved += costs[i]
                if in_prefix:
                    n_prefix += 1
                    prefix_saved += costs[i]
            else:
                in_prefix = False
        holes = []
        i = 0
        while i < M:
            if not hits[i]:
                s = i
                while i < M and not hits[i]:
                    i += 1
                holes.append((s, i - s))
            else:
                i += 1
        hit_ids = [b for b, h in zip(ids, hits) if h] if self.pin else []
        for b in hit_ids:
            self._pin(b)
        # 2. allocate
        V0 = self.vtime
        needed = len(missing) + n_anonymous - (room - len(p))
        if hold and needed > len(p) - len(self.pinned()):
            # the room is held by admitted requests (or is the request's own hits)
            return self._skip_held(hit_ids)
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
                    victims = [v for v in batched(acc, needed - progress, self.blocked()) if v]
                else:
                    victims = [v for v in [p.evict(acc, self.blocked())] if v]
                if not victims and hold:
                    # NOTE: as in core/loop.pyx the victims already taken stay evicted; the check
                    # above leaves a pin-honouring policy enough unpinned victims, so this is
                    # a policy that refused every block it could have taken.
                    return self._skip_held(hit_ids)
                assert victims, "reference policy could not evict"
                for victim in victims:
                    self._evicted(victim)
                    self.n_eviction += 1
                    if victim in alpha:
                        self.n_self_eviction += 1
                    else:
                        progress += 1
        self.n_req += 1
        self.n_blocks += M
        self.n_hits += n_hits
        self.n_prefix_hits += n_prefix
        self.total_cost += cost
        self.saved_cost += saved
        self.prefix_saved_cost += prefix_saved
        self.holes.extend(holes)
        # 3. access; the anonymous slots keep their room (an insert into it evicts instead)
        limit = room - n_anonymous
        spills = self._spill_start()
        if getattr(p, "READS_PINS_AT_RECORD", False):
            p.pinned = self.pinned()
        # NOTE: a policy may free blocks in on_request (the session family frees the blocks a
        # session's turn dropped): evictions, not unexpected ones (core/loop.pyx does the same)
        n_before = len(p)
        p.on_request(Ctx(ids, B, timestamp_s, V0 + B, V0))
        self.n_eviction += max(0, n_before - len(p))
        order = range(B - 1, -1, -1) if self.deepest_first else range(B)
        for i in order:
            self.vtime += 1
            acc = Acc(ids[i], llround(costs[i]), costs[i], nxt[i], self.vtime, V0 + B, i)
            if spills and self.leaf:
                p.pinned = self.blocked()    # the holds move with every insert and eviction
            if p.find(ids[i]):
                p.hit(ids[i], acc)
            else:
                if len(p) >= limit:
                    victim = p.evict(acc, self.blocked())
                    assert victim, "reference policy could not evict in the access phase"
                    self._evicted(victim)
                    if spills:
                        p.pinned.discard(victim)
                    self.n_unexpected_eviction += 1
                    if spills and self.leaf:
                        p.pinned = self.blocked()
                p.insert(ids[i], acc)
                self._leaf_insert(ids[i], ids[i - 1] if i > 0 else 0)
            if spills:
                self.n_unexpected_eviction += self._spilled()
        # 4. verify
        if self.verify:
            for b in ids:
                if not p.find(b):
                    self.failed = f"block {b} not resident"
                    return Served("failed")
        # 5. unpin the match; hold (live) or release tail first
        for b in hit_ids:
            self._unpin(b)
        if hold:
            # one pin per position (a block twice in the request is held twice), resident ones
            # only (without verify an access-phase eviction may have taken one)
            for b in ids:
                if p.find(b):
                    self._pin(b)
            self.reserved += n_anonymous
        elif getattr(p, "WANTS_RELEASE", False):
            for b in reversed(ids):
                p.on_release(b)
        assert len(p) + self.reserved <= self.capacity
        return Served("served", hits, n_hits, n_prefix, cost, saved, prefix_saved)

    def _skip_held(self, hit_ids: list[int]) -> Served:
        """Skip an admission whose room is held: its match pins go, nothing is counted."""
        for b in hit_ids:
            self._unpin(b)
        self.n_req_skipped += 1
        return Served("skipped")

    def release(self, ids: Sequence[int], extra_ids: Sequence[int] = (), n_anonymous: int = 0,
                n_anonymous_final: int = 0) -> None:
        """Release a served admission of ``ids`` with ``n_anonymous`` slots: insert the
        generated blocks ``extra_ids``, then unpin tail first.

        vLLM's final partial block: the request ends holding ``n_anonymous_final`` anonymous
        slots.  Of the admission's reserved slots it keeps that many (the rest are free before
        the generated blocks go in); more than it reserved are taken after the generated
        blocks (vLLM allocates a request's blocks in order), each a free slot or one eviction.
        At the end every anonymous slot of the request is free.  The evictions here (none asked
        by a request's match) count in ``n_eviction`` only.  A failed cache changes no more.
        """
        if self.failed:
            return
        ids = [int(x) for x in ids]
        extra = [int(x) for x in extra_ids]
        B, E = len(ids), len(extra)
        p = self.policy
        keep = max(0, min(n_anonymous_final, n_anonymous))
        self.reserved = max(0, self.reserved - (n_anonymous - keep))
        spills = self._spill_start()
        # the generated blocks, in order (positions B..B+E-1), unpinned: one vtime each
        for i, b in enumerate(extra):
            self.vtime += 1
            c = self.cost.cost(B + i)
            acc = Acc(b, llround(c), c, -1, self.vtime, self.vtime, B + i)
            if spills and self.leaf:
                p.pinned = self.blocked()
            if p.find(b):
                p.hit(b, acc)
            else:
                if len(p) + self.reserved >= self.capacity:
                    if len(p) <= len(self.pinned()):
                        continue             # every block held by a running request: not cached
                    victim = p.evict(acc, self.blocked())
                    if not victim:
                        continue             # nothing evictable: the block is not cached
                    self._evicted(victim)
                    if spills:
                        p.pinned.discard(victim)
                    self.n_eviction += 1
                    if spills and self.leaf:
                        p.pinned = self.blocked()
                p.insert(b, acc)
                self._leaf_insert(b, extra[i - 1] if i > 0 else (ids[B - 1] if B else 0))
            if spills:
                self.n_eviction += self._spilled()
        # the final partial block beyond the reservation: a slot each, evicting when full
        grown = 0
        for _ in range(n_anonymous_final - keep):
            if len(p) + self.reserved >= self.capacity:
                if len(p) <= len(self.pinned()):
                    break                    # every block held: no slot for it
                self.vtime += 1
                c = self.cost.cost(B + E)
                victim = p.evict(Acc(0, llround(c), c, -1, self.vtime, self.vtime, B + E),
                                 self.blocked())
                if not victim:
                    break                    # nothing evictable: no slot for it
                self._evicted(victim)
                if spills:
                    p.pinned.discard(victim)
                self.n_eviction += 1
            self.reserved += 1
            grown += 1
        # tail first, like vLLM's free_blocks(reversed(req_blocks)): the generated blocks are
        # the deepest, then the prompt from its last block to its root
        wants_release = getattr(p, "WANTS_RELEASE", False)
        if wants_release:
            for b in reversed(extra):
                if p.find(b):
                    p.on_release(b)
        for b in reversed(ids):
            if p.find(b):
                self._unpin(b)
                if wants_release:
                    p.on_release(b)
        self.reserved = max(0, self.reserved - (keep + grown))
        assert len(p) + self.reserved <= self.capacity

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
