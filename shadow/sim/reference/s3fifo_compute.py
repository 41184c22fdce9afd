"""Pure-Python s3fifo_compute (the PrefixSim fork's ``S3FIFOCompute.c``): the differential oracle
for policies/cost_aware/s3fifo_compute.pyx.

``small`` and ``main`` are FIFOs (OrderedDict id -> freq, the first key the oldest), ``ghost`` a
FIFO of ids with the freq they left with.  ``cost`` is the access's llround cost (1 if not
positive), ``thr`` the threshold; a test "passes" when ``freq / ratio >= thr`` (``ratio`` 0: yes).

* insert: a ghost id leaves the ghost, then goes to main (freq 1) if it passes with
  ``ratio = mean size of small / cost`` (1 / cost, 0 if small is empty), else to small with its
  ghost freq + 1.  Other ids: before the first eviction to main while main is below its size;
  otherwise to small; freq 1.
* hit: freq + 1.
* evict, until a block leaves: main if it is over its size or small is empty, else small; the
  queue's candidate is its oldest block that is unpinned or passes (a pinned block is promoted
  or reinserted as if unpinned, never let out); a queue with none: the other queue's; none at all:
  small's oldest, else main's, best effort.  ``ratio = 1 / cost``.  Small: passes -> main
  with freq 1, else out into the ghost.  Main: passes -> main's newest end with
  ``min(freq, 4) - 1``, else out.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=1"
HONOURS_PINS = True


class S3FIFOCompute:
    def __init__(self, capacity: int, params: dict) -> None:
        self.threshold = int(params["move-to-main-threshold"])
        self.small_size = max(1, int(capacity * float(params["small-size-ratio"])))
        self.main_size = capacity - self.small_size
        self.ghost_size = int(capacity * float(params["ghost-size-ratio"]))
        self.small: OrderedDict[int, int] = OrderedDict()
        self.main: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, int] = OrderedDict()
        self.has_evicted = False

    def __len__(self) -> int:
        return len(self.small) + len(self.main)

    def find(self, bid: int) -> bool:
        return bid in self.small or bid in self.main

    def _passes(self, freq: int, ratio: float) -> bool:
        return ratio == 0.0 or freq / ratio >= self.threshold

    @staticmethod
    def _cost(acc) -> float:
        return float(acc.cost) if acc.cost > 0 else 1.0

    def hit(self, bid: int, acc=None) -> None:
        q = self.small if bid in self.small else self.main
        q[bid] = min(q[bid] + 1, 255)

    def insert(self, bid: int, acc) -> None:
        ratio = (1.0 if self.small else 0.0) / self._cost(acc)
        if bid in self.ghost:
            g = self.ghost.pop(bid)
            if self._passes(g, ratio):
                self.main[bid] = 1
            else:
                self.small[bid] = min(g + 1, 255)
        elif not self.has_evicted and len(self.main) < self.main_size:
            self.main[bid] = 1
        else:
            self.small[bid] = 1

    def _ghost_add(self, bid: int, freq: int) -> None:
        if self.ghost_size < 1:
            return
        while len(self.ghost) >= self.ghost_size:
            self.ghost.popitem(last=False)
        self.ghost[bid] = freq

    def evict(self, acc, pinned=frozenset()) -> int:
        self.has_evicted = True
        ratio = 1.0 / self._cost(acc)
        while True:
            use_main = len(self.main) > self.main_size or not self.small
            order = [self.main, self.small] if use_main else [self.small, self.main]
            found = [(q, b) for q in order for b in q
                     if b not in pinned or self._passes(q[b], ratio)]
            if not found:
                break
            q, bid = found[0]
            freq = q.pop(bid)
            if q is self.small:
                if self._passes(freq, ratio):
                    self.main[bid] = 1
                    continue
                self._ghost_add(bid, freq)
                return bid
            if self._passes(freq, ratio):
                self.main[bid] = min(freq, 4) - 1
                continue
            return bid
        # best effort: every block is pinned
        if self.small:
            bid, freq = self.small.popitem(last=False)
            self._ghost_add(bid, freq)
        else:
            bid, _ = self.main.popitem(last=False)
        return bid

    def remove(self, bid: int) -> bool:
        for q in (self.small, self.main):
            if bid in q:
                del q[bid]
                return True
        return False

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> S3FIFOCompute:
    return S3FIFOCompute(capacity, params)
