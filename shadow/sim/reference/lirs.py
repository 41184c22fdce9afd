"""Pure-Python LIRS (libCacheSim ``LIRS.c``, PrefixSim's eviction): the differential oracle for
policies/adaptive/lirs.pyx.

Sizes: ``H = max(1, int(hirs-ratio * C))`` resident HIR blocks, ``L = C - H`` LIR blocks.
Structures (every OrderedDict's first key is its bottom / oldest end):

* ``s``: the LIRS stack S of ids (LIR blocks, resident HIR blocks, non-resident HIR ids);
* ``q``: the list Q of resident HIR blocks (LRU order);
* ``nh``: the non-resident HIR ids of S, oldest first (libCacheSim's ``LRU_nh``);
* ``lir``: the LIR ids.  Resident = ``lir`` + ``q``; an id in S that is neither is non-resident.

Rules (L1..L8 are named in docs/policies/adaptive.md and the tests):

* L1 LIR hit: move to S's top, prune.
* L2 hit of a resident HIR in S: move to S's top, leave Q, demote while ``|lir| + 1 > L``,
  becomes LIR.
* L3 hit of a resident HIR not in S: move to Q's MRU end, demote while ``|lir| + 1 > L``,
  push on S's top (still HIR).
* L4 insert of a non-resident HIR id in S: move to S's top, demote while ``|lir| + 1 > L``,
  leave ``nh``, becomes LIR.
* L5 insert of a new id: S's top; LIR while ``|lir| + 1 <= L``, else HIR (also Q's MRU end).
* L6 demote (libCacheSim ``evictLIR``): prune, S's bottom LIR leaves S and goes to Q's MRU end as
  HIR, prune.  It never evicts: Q may hold more than H until the next evictions.
* L7 prune: while S has more than one entry and its bottom is not LIR, the bottom leaves S (a
  non-resident one leaves ``nh`` too; a resident one stays in Q).
* L8 stack limit (after each hit or insert): while ``|S| > 2C`` and ``nh`` is not empty, the
  oldest ``nh`` id leaves ``nh`` and S.
* evict (``evictHIR``): Q's first unpinned block from its LRU end leaves the cache; if it is in S
  it stays there as non-resident and joins ``nh``.  When Q has no unpinned block, LIR blocks are
  demoted (L6) until an unpinned one lands in Q, which is the victim; with every block pinned, Q's
  LRU block.

The "while" demotions stop when no LIR block is left (``C = 1``: ``L = 0``).
"""

from __future__ import annotations

from collections import OrderedDict

from shadow.errors import ShadowError

DEFAULTS = "hirs-ratio=0.01"
HONOURS_PINS = True


def limits(capacity: int, hirs_ratio: float) -> tuple[int, int]:
    """(LIR limit L, resident HIR limit H) of a cache of ``capacity`` blocks."""
    if not 0.0 < hirs_ratio < 1.0:
        raise ShadowError(f"policy lirs: hirs-ratio must be in (0, 1), got {hirs_ratio}")
    h = max(1, int(hirs_ratio * capacity))
    return capacity - h, h


class LIRS:
    def __init__(self, capacity: int, hirs_ratio: float = 0.01) -> None:
        self.capacity = capacity
        self.lir_limit, self.hir_limit = limits(capacity, hirs_ratio)
        self.s: OrderedDict[int, None] = OrderedDict()
        self.q: OrderedDict[int, None] = OrderedDict()
        self.nh: OrderedDict[int, None] = OrderedDict()
        self.lir: set[int] = set()

    def __len__(self) -> int:
        return len(self.lir) + len(self.q)

    def find(self, bid: int) -> bool:
        return bid in self.lir or bid in self.q

    def _top(self, bid: int) -> None:
        self.s[bid] = None
        self.s.move_to_end(bid)

    def _prune(self) -> None:
        while len(self.s) > 1:
            bottom = next(iter(self.s))
            if bottom in self.lir:
                return
            del self.s[bottom]
            self.nh.pop(bottom, None)

    def _demote(self) -> int:
        self._prune()
        bottom, _ = self.s.popitem(last=False)
        self.lir.discard(bottom)
        self.q[bottom] = None
        self._prune()
        return bottom

    def _make_lir_room(self) -> None:
        while len(self.lir) + 1 > self.lir_limit and self.lir:
            self._demote()

    def _limit_stack(self) -> None:
        while len(self.s) > 2 * self.capacity and self.nh:
            old, _ = self.nh.popitem(last=False)
            del self.s[old]

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.lir:                      # L1
            self._top(bid)
            self._prune()
        elif bid in self.s:                      # L2
            self._top(bid)
            del self.q[bid]
            self._make_lir_room()
            self.lir.add(bid)
        else:                                    # L3
            self.q.move_to_end(bid)
            self._make_lir_room()
            self._top(bid)
        self._limit_stack()

    def insert(self, bid: int, acc=None) -> None:
        if bid in self.s:                        # L4
            self._top(bid)
            self._make_lir_room()
            del self.nh[bid]
            self.lir.add(bid)
        else:                                    # L5
            self._top(bid)
            if len(self.lir) + 1 <= self.lir_limit:
                self.lir.add(bid)
            else:
                self.q[bid] = None
        self._limit_stack()

    def evict(self, acc=None, pinned=frozenset()) -> int:
        if not len(self):
            return 0
        victim = next((b for b in self.q if b not in pinned), None)
        while victim is None and self.lir:
            demoted = self._demote()
            if demoted not in pinned:
                victim = demoted
        if victim is None:
            victim = next(iter(self.q))
        del self.q[victim]
        if victim in self.s:
            self.nh[victim] = None
        return victim

    def remove(self, bid: int) -> bool:
        if bid in self.lir:
            self.lir.discard(bid)
            del self.s[bid]
            self._prune()
        elif bid in self.q:
            del self.q[bid]
            self.s.pop(bid, None)
        else:
            return False
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> LIRS:
    return LIRS(capacity, float((params or {}).get("hirs-ratio", 0.01)))
