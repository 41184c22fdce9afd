"""random_compute_small_queue reference: same decisions as ``policies/cost_aware/random_compute_small_queue.pyx``.

A small FIFO (OrderedDict, first key = oldest) in front of random_compute's sampled main, and a
ghost FIFO of ids evicted from the small FIFO (OrderedDict, first key = oldest): an id found there
on insert goes straight to main.
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference.random_compute import RandomCompute

DEFAULTS = ("n-sample=128,evict-batch=8,small-size-ratio=0.10,ghost-size-ratio=0.90,"
            "timestamp=request,seed=1")
HONOURS_PINS = True


class RandomComputeSmallQueue(RandomCompute):
    def __init__(self, capacity: int, n_sample: int = 128, evict_batch: int = 8, seed: int = 1,
                 per_request: bool = True, small_ratio: float = 0.1, ghost_ratio: float = 0.9) -> None:
        super().__init__(capacity, n_sample, evict_batch, seed, per_request)
        self.small: OrderedDict[int, None] = OrderedDict()
        self.small_target = int(capacity * small_ratio)
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.ghost_size = int(capacity * ghost_ratio)

    def hit(self, b: int, acc) -> None:
        self._touch(b, acc)
        if b in self.small:
            del self.small[b]
            self.dense.add(b)

    def insert(self, b: int, acc) -> None:
        self._init(b, acc)
        if b in self.ghost:
            del self.ghost[b]
            self.dense.add(b)
        else:
            self.small[b] = None

    def _ghost_add(self, b: int) -> None:
        if self.ghost_size <= 0:
            return
        while len(self.ghost) >= self.ghost_size:
            self.ghost.popitem(last=False)
        self.ghost[b] = None

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            want = n - len(out)
            from_small = len(self.small) > self.small_target or self.dense.n == 0
            if not from_small:
                # main gives at most its unpinned blocks; none: small gives the victim
                unpinned_main = sum(1 for i in range(self.dense.n)
                                    if self.dense.items[i] not in pinned)
                if unpinned_main == 0:
                    from_small = True
                else:
                    want = min(want, unpinned_main)
            if from_small:
                victim = next((b for b in self.small if b not in pinned), None)
                if victim is None and self.dense.n == 0 and self.small:
                    victim = next(iter(self.small))      # everything pinned: best effort
                if victim is not None:
                    del self.small[victim]
                    self._forget(victim)
                    self._ghost_add(victim)
                    out.append(victim)
                    continue
            got = self.sample_evict(acc, want, pinned)
            if not got:
                break
            out.extend(got)
        return out

    def remove(self, b: int) -> None:
        if b in self.small:
            del self.small[b]
            self._forget(b)
        else:
            super().remove(b)


def make(capacity: int, params: dict) -> RandomComputeSmallQueue:
    return RandomComputeSmallQueue(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                                   int(params["seed"]), params["timestamp"] == "request",
                                   float(params["small-size-ratio"]),
                                   float(params["ghost-size-ratio"]))
