"""Pure-Python 2Q (libCacheSim 0.3.5 ``TwoQ.c``): the differential oracle for policies/adaptive/twoq.pyx.

Ain is a FIFO, Aout a FIFO of ghost ids, Am an LRU.  Sizes: ``Ain = int(C * Ain-size-ratio)``,
``Aout = int(C * Aout-size-ratio)``, ``Am = C - Ain``.

* hit: in Ain nothing happens; in Am the block moves to Am's head.
* insert: an id found in Aout leaves it and goes to Am's head (libCacheSim calls ``Am->get``, so a
  full Am first evicts its own LRU tail: a *spilled* eviction outside ``evict``); else Ain's head.
* evict: from Am's tail when Am is not empty and Ain holds at most its size; otherwise Ain's tail
  is evicted and its id enters Aout (a full Aout drops its oldest id).

Pins: the chosen queue's first unpinned block from the tail is the victim; if there is none the
other queue is tried, then the plain candidate is taken (best effort).  A spilled Am eviction
skips pinned blocks the same way (within Am only).
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.params import parse_params

DEFAULTS = "Ain-size-ratio=0.25,Aout-size-ratio=0.5"
HONOURS_PINS = True


def _first_unpinned(queue, pinned):
    for bid in queue:
        if bid not in pinned:
            return bid
    return None


class TwoQ:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = {**parse_params(None, DEFAULTS), **params} if isinstance(params, dict) else parse_params(params, DEFAULTS, where="policy twoq")
        self.capacity = capacity
        self.ain_size = int(capacity * float(p["Ain-size-ratio"]))
        self.aout_size = int(capacity * float(p["Aout-size-ratio"]))
        self.am_size = capacity - self.ain_size
        # NOTE: the first key of each OrderedDict is its tail (next victim).
        self.ain: OrderedDict[int, None] = OrderedDict()
        self.aout: OrderedDict[int, None] = OrderedDict()
        self.am: OrderedDict[int, None] = OrderedDict()
        self.spilled: list[int] = []
        self.pinned: set[int] | frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self.ain) + len(self.am)

    def find(self, bid: int) -> bool:
        return bid in self.ain or bid in self.am

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.am:
            self.am.move_to_end(bid)

    def insert(self, bid: int, acc=None) -> None:
        if bid in self.aout:
            del self.aout[bid]
            while len(self.am) + 1 > self.am_size:
                victim = _first_unpinned(self.am, self.pinned)
                if victim is None:
                    victim = next(iter(self.am))
                del self.am[victim]
                self.spilled.append(victim)
            self.am[bid] = None
        else:
            self.ain[bid] = None

    def _from_am(self, pinned) -> int | None:
        victim = _first_unpinned(self.am, pinned)
        if victim is not None:
            del self.am[victim]
        return victim

    def _from_ain(self, pinned) -> int | None:
        victim = _first_unpinned(self.ain, pinned)
        if victim is not None:
            del self.ain[victim]
            self._aout_add(victim)
        return victim

    def _aout_add(self, bid: int) -> None:
        if self.aout_size < 1:
            return
        while len(self.aout) >= self.aout_size:
            self.aout.popitem(last=False)
        self.aout[bid] = None

    def evict(self, acc=None, pinned=frozenset()) -> int:
        if self.am and len(self.ain) <= self.ain_size:
            victim = self._from_am(pinned)
            if victim is None:
                victim = self._from_ain(pinned)
            if victim is None:
                victim, _ = self.am.popitem(last=False)
        else:
            victim = self._from_ain(pinned)
            if victim is None:
                victim = self._from_am(pinned)
            if victim is None:
                victim, _ = self.ain.popitem(last=False)
                self._aout_add(victim)
        return victim

    def remove(self, bid: int) -> bool:
        if bid in self.ain:
            del self.ain[bid]
        elif bid in self.am:
            del self.am[bid]
        else:
            return False
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> TwoQ:
    return TwoQ(capacity, params if params is not None else {})
