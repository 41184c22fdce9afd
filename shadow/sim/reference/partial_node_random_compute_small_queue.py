"""partial_node_random_compute_small_queue reference: same decisions as
``policies/partial_node/partial_node_random_compute_small_queue.pyx``.

The main set is the partial_node_random_compute reference (subclassed; same draws).  In front:
``small``, a FIFO (OrderedDict id -> freq, the first key the oldest) of resident blocks in no node,
and ``ghost``, a FIFO of ids dropped from it.

* insert: a ghost id leaves the ghost and goes to main; before the first eviction every id goes to
  main once small is full; otherwise small, freq 0.  hit: a small block's freq + 1 (at most 255).
* evict_n: while small is not empty and main holds at most ``C - small size``: walk small from its
  oldest; freq >= threshold: promoted (a node of its own stamped ``acc.vtime``); else, unless
  pinned (then passed over), dropped into the ghost, one per round; a walk that drops nothing ends
  this phase.  Then main as partial_node_random_compute.  Then small again, its oldest leaving when
  nothing else can (best effort).
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference.partial_node_random_compute import PartialNodeRandomCompute

DEFAULTS = ("n-sample=128,eviction-mode=micro,micro-batch=64,seed=1,"
            "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2")
HONOURS_PINS = True


class PartialNodeRandomComputeSmallQueue(PartialNodeRandomCompute):
    def __init__(self, capacity: int, n_sample: int, drain: bool, micro_batch: int, seed: int,
                 small_ratio: float, ghost_ratio: float, threshold: int) -> None:
        super().__init__(capacity, n_sample, drain, micro_batch, seed)
        self.small_size = max(1, int(capacity * small_ratio))
        self.ghost_size = int(capacity * ghost_ratio)
        self.threshold = threshold
        self.small: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.has_evicted = False

    def __len__(self) -> int:
        return len(self.node_of) + len(self.small)

    def find(self, b: int) -> bool:
        return b in self.node_of or b in self.small

    def hit(self, b: int, acc) -> None:
        if b in self.small:
            self.small[b] = min(self.small[b] + 1, 255)
            self.cost[b] = acc.cost
        else:
            super().hit(b, acc)

    def insert(self, b: int, acc) -> None:
        ghost_hit = self.ghost.pop(b, False) is None
        if ghost_hit or (not self.has_evicted and len(self.small) >= self.small_size):
            super().insert(b, acc)
            return
        self.small[b] = 0
        self.pos[b] = acc.position
        self.cost[b] = acc.cost

    def _ghost_add(self, b: int) -> None:
        if self.ghost_size < 1:
            return
        while len(self.ghost) >= self.ghost_size:
            self.ghost.popitem(last=False)
        self.ghost[b] = None

    def _evict_small(self, now: int, pinned) -> int | None:
        for b in list(self.small):
            if self.small[b] >= self.threshold:
                del self.small[b]
                self.node_of[b] = self._new_node([b], now)
            elif b not in pinned:
                del self.small[b]
                del self.pos[b], self.cost[b]
                self._ghost_add(b)
                return b
        return None

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        self.has_evicted = True
        out: list[int] = []
        while (len(out) < n and self.small
               and len(self.node_of) <= self.capacity - self.small_size):
            b = self._evict_small(acc.vtime, pinned)
            if b is None:
                break
            out.append(b)
        if len(out) < n:
            out += super().evict_n(acc, n - len(out), pinned)
        while len(out) < n and self.small:
            b = self._evict_small(acc.vtime, pinned)
            if b is None:
                b, _ = self.small.popitem(last=False)     # best effort
                del self.pos[b], self.cost[b]
                self._ghost_add(b)
            out.append(b)
        return out

    def remove(self, b: int) -> None:
        if b in self.small:
            del self.small[b], self.pos[b], self.cost[b]
        else:
            super().remove(b)


def make(capacity: int, params: dict) -> PartialNodeRandomComputeSmallQueue:
    return PartialNodeRandomComputeSmallQueue(
        capacity, int(params["n-sample"]), params["eviction-mode"] == "drain",
        int(params["micro-batch"]), int(params["seed"]), float(params["small-size-ratio"]),
        float(params["ghost-size-ratio"]), int(params["move-to-main-threshold"]))
