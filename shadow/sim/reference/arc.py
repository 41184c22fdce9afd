"""Pure-Python ARC (libCacheSim 0.3.5 ``ARC.c``): the differential oracle for policies/adaptive/arc.pyx.

T1/T2 hold resident blocks (LRU lists), B1/B2 their ghost ids; ``p`` (a double) is T1's target.

* hit: a block in T1 or T2 moves to T2's head.
* insert: an id in B1 leaves it, ``p = min(p + max(|B2|/|B1|, 1), C)`` (sizes before removal), and
  goes to T2's head; an id in B2 leaves it, ``p = max(p - max(|B1|/|B2|, 1), 0)``, T2's head;
  otherwise T1's head.
* evict (libCacheSim's case IV, "miss on all queues"; the serve loop makes room before the access
  phase, so REPLACE-on-ghost-hit never runs inside ``evict``):
  if ``|T1| + |B1| + 1 > C``: with B1 non-empty drop B1's tail then REPLACE, else evict T1's tail
  without a ghost; otherwise drop B2's tail if ``|T1|+|B1|+|T2|+|B2| >= 2C`` and B2 is non-empty,
  then REPLACE.  REPLACE: if ``(|T1| > 0 and |T1| > p) or |T2| == 0`` T1's tail moves to B1's head,
  else T2's tail moves to B2's head.

Pins: the chosen list's first unpinned block from the tail is the victim (it still becomes a
ghost of that list); if the list has none, the other list is tried, then the plain tail is taken.
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.params import parse_params

DEFAULTS = ""
HONOURS_PINS = True


def _first_unpinned(queue, pinned):
    for bid in queue:
        if bid not in pinned:
            return bid
    return None


class ARC:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        if not isinstance(params, dict):
            parse_params(params, DEFAULTS, where="policy arc")
        self.capacity = capacity
        self.p = 0.0
        # NOTE: the first key of each OrderedDict is its tail (LRU end).
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def find(self, bid: int) -> bool:
        return bid in self.t1 or bid in self.t2

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.t1:
            del self.t1[bid]
            self.t2[bid] = None
        else:
            self.t2.move_to_end(bid)

    def insert(self, bid: int, acc=None) -> None:
        if bid in self.b1:
            delta = max(len(self.b2) / len(self.b1), 1.0)
            self.p = min(self.p + delta, float(self.capacity))
            del self.b1[bid]
            self.t2[bid] = None
        elif bid in self.b2:
            delta = max(len(self.b1) / len(self.b2), 1.0)
            self.p = max(self.p - delta, 0.0)
            del self.b2[bid]
            self.t2[bid] = None
        else:
            self.t1[bid] = None

    def _replace(self, pinned) -> int:
        n1, n2 = len(self.t1), len(self.t2)
        first, second = (1, 2) if ((n1 > 0 and n1 > self.p) or n2 == 0) else (2, 1)
        for which in (first, second):
            lst = self.t1 if which == 1 else self.t2
            victim = _first_unpinned(lst, pinned)
            if victim is not None:
                break
        else:
            which = first
            lst = self.t1 if which == 1 else self.t2
            victim = next(iter(lst))
        del lst[victim]
        (self.b1 if which == 1 else self.b2)[victim] = None
        return victim

    def evict(self, acc=None, pinned=frozenset()) -> int:
        c = self.capacity
        if len(self.t1) + len(self.b1) + 1 > c:
            if self.b1:
                self.b1.popitem(last=False)
                return self._replace(pinned)
            victim = _first_unpinned(self.t1, pinned)
            if victim is None:
                return self._replace(pinned)
            del self.t1[victim]
            return victim
        if len(self.t1) + len(self.b1) + len(self.t2) + len(self.b2) >= 2 * c and self.b2:
            self.b2.popitem(last=False)
        return self._replace(pinned)

    def remove(self, bid: int) -> bool:
        if bid in self.t1:
            del self.t1[bid]
        elif bid in self.t2:
            del self.t2[bid]
        else:
            return False
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> ARC:
    return ARC(capacity, params if params is not None else {})
