"""Pure-Python CAR (Bansal & Modha, FAST'04; the PrefixSim fork's libCacheSim ``CAR.c``): the
differential oracle for policies/adaptive/car.pyx.

T1 and T2 are clocks of resident blocks, each with a reference bit; B1 and B2 hold the ids they
demoted (ghosts); ``p`` (a double) is T1's target size.  A clock appends at its tail and its hand
reads its head.  Parameter ``p``: the starting ``p`` (the fork's default 0; one above C is C).

* hit: the block's reference bit is set.
* insert: an id in B1 leaves it, ``p = min(p + max(1, |B2| // |B1|), C)`` (integer division, sizes
  before the removal, as the C code's int64 sizes), and the block enters T2's tail; an id in B2
  leaves it, ``p = max(p - max(1, |B1| // |B2|), 0)``, T2's tail; otherwise T1's tail.  The bit
  starts clear.
* evict: REPLACE, then if ``|T1| + |B1| >= C`` B1's oldest id is dropped, else if
  ``|T1| + |T2| + |B1| + |B2| >= 2C`` B2's oldest.  REPLACE loops: take T1 if
  ``|T1| >= max(1, p)`` (T2 if T1 is empty, T1 if T2 is); a head with its bit set has it cleared
  and moves to T2's tail (from T1 or T2); else the head is evicted and its id becomes B1's
  (from T1) or B2's (from T2) newest ghost.

Pins: a pinned head whose bit is clear moves to its own clock's tail (the hand passes it).  A
clock whose hand has passed over all of its blocks pinned, with nothing else happening to it
meanwhile (``rot >= len``), is exhausted for this eviction: the other clock is taken.  When both
are, every resident block is pinned and the chosen clock's head is evicted (best effort).
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.errors import ShadowError
from shadow.sim.params import parse_params

DEFAULTS = "p=0"
HONOURS_PINS = True


class CAR:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = ({**parse_params(None, DEFAULTS), **params} if isinstance(params, dict)
             else parse_params(params, DEFAULTS, where="policy car"))
        if int(p["p"]) < 0:
            raise ShadowError(f"policy car: p must be >= 0, got {p['p']}")
        self.capacity = capacity
        self.p = float(min(int(p["p"]), capacity))
        # NOTE: the first key of a clock is its head (the hand), of a ghost list its oldest id.
        self.t1: OrderedDict[int, None] = OrderedDict()
        self.t2: OrderedDict[int, None] = OrderedDict()
        self.b1: OrderedDict[int, None] = OrderedDict()
        self.b2: OrderedDict[int, None] = OrderedDict()
        self.ref: dict[int, bool] = {}

    def __len__(self) -> int:
        return len(self.t1) + len(self.t2)

    def find(self, bid: int) -> bool:
        return bid in self.t1 or bid in self.t2

    def hit(self, bid: int, acc=None) -> None:
        self.ref[bid] = True

    def insert(self, bid: int, acc=None) -> None:
        c = self.capacity
        if bid in self.b1:
            self.p = min(self.p + max(1, len(self.b2) // len(self.b1)), float(c))
            del self.b1[bid]
            self.t2[bid] = None
        elif bid in self.b2:
            self.p = max(self.p - max(1, len(self.b1) // len(self.b2)), 0.0)
            del self.b2[bid]
            self.t2[bid] = None
        else:
            self.t1[bid] = None
        self.ref[bid] = False

    def _replace(self, pinned) -> int:
        rot1 = rot2 = 0
        while True:
            n1, n2 = len(self.t1), len(self.t2)
            use1 = n1 >= max(1.0, self.p)
            if n1 == 0:
                use1 = False
            elif n2 == 0:
                use1 = True
            done1 = n1 == 0 or rot1 >= n1
            done2 = n2 == 0 or rot2 >= n2
            best_effort = done1 and done2
            if not best_effort and (done1 if use1 else done2):
                use1 = not use1
            clock = self.t1 if use1 else self.t2
            head = next(iter(clock))
            if self.ref[head]:
                self.ref[head] = False
                del clock[head]
                self.t2[head] = None
                if use1:
                    rot1 = 0
                rot2 = 0
            elif head in pinned and not best_effort:
                clock.move_to_end(head)
                if use1:
                    rot1 += 1
                else:
                    rot2 += 1
            else:
                del clock[head]
                del self.ref[head]
                (self.b1 if use1 else self.b2)[head] = None
                return head

    def evict(self, acc=None, pinned=frozenset()) -> int:
        if not len(self):
            raise RuntimeError("car: evict from an empty cache")
        victim = self._replace(pinned)
        c = self.capacity
        if len(self.t1) + len(self.b1) >= c:
            if self.b1:
                self.b1.popitem(last=False)
        elif len(self.t1) + len(self.t2) + len(self.b1) + len(self.b2) >= 2 * c and self.b2:
            self.b2.popitem(last=False)
        return victim

    def remove(self, bid: int) -> bool:
        if bid in self.t1:
            del self.t1[bid]
        elif bid in self.t2:
            del self.t2[bid]
        else:
            return False
        del self.ref[bid]
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> CAR:
    return CAR(capacity, params if params is not None else {})
