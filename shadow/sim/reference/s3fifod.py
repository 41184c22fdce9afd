"""Pure-Python S3-FIFO-d (libCacheSim ``S3FIFOd.c``): the differential oracle for
policies/adaptive/s3fifod.pyx.

QDLP (reference/qdlp.py) whose FIFO size moves.  Sizes start as libCacheSim truncates them:
``fifo = int(C * fifo-size-ratio)``, ``main = C - fifo``, ghost ``main``; two eviction histories
(FIFOs of ids, ``C // 10`` each) remember the ids last evicted from the FIFO (``fhist``) and from
main (``mhist``); ``fhit``/``mhit`` count gets that found their id there (which then leaves it).

* each get (``hit``/``insert``) first adapts: with ``fhit + mhit > 100`` and ``mhist`` non-empty,
  ``step = max(1, min(fifo, main) // 1000)``; ``fhit > 2 mhit`` and ``main > C // 100`` move
  ``step`` from main to the FIFO (and the ghost), ``mhit > 2 fhit`` and ``fifo > C // 100`` the
  other way; both counts then become ``int(0.8 x)``.  An empty ``mhist`` zeroes both counts.
* hit: a FIFO block's count += 1 (saturating at 255); a main block's counter += 1 up to its max,
  then the history checks below.
* insert: the ghost and history checks (an id in ``fhist`` leaves it, ``fhit += 1``; in
  ``mhist``: ``mhit += 1``); an id found in the ghost leaves it and enters main (counter 0) after
  main spills CLOCK victims while it holds ``main`` or more (``spilled``; not remembered in
  ``mhist``, as libCacheSim's ``main->get``); any other id enters the FIFO.
* evict: main over its size (after the FIFO grew) gives its CLOCK victim first.  Else the FIFO
  is walked from its oldest block: count >= threshold moves it to main's head (counter 0), and if
  main is then over its size its CLOCK victim (possibly that block) is the evicted block; a lower
  count evicts it into the ghost and ``fhist``.  An empty FIFO evicts main's CLOCK victim.  Main
  victims go into ``mhist``.  One call, one victim.
* CLOCK victim: from main's tail, a counter >= 1 loses one and the block goes round; the first 0
  leaves.

Pins: as reference/qdlp.py, except that a promotion always happens (libCacheSim inserts before it
evicts from main): with every main block pinned, main stays over its size.
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference.qdlp import QDLP

DEFAULTS = "fifo-size-ratio=0.10,main-cache=Clock2,move-to-main-threshold=1"
HONOURS_PINS = True


def _push(q: OrderedDict, limit: int, bid: int) -> None:
    """libCacheSim FIFO ``get`` of an id on a FIFO of ids."""
    if bid in q or limit < 1:
        return
    while len(q) >= limit:
        q.popitem(last=False)
    q[bid] = None


class S3FIFOd(QDLP):
    def __init__(self, capacity: int, params: dict) -> None:
        super().__init__(capacity, {**params, "ghost-size-ratio": 0})
        self.capacity = capacity
        self.ghost_size = self.main_size
        self.hist_size = capacity // 10
        # NOTE: the first key is the oldest.
        self.fhist: OrderedDict[int, None] = OrderedDict()
        self.mhist: OrderedDict[int, None] = OrderedDict()
        self.fhit = self.mhit = 0

    def _adapt(self) -> None:
        busy = self.fhit + self.mhit > 100
        if not self.mhist:
            self.fhit = self.mhit = 0
            return
        if busy:
            step = max(1, min(self.fifo_size, self.main_size) // 1000)
            if self.fhit > 2 * self.mhit:
                if self.main_size > self.capacity // 100:
                    self.fifo_size += step
                    self.ghost_size += step
                    self.main_size -= step
            elif self.mhit > 2 * self.fhit:
                if self.fifo_size > self.capacity // 100:
                    self.fifo_size -= step
                    self.ghost_size -= step
                    self.main_size += step
            self.fhit = int(self.fhit * 0.8)
            self.mhit = int(self.mhit * 0.8)

    def _histories(self, bid: int) -> None:
        if self.fhist.pop(bid, 0) is None:
            self.fhit += 1
        if self.mhist.pop(bid, 0) is None:
            self.mhit += 1

    def hit(self, bid: int, acc=None) -> None:
        self._adapt()
        super().hit(bid, acc)
        if bid in self.main:
            self._histories(bid)

    def _main_victim(self, pinned) -> int | None:
        victim = self._clock_victim(pinned)
        if victim is not None:
            _push(self.mhist, self.hist_size, victim)
        return victim

    def _fifo_out(self, bid: int) -> int:
        del self.fifo[bid]
        _push(self.ghost, self.ghost_size, bid)
        _push(self.fhist, self.hist_size, bid)
        return bid

    def insert(self, bid: int, acc=None) -> None:
        self._adapt()
        ghost_hit = self.ghost.pop(bid, 0) is None
        self._histories(bid)
        if ghost_hit:
            while self.main and len(self.main) >= self.main_size:
                victim = self._clock_victim(self.pinned)
                if victim is None:
                    break
                self.spilled.append(victim)
            self.main[bid] = 0
        else:
            self.fifo[bid] = 0

    def evict(self, acc=None, pinned=frozenset()) -> int:
        if len(self.main) > self.main_size:
            victim = self._main_victim(pinned)
            if victim is not None:
                return victim
        for bid in list(self.fifo):
            if self.fifo[bid] >= self.threshold:
                del self.fifo[bid]
                self.main[bid] = 0
                if len(self.main) > self.main_size:
                    victim = self._main_victim(pinned)
                    if victim is not None:
                        return victim
            elif bid not in pinned:
                return self._fifo_out(bid)
        return self._last_resort(pinned)


def make(capacity: int, params: dict) -> S3FIFOd:
    return S3FIFOd(capacity, params)
