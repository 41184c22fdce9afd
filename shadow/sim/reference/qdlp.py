"""Pure-Python QDLP (libCacheSim ``QDLP.c``): the differential oracle for policies/adaptive/qdlp.pyx.

Sizes as libCacheSim truncates them: ``fifo = int(C * fifo-size-ratio)``, ``main = C - fifo``,
``ghost = int(C * ghost-size-ratio)`` (no ghost when 0).  Main is a CLOCK of ``main`` blocks
(``main-cache``: ``Clock`` 1-bit, ``Clock2`` 2-bit, ``Clock3`` 3-bit counters, ``FIFO`` none).

* hit: a FIFO block's count += 1 (saturating at 255); a main block's counter += 1 up to its max.
* insert: an id found in the ghost leaves it and is inserted into main (counter 0); a full main
  first evicts its own CLOCK victim (a *spilled* eviction, reported in ``spilled``).  Any other
  id goes to the FIFO's head with count 0 (the FIFO's size bounds nothing but main's).
* evict: while the FIFO is non-empty its oldest block is looked at: count >= threshold moves it
  to main (counter 0), after main evicts its CLOCK victim if main is full (that victim is the
  evicted block); a count below the threshold evicts it into the ghost.  An empty FIFO evicts
  main's CLOCK victim.  One ``evict`` removes exactly one block (libCacheSim's ``get`` loops
  over ``evict`` until one leaves; the PrefixSim fork's ``evict`` does it inside).
* CLOCK victim: from main's tail, a block with counter >= 1 loses one and moves to the head;
  the first block with 0 goes.
* ghost: FIFO of ids; pushing into a full ghost drops its oldest id.

Pins: a pinned block is never the victim while an unpinned one exists.  A pinned FIFO block is
promoted as it would be unpinned, else passed in place; CLOCK passes a pinned block with counter
0 in place.  A promotion into a full main with every main block pinned does not happen (the block
is passed in place); a ghost hit into such a main overfills it by one.  If the FIFO walk finds no
victim, main's CLOCK victim goes; if every main block is pinned too, the FIFO's oldest unpinned
block (one left unpromoted), and only if every block is pinned, the FIFO's oldest, else main's
CLOCK victim ignoring pins (best effort).
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULTS = "fifo-size-ratio=0.10,ghost-size-ratio=0.9,main-cache=Clock2,move-to-main-threshold=1"
HONOURS_PINS = True

MAIN_BITS = {"fifo": 0, "clock": 1, "clock2": 2, "clock3": 3}


class QDLP:
    def __init__(self, capacity: int, params: dict) -> None:
        self.fifo_size = int(capacity * float(params["fifo-size-ratio"]))
        self.main_size = capacity - self.fifo_size
        self.ghost_size = int(capacity * float(params["ghost-size-ratio"]))
        self.max_freq = (1 << MAIN_BITS[str(params["main-cache"]).lower()]) - 1
        self.threshold = int(params["move-to-main-threshold"])
        # NOTE: the first key is the oldest (FIFO) / the tail (main, ghost).
        self.fifo: OrderedDict[int, int] = OrderedDict()
        self.main: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, None] = OrderedDict()
        self.spilled: list[int] = []
        self.pinned: set[int] | frozenset[int] = frozenset()

    def __len__(self) -> int:
        return len(self.fifo) + len(self.main)

    def find(self, bid: int) -> bool:
        return bid in self.fifo or bid in self.main

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.fifo:
            self.fifo[bid] = min(self.fifo[bid] + 1, 255)
        else:
            self.main[bid] = min(self.main[bid] + 1, self.max_freq)

    def _clock_victim(self, pinned) -> int | None:
        skipped: set[int] = set()
        while True:
            bid = next((b for b in self.main if b not in skipped), None)
            if bid is None:
                return None
            if self.main[bid] >= 1:
                f = self.main.pop(bid)
                self.main[bid] = f - 1
            elif bid in pinned:
                skipped.add(bid)
            else:
                del self.main[bid]
                return bid

    def _ghost_add(self, bid: int) -> None:
        if self.ghost_size <= 0:
            return
        while len(self.ghost) >= self.ghost_size:
            self.ghost.popitem(last=False)
        self.ghost[bid] = None

    def insert(self, bid: int, acc=None) -> None:
        if bid in self.ghost:
            del self.ghost[bid]
            if len(self.main) >= self.main_size:
                victim = self._clock_victim(self.pinned)
                if victim is not None:
                    self.spilled.append(victim)
            self.main[bid] = 0
        else:
            self.fifo[bid] = 0

    def evict(self, acc=None, pinned=frozenset()) -> int:
        for bid in list(self.fifo):
            if self.fifo[bid] >= self.threshold:
                if len(self.main) >= self.main_size:
                    victim = self._clock_victim(pinned)
                    if victim is None:
                        continue
                    del self.fifo[bid]
                    self.main[bid] = 0
                    return victim
                del self.fifo[bid]
                self.main[bid] = 0
            elif bid not in pinned:
                return self._fifo_out(bid)
        return self._last_resort(pinned)

    def _main_victim(self, pinned) -> int | None:
        return self._clock_victim(pinned)

    def _fifo_out(self, bid: int) -> int:
        """Evict FIFO block ``bid`` into the ghost."""
        del self.fifo[bid]
        self._ghost_add(bid)
        return bid

    def _last_resort(self, pinned) -> int:
        """No FIFO block could go: main's victim; every main block pinned: the oldest unpinned
        FIFO block, else the oldest, else main's victim regardless of pins (best effort)."""
        victim = self._main_victim(pinned)
        if victim is not None:
            return victim
        victim = next((b for b in self.fifo if b not in pinned), None)
        if victim is None and self.fifo:
            victim = next(iter(self.fifo))
        if victim is not None:
            return self._fifo_out(victim)
        return self._main_victim(frozenset()) or 0

    def remove(self, bid: int) -> bool:
        return self.fifo.pop(bid, None) is not None or self.main.pop(bid, None) is not None

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> QDLP:
    return QDLP(capacity, params)
