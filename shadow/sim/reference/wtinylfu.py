"""Pure-Python W-TinyLFU (libCacheSim ``WTinyLFU.c``): the differential oracle for policies/frequency/wtinylfu.pyx.

A window LRU of ``W = max(1, floor(C * window-size))`` blocks in front of a main SLRU of
``M = C - W`` blocks with two segments, probation ``M - floor(0.8 M)`` and protected
``floor(0.8 M)`` (libCacheSim's ``seg-size=1:4``), and a counting Bloom filter (libCacheSim's
``minimalIncrementCBF``: ``k`` counters per id, all incremented by an add, the estimate is their
minimum) of ``ceil(bpe * M)`` 32-bit counters, ``bpe = -ln(0.001) / ln(2)^2``,
``k = ceil(ln(2) * bpe)``; counter ``i`` of an id is ``(a + i*b) mod 2**32 mod n`` with
``a``, ``b`` the low 32 bits of XXH64 of the id's 8 little-endian bytes under seeds
``0x12345678`` and ``0x12344321``.

* insert: the window's head; the sketch adds the id.
* hit: in the window, to its head; in main, the SLRU hit (probation -> protected's head, the
  protected tail cools to probation's head; protected -> its head), the sketch adds the id and
  counts the hit; after ``32 M`` counted hits every counter is halved and the count restarts.
* evict: while the window has a candidate (its LRU end): if main has room the candidate moves to
  main (the SLRU's insert: the lowest segment with room) and the loop goes on; else it is compared
  with main's victim (probation's tail, else protected's): if the candidate's estimate is
  **strictly greater**, main's victim is evicted and the candidate moves to main, otherwise the
  candidate is evicted.  Every candidate taken is added to the sketch.  With no candidate in the
  window, main's victim is evicted.  A main of 0 blocks (``C = 1``) has no victim: the candidate
  is evicted.

Pins: the window's candidate is its first unpinned block from the LRU end, main's victim the first
unpinned block from probation's tail, then protected's; a window with only pinned blocks counts
as empty; main with only pinned blocks admits nothing (the candidate is evicted).  If every block
is pinned the plain candidate is evicted: the window's tail, else main's.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from shadow.errors import ShadowError
from shadow.sim.params import parse_params

DEFAULTS = "main-cache=SLRU,window-size=0.01"
HONOURS_PINS = True

_M64 = (1 << 64) - 1
_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
SEED0, SEED1 = 0x12345678, 0x12344321


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def xxh64_u64(v: int, seed: int) -> int:
    """XXH64 of the 8 little-endian bytes of ``v`` (the xxHash spec, input shorter than 32 B)."""
    h = (seed + _P5 + 8) & _M64
    k = (_rotl((v * _P2) & _M64, 31) * _P1) & _M64
    h ^= k
    h = (_rotl(h, 27) * _P1 + _P4) & _M64
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def sketch_shape(main_size: int) -> tuple[int, int]:
    """(counters, hashes) of libCacheSim's ``minimalIncrementCBF_init(main_size, 0.001)``."""
    bpe = -math.log(0.001) / 0.480453013918201
    hashes = int(math.ceil(0.693147180559945 * bpe))
    n = int(min(math.ceil(bpe * main_size), 2**31 - 1))
    return (max(n, 2 * hashes) if n < hashes else n), hashes


def window_size(capacity: int, ratio: float) -> int:
    """Window blocks: libCacheSim's ``(int64)(C * window-size)``, at least 1 (a 0-block window
    refuses every insert in libCacheSim, which a prefix cache cannot express)."""
    return max(1, int(capacity * ratio))


def check_params(p: dict) -> None:
    ws = float(p["window-size"])
    if not 0.0 < ws < 1.0:
        raise ShadowError(f"policy wtinylfu: window-size must be in (0, 1), got {ws}")
    if str(p["main-cache"]).lower() != "slru":
        raise ShadowError(f"policy wtinylfu: main-cache must be SLRU, got {p['main-cache']}")


class WTinyLFU:
    def __init__(self, capacity: int, params: str | dict | None = None) -> None:
        p = ({**parse_params(None, DEFAULTS), **params} if isinstance(params, dict)
             else parse_params(params, DEFAULTS, where="policy wtinylfu"))
        check_params(p)
        self.capacity = capacity
        self.wcap = min(window_size(capacity, float(p["window-size"])), capacity)
        self.mcap = capacity - self.wcap
        prot = int(0.8 * self.mcap)
        self.seg_sizes = [self.mcap - prot, prot]
        # NOTE: the first key of each OrderedDict is its LRU end.
        self.window: OrderedDict[int, None] = OrderedDict()
        self.segs: list[OrderedDict[int, None]] = [OrderedDict(), OrderedDict()]
        self.n_counters, self.n_hashes = sketch_shape(self.mcap)
        self.counters = [0] * self.n_counters
        self.max_hits = 32 * self.mcap
        self.main_hits = 0

    def __len__(self) -> int:
        return len(self.window) + len(self.segs[0]) + len(self.segs[1])

    def find(self, bid: int) -> bool:
        return bid in self.window or bid in self.segs[0] or bid in self.segs[1]

    # ---- the sketch ----

    def _cells(self, bid: int) -> list[int]:
        a = xxh64_u64(bid, SEED0) & 0xFFFFFFFF
        b = xxh64_u64(bid, SEED1) & 0xFFFFFFFF
        return [((a + i * b) & 0xFFFFFFFF) % self.n_counters for i in range(self.n_hashes)]

    def estimate(self, bid: int) -> int:
        return min(self.counters[x] for x in self._cells(bid))

    def _add(self, bid: int) -> None:
        for x in self._cells(bid):
            self.counters[x] += 1

    # ---- main (SLRU of two segments) ----

    def _main_len(self) -> int:
        return len(self.segs[0]) + len(self.segs[1])

    def _main_insert(self, bid: int) -> None:
        seg = 0 if len(self.segs[0]) < self.seg_sizes[0] else 1
        self.segs[seg][bid] = None

    def _main_victim(self, pinned) -> int | None:
        for seg in self.segs:
            for bid in seg:
                if bid not in pinned:
                    return bid
        return None

    def _main_remove(self, bid: int) -> None:
        if bid in self.segs[0]:
            del self.segs[0][bid]
        else:
            del self.segs[1][bid]

    # ---- policy interface ----

    def hit(self, bid: int, acc=None) -> None:
        if bid in self.window:
            self.window.move_to_end(bid)
            return
        if bid in self.segs[1]:
            self.segs[1].move_to_end(bid)
        else:
            del self.segs[0][bid]
            self.segs[1][bid] = None
            if len(self.segs[1]) > self.seg_sizes[1]:
                cooled, _ = self.segs[1].popitem(last=False)
                self.segs[0][cooled] = None
        self._add(bid)
        self.main_hits += 1
        if self.main_hits >= self.max_hits:
            self.main_hits = 0
            self.counters = [c >> 1 for c in self.counters]

    def insert(self, bid: int, acc=None) -> None:
        self.window[bid] = None
        self._add(bid)

    def evict(self, acc=None, pinned=frozenset()) -> int:
        while True:
            cand = next((b for b in self.window if b not in pinned), None)
            if cand is None:
                break
            if self._main_len() < self.mcap:
                del self.window[cand]
                self._main_insert(cand)
                self._add(cand)
                continue
            victim = self._main_victim(pinned)
            admit = victim is not None and self.estimate(cand) > self.estimate(victim)
            self._add(cand)
            if admit:
                self._main_remove(victim)
                del self.window[cand]
                self._main_insert(cand)
                return victim
            del self.window[cand]
            return cand
        victim = self._main_victim(pinned)
        if victim is not None:
            self._main_remove(victim)
            return victim
        if self.window:
            bid, _ = self.window.popitem(last=False)
            return bid
        victim = self._main_victim(frozenset())
        if victim is None:
            raise RuntimeError("wtinylfu: evict from an empty cache")
        self._main_remove(victim)
        return victim

    def remove(self, bid: int) -> bool:
        if bid in self.window:
            del self.window[bid]
        elif bid in self.segs[0] or bid in self.segs[1]:
            self._main_remove(bid)
        else:
            return False
        return True

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict | None = None) -> WTinyLFU:
    return WTinyLFU(capacity, params if params is not None else {})
