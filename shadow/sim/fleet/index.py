"""What a KV-event-fed router believes each replica holds: the replica's resident blocks, seen
``lag`` seconds late, plus the router's own speculative entries.

A router that subscribes to vLLM's KV events (vllm-router's ``kv_aware``, llm-d's precise
prefix-cache scorer, Dynamo's KV router) indexes, per replica, the blocks its events say are
stored.  With ``lag=0`` that is exactly the replica's resident set, which the driver's caches
hold: no second copy is kept, the index's size is the replicas' resident blocks (what the real
index would hold).  With ``lag > 0`` a block stored at t is seen from ``t + lag`` on.  A removal
is seen at once: the serve loop reports no victims, so a router here never sees a block that has
already left (the real one may, for ``lag`` seconds).

Speculative entries (vllm-router ``src/kv_index/index.rs`` at commit 2ec0ff0, ``speculative_insert``,
``on_block_stored``, ``get_workers_for_block``):
after a decision the router inserts the prompt's blocks past the chosen replica's match for that
replica with a TTL; an entry is skipped where the replica already has a real one, replaced when
the real store is seen, and not seen once expired.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from shadow.sim.fleet.router import FleetView, Query, Router


class EventIndex:
    """Per replica: stores not yet seen (block -> seen at) and speculative entries (block ->
    (inserted at, expires at)).  Invariant: both hold only blocks of the last ``lag`` seconds
    or of unexpired, unconfirmed speculations, so they stay small beside the resident sets."""

    def __init__(self, replicas: int, lag: float, speculative: bool, ttl: float) -> None:
        self.n = replicas
        self.lag = lag
        self.speculative = speculative
        self.ttl = ttl
        self.unseen: list[dict[int, float]] = [{} for _ in range(replicas)]
        self.spec: list[dict[int, tuple[float, float]]] = [{} for _ in range(replicas)]
        self._queue: deque[tuple[float, int, int]] = deque()
        self._expiry: deque[tuple[float, int, int]] = deque()
        # NOTE: the last decision's speculation, entered only when something reads the index
        # before the chosen replica stores those blocks (serially it stores them at once, and
        # a stored block needs no speculative entry)
        self._pending: tuple[int, np.ndarray, float] | None = None

    def _advance(self, t: float) -> None:
        """Apply the stores seen by ``t``: each replaces a speculative entry made before it."""
        q = self._queue
        while q and q[0][0] <= t:
            seen, r, b = q.popleft()
            if self.unseen[r].get(b) == seen:
                del self.unseen[r][b]
            s = self.spec[r].get(b)
            if s is not None and s[0] <= seen:
                del self.spec[r][b]
        # NOTE: an expired speculation is never seen again; dropping it keeps this index's own
        # memory to the last TTL's entries (the real index keeps it until a removal event)
        x = self._expiry
        while x and x[0][0] < t:
            expires, r, b = x.popleft()
            s = self.spec[r].get(b)
            if s is not None and s[1] == expires:
                del self.spec[r][b]

    def stored(self, r: int, blocks, t: float, view: FleetView) -> None:
        """Replica ``r`` stored ``blocks`` at ``t`` (the driver's report after serving)."""
        if self._pending is not None:
            self._materialize(view)
        if self.lag <= 0:
            # NOTE: seen at once: a store only replaces this replica's speculations
            spec = self.spec[r]
            if spec:
                for b in blocks.tolist():
                    spec.pop(b, None)
            return
        seen = t + self.lag
        unseen = self.unseen[r]
        for b in blocks.tolist():
            unseen[b] = seen
            self._queue.append((seen, r, b))

    def busy(self) -> bool:
        """True while stores must be reported: they are seen late, or a speculation waits to be
        replaced by one."""
        return self.lag > 0 or self._pending is not None or any(self.spec)

    def simple(self) -> bool:
        """True when the index is exactly the resident sets (nothing unseen, no speculation)."""
        return not any(self.unseen) and not any(self.spec)

    def prefix(self, q: Query, view: FleetView) -> np.ndarray:
        """Per replica, the leading blocks of ``q.blocks`` the index holds at ``q.t``."""
        if self._pending is not None:
            self._materialize(view)
        self._advance(q.t)
        base = view.prefix(q)
        if self.simple():
            return base
        out = np.zeros(self.n, dtype=np.int64)
        blocks = q.blocks.tolist()
        for r in range(self.n):
            unseen, spec = self.unseen[r], self.spec[r]
            k = 0
            for i, b in enumerate(blocks):
                real = (i < base[r] or view.resident(r, b)) and b not in unseen
                if not real:
                    s = spec.get(b)
                    if s is None or q.t - s[0] > self.ttl:
                        break
                k += 1
            out[r] = k
        return out

    def speculate(self, r: int, blocks: np.ndarray, t: float) -> None:
        """``speculative_insert``: entries for ``blocks`` on ``r`` from ``t``, where ``r`` has
        no real one (entered when next read: :meth:`_materialize`)."""
        if self.speculative and len(blocks):
            self._pending = (r, blocks, t)

    def _materialize(self, view: FleetView) -> None:
        r, blocks, t = self._pending
        self._pending = None
        held = view.resident_mask(r, blocks).astype(bool)
        spec, unseen = self.spec[r], self.unseen[r]
        if unseen:
            held &= np.fromiter((b not in unseen for b in blocks.tolist()), dtype=bool,
                                count=len(blocks))
        for b in blocks[~held].tolist():
            spec[b] = (t, t + self.ttl)
            self._expiry.append((t + self.ttl, r, b))

    def size(self, view: FleetView) -> int:
        """Entries the index holds: every replica's resident blocks and its live speculations."""
        return view.resident_blocks() + sum(len(s) for s in self.spec)


class IndexedRouter(Router):
    """A router whose decisions read an :class:`EventIndex` (``self.index``)."""

    index: EventIndex

    def needs_clock(self) -> str | None:
        if self.index.speculative:
            return "its speculative entries expire after ttl seconds (speculative=false)"
        if self.index.lag > 0:
            return "its index sees stores lag seconds late (lag=0)"
        return None

    def stored(self, r: int, blocks, t: float, view: FleetView) -> None:
        self.index.stored(r, blocks, t, view)

    def wants_stores(self) -> bool:
        return self.index.busy()

    def index_size(self, view: FleetView) -> int:
        return self.index.size(view)
