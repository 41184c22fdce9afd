# cython: language_level=3
"""lecar: LRU and LFU experts, one chosen at random per eviction by weights learned from regret
(libCacheSim ``LeCaR``, libCacheSim/cache/eviction/LeCaR.c; Vietri et al., "Driving Cache
Replacement with ML-based LeCaR", HotStorage '18).

Every resident block is in both experts' orders: an LRU list (a hit moves it to the head, the
tail is LRU's candidate) and lfu's buckets (policies/frequency/lfu.pxd: a hit moves it from bucket f to
the back of bucket f+1, the front of the lowest bucket is LFU's candidate, ties by the time of
reaching the frequency).  Eviction: if both candidates are the same block it goes, with no draw
and no ghost (libCacheSim's ``evict_expert = -1``, which no later hit can learn from).
Otherwise one splitmix64 draw ``x`` (``seed``): ``(x % 100) / 100.0 < w_lru`` evicts LRU's
candidate, else LFU's, and the victim's id enters that expert's ghost FIFO with the access's
``vtime`` (each ghost holds ``C // 2`` ids, the oldest dropped first: libCacheSim's
``cache_size / 2`` bytes of unit objects).

An insert whose id is in a ghost takes it out and penalises the expert that evicted it, as
libCacheSim's ``update_weight``: with ``t = vtime - vtime at the eviction`` and
``dr = 0.005 ** (1 / C)``, ``w = w * exp(-learning-rate * dr ** t) + 1e-10``, then
``w = w / s`` and ``w_other = (w_other + 1e-10) / s`` for ``s = w + w_other + 2e-10`` (the
weights renormalise).  ``update-weight=0`` keeps the weights.  ``w_lfu`` starts at 0.5 whatever
``lru-weight`` is (libCacheSim's init); only ``w_lru`` is read by the draw.

NOTE: libCacheSim probes the ghosts in ``find``, before the eviction its ``get`` makes; here an
insert probes them after the request's evictions (the serve loop makes room first), so an
arriving id that one of them pushes out of a full ghost teaches nothing.  libCacheSim draws from
its own generator (``next_rand``), so the two agree in distribution, not draw for draw:
tests/sim/test_lecar.py compares hit ratios with the PyPI package's ``LeCaR``.  The pure-Python
reference (reference/lecar.py) makes the same draws and decisions.

Pins: honoured strictly.  LRU's candidate is the unpinned block nearest the tail, LFU's the
first unpinned block of the lowest bucket, then of the buckets above; with every block pinned,
the plain tail and lowest front (best effort).  A pinned block is never a candidate while an
unpinned one exists, so never the victim.

Memory: base 22 B/slot + LFU 12 (lfu.pxd: links 8, bucket 4) + LRU links 8 = 42 B/slot, plus
the two ghosts of ``C // 2`` ids with their eviction vtimes (policies/_shared/ghostval.pxd: about 23 B
per id, 13 for the id, 10 for its int64 vtime): about 65 B/slot with both ghosts full, plus 28 B
per distinct resident frequency.
"""

from libc.math cimport pow, exp, isfinite
from libc.stdint cimport int64_t, int32_t, uint64_t

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head, dl_unpinned_tail)
from shadow.sim.policies._shared.ghost cimport gr_ids
from shadow.sim.policies._shared.ghostval cimport GhostVals, gv_init, gv_free, gv_push, gv_take
from shadow.sim.policies.frequency.lfu cimport LFU
from shadow.sim.policies.cost_aware.random_compute cimport rng_next
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="LeCaR: LRU and LFU experts drawn by weights learned from ghost hits "
                "(libCacheSim LeCaR)",
    family="adaptive",
    defaults="update-weight=1,lru-weight=0.5,learning-rate=0.45,seed=1",
    strict_pins=True,
    weight=2.8,
)


cdef class LeCaR(LFU):
    """See the module docstring.  The LFU order is the base class's (lfu.pxd); ``lru`` the LRU
    list.  Invariant: the slots on ``lru`` are exactly the resident slots, each in one bucket."""

    cdef DList lru
    cdef GhostVals g_lru            # ids LRU evicted, with the eviction's vtime
    cdef GhostVals g_lfu            # ids LFU evicted, with the eviction's vtime
    cdef readonly double w_lru
    cdef readonly double w_lfu
    cdef double lr                  # learning-rate
    cdef double dr                  # 0.005 ** (1 / C)
    cdef bint update                # update-weight
    cdef uint64_t rng               # splitmix64 state

    def __cinit__(self, int64_t capacity, double lru_weight, double lr, bint update,
                  uint64_t seed, *args, **kwargs):
        dl_init(&self.lru, capacity)
        gv_init(&self.g_lru, capacity // 2, &self.nomem)
        gv_init(&self.g_lfu, capacity // 2, &self.nomem)
        self.w_lru = lru_weight
        self.w_lfu = 0.5
        self.lr = lr
        self.dr = pow(0.005, 1.0 / <double>capacity)
        self.update = update
        self.rng = seed

    def __dealloc__(self):
        dl_free(&self.lru)
        gv_free(&self.g_lru)
        gv_free(&self.g_lfu)

    cdef inline void _penalise(self, int64_t t, bint lru) noexcept nogil:
        """libCacheSim's ``update_weight`` for the expert (``lru`` or LFU) that evicted an id
        found in its ghost ``t`` gets after its eviction."""
        cdef double r, w, other, s
        if not self.update:
            return
        r = pow(self.dr, <double>t)
        w = self.w_lru if lru else self.w_lfu
        other = self.w_lfu if lru else self.w_lru
        w = w * exp(-self.lr * r) + 1e-10
        s = w + other + 2e-10
        w = w / s
        other = (other + 1e-10) / s
        if lru:
            self.w_lru, self.w_lfu = w, other
        else:
            self.w_lfu, self.w_lru = w, other

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        dl_move_head(&self.lru, slot)
        self._lfu_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t t, slot
        if gv_take(&self.g_lru, acc.block_id, &t):
            self._penalise(acc.vtime - t, True)
        elif gv_take(&self.g_lfu, acc.block_id, &t):
            self._penalise(acc.vtime - t, False)
        slot = self._take_slot(acc.block_id)
        dl_push_head(&self.lru, slot)
        self._lfu_insert(slot)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t a = dl_unpinned_tail(&self.lru, self.pins), b, s
        cdef int expert = 0
        cdef int64_t victim
        if a < 0:
            return 0
        b = self._lfu_victim(False)
        if a == b:
            s = a
        elif <double>(rng_next(&self.rng) % 100) / 100.0 < self.w_lru:
            s, expert = a, 1
        else:
            s, expert = b, 2
        dl_unlink(&self.lru, s)
        self._unlink(s)
        victim = self._drop_slot(s)
        if expert == 1:
            gv_push(&self.g_lru, victim, acc.vtime)
        elif expert == 2:
            gv_push(&self.g_lfu, victim, acc.vtime)
        return victim

    cdef void remove(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.lru, slot)
        self._unlink(slot)
        self._drop_slot(slot)

    def lru_order(self) -> list[int]:
        """Resident ids from the LRU head (most recent) to the tail (tests)."""
        cdef int32_t s = self.lru.head
        out = []
        while s >= 0:
            out.append(self.slot_id(s))
            s = self.lru.next[s]
        return out

    def ghosts(self) -> dict[str, list[int]]:
        """Ghost ids per expert, newest first (tests)."""
        return {"lru": gr_ids(&self.g_lru.g), "lfu": gr_ids(&self.g_lfu.g)}


def make(capacity: int, params: dict) -> LeCaR:
    update = int(params["update-weight"])
    if update not in (0, 1):
        raise ShadowError(f"policy lecar: update-weight must be 0 or 1, got {update}")
    w = float(params["lru-weight"])
    if not 0.0 <= w <= 1.0:
        raise ShadowError(f"policy lecar: lru-weight must be in [0, 1], got {w}")
    lr = float(params["learning-rate"])
    if not (isfinite(lr) and lr >= 0.0):
        raise ShadowError(f"policy lecar: learning-rate must be finite and >= 0, got {lr}")
    return LeCaR(capacity, w, lr, update == 1, check_seed("lecar", params))
