# cython: language_level=3, cdivision=True
"""cacheus: SR-LRU and CR-LFU experts, one chosen at random per eviction by weights learned
from their ghosts, with a learning rate that adapts (libCacheSim ``Cacheus``,
libCacheSim/cache/eviction/Cacheus.c with SR_LRU.c and CR_LFU.c; Rodriguez et al., "Learning
Cache Replacement with CACHEUS", FAST '21).

SR-LRU (scan-resistant LRU): two LRU lists, SR and R, sized ``C // 2`` each at the start, and a
history H of the ids the cache evicted (a FIFO of ``C - 1`` ids, each with its CR-LFU frequency
and two marks).
* an insert whose id is not in H enters SR's head marked *new*;
* a hit in R moves the block to R's head; a hit in SR moves it to R's head; while R is over its
  size its tail is *demoted* to SR's head (marked demoted and counted in ``c_demoted`` the first
  time);
* an insert whose id is in H leaves H and enters R's head (demoting as above) with H's demoted
  mark; if H marked it new (it left new), SR was too small: SR grows by
  ``max(1, c_demoted / c_new + 0.5)`` (C division, the sum truncated), to at most the residents
  - 1, and R gets ``C - SR``;
* a block that leaves enters H: new marks count in ``c_new``, demoted ones leave ``c_demoted``;
* its candidate is SR's tail (R's tail when SR is empty).
CR-LFU: lfu's buckets (policies/frequency/lfu.pxd: a hit moves the block to the back of bucket f+1); an
insert enters with frequency 1, or ``f + 1`` if its id is in H with ``f``; its candidate is the
*back* of the lowest bucket (the newest arrival at the lowest frequency: CR_LFU.c's
``last_obj``).

Eviction: while SR holds more than its size, SR's tail goes first, into H only (libCacheSim
evicts it inside the insert that overfills SR: see NOTE).  Otherwise one splitmix64 draw ``x``
(``seed``, libCacheSim's ``Cacheus_to_evict``): if both candidates are the same block it goes;
else ``(x % 100) / 100.0 < w_lru`` takes SR-LRU's candidate and puts its id in LRU's ghost,
otherwise CR-LFU's and LFU's ghost (FIFOs of ``C // 2`` ids).  Every victim enters H with its
frequency.  An insert (a miss) first multiplies the weight of the expert whose ghost holds the
id by ``exp(-lr)``, then renormalises (``w_lru = w_lru / (w_lru + w_lfu)``, ``w_lfu = 1 -
w_lru``, at every miss) and takes the id out of both ghosts.  Weights start at 0.5.

Learning rate: ``lr = 0.001 + (x % 1000) / 1000.0`` from the first draw.  Every get whose vtime
is a multiple of C (after it): ``h = hits since the last update // C`` (libCacheSim divides
integers: 0 unless every get hit); with ``dlr = lr - lr_prev != 0``, ``lr += sign * |lr * dlr|``
(sign +1 iff ``(h - h_prev) / dlr > 0``), taken only above 0.001, else ``lr = 0.0001``; with
``dlr == 0``, a rate that is 0 or not up counts one more unlearning step, and a rise after 10
or more of them redraws ``lr`` as at the start.

NOTE: SR_LRU.c also shrinks SR when a demoted block is hit in SR, and both resizes read the
marks of the object just made in R.  In libCacheSim's source (1a1a11a/libCacheSim, 2024) a fresh
object has no marks, so neither runs; the PyPI libcachesim 0.3.5 grows SR (its R object carries
H's marks: it reuses the memory of H's entry, freed just before) but shrinks it only when the
memory it reuses on an SR hit happens to hold a demoted mark: with the experts' choices made
equal, the pure-Python reference with libCacheSim's spill timing keeps libcachesim's resident
set after every one of 1000 gets in a fresh process (over 200 learned evictions, SR grown past
C // 2: tests/sim/test_cacheus.py) without the shrink, only up to the first shrink with it, and
to get 542 after other caches ran in the process.  So here: growth, no shrink.

libCacheSim evicts SR's tail inside the insert that overfills SR, while the
cache has room, so its cache holds at most ``SR + R`` blocks (``2 * (C // 2)`` at the start),
fewer until R fills; the serve loop allows no eviction outside ``evict`` (an insert could take
the request's own blocks), so here SR keeps what R does not use and gives its tails first when
room is needed: the cache fills all C slots.  Below 2 blocks (sizes 0) libCacheSim admits
nothing; here a block enters SR.  The ghosts and H are probed at the insert, after the request's
evictions (libCacheSim probes the ghosts in ``find``).  A zero divisor in the growth step
(never seen) gives the step 1.

Pins: honoured strictly.  The SR spill takes SR's unpinned block nearest its tail (none: no
spill); SR-LRU's candidate is the unpinned block nearest SR's tail, else R's; CR-LFU's the
unpinned block nearest the lowest bucket's back, then the buckets above; every block pinned:
the plain candidates (best effort).

Memory: base 22 B/slot + CR-LFU 12 (lfu.pxd) + SR/R links 8 + flags 1 = 43 B/slot; H
(``C - 1`` ids with an int64 value, frequency * 4 + marks, policies/_shared/ghostval.pxd: about 23 B per
id) and the two ghosts (``C // 2`` ids each, about 13 B per id): about 79 B/slot with all full,
plus 28 B per distinct resident frequency.
"""

from libc.math cimport exp, fabs
from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t, uint64_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.policy cimport Access
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head)
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove,
                                         gr_push_bounded, gr_ids)
from shadow.sim.policies._shared.ghostval cimport GhostVals, gv_init, gv_free, gv_push, gv_take
from shadow.sim.policies.frequency.lfu cimport LFU
from shadow.sim.policies.cost_aware.random_compute cimport rng_next
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="CACHEUS: scan-resistant LRU and churn-resistant LFU experts drawn by learned "
                "weights, adaptive learning rate (libCacheSim Cacheus)",
    family="adaptive",
    defaults="seed=1",
    strict_pins=True,
    weight=4.0,
)


cdef inline int32_t _unpinned_from_tail(const DList* d, const uint16_t* pins) noexcept nogil:
    """The slot nearest ``d``'s tail with no pin, -1 if none."""
    cdef int32_t s = d.tail
    while s >= 0 and pins[s] > 0:
        s = d.prev[s]
    return s


cdef enum:
    F_IN_R = 1          # on R (else on SR)
    F_NEW = 2           # entered as a new block (not from H); kept when it moves to R
    F_DEMOTED = 4       # demoted from R to SR (counted in c_demoted)
    H_NEW = 1           # H's value: frequency * 4 + these two marks
    H_DEMOTED = 2


cdef inline int64_t _cdiv(int64_t a, int64_t b) noexcept nogil:
    """C's truncated division (libCacheSim's ``C_demoted / C_new``); 0 for ``b == 0``."""
    return a / b if b != 0 else 0


cdef class Cacheus(LFU):
    """See the module docstring.  CR-LFU's order is the base class's (lfu.pxd); ``sr`` and ``r``
    share one pair of link arrays.  Invariant: every resident slot is on exactly one of SR and R
    (``flags & F_IN_R``) and in one bucket; no resident id is in H or a ghost (an id may be in
    H and a ghost at once); ``sr_size + r_size`` is C once SR has grown (``2 * (C // 2)``
    before)."""

    cdef DList sr
    cdef DList r
    cdef uint8_t* flags
    cdef int64_t half                  # C // 2: each ghost's size, SR's and R's at the start
    cdef readonly int64_t sr_size
    cdef readonly int64_t r_size
    cdef int64_t c_new                 # blocks evicted while new (never decreases)
    cdef int64_t c_demoted             # demoted blocks still resident (and as SR_LRU.c counts)
    cdef GhostVals hist                # H: evicted ids, frequency * 4 + H_NEW + H_DEMOTED
    cdef GhostRing g_lru
    cdef GhostRing g_lfu
    cdef readonly double w_lru
    cdef readonly double w_lfu
    cdef readonly double lr
    cdef double lr_prev
    cdef double hit_rate_prev
    cdef readonly int64_t unlearn
    cdef int64_t num_hit
    cdef uint64_t rng                  # splitmix64 state

    def __cinit__(self, int64_t capacity, uint64_t seed, *args, **kwargs):
        dl_init(&self.sr, capacity)
        self.r = self.sr
        self.flags = <uint8_t*>calloc(max(capacity, 1), sizeof(uint8_t))
        if self.flags == NULL:
            raise MemoryError(f"cannot allocate a Cacheus cache of {capacity} slots")
        self.half = capacity // 2
        self.sr_size = self.half
        self.r_size = self.half
        gv_init(&self.hist, capacity - 1, &self.nomem)
        gr_init(&self.g_lru, self.half, &self.nomem)
        gr_init(&self.g_lfu, self.half, &self.nomem)
        self.w_lru = 0.5
        self.w_lfu = 0.5
        self.rng = seed
        self.lr = 0.001 + <double>(rng_next(&self.rng) % 1000) / 1000.0

    def __dealloc__(self):
        dl_free(&self.sr)      # NOTE: r shares sr's arrays
        free(self.flags)
        gv_free(&self.hist)
        gr_free(&self.g_lru)
        gr_free(&self.g_lfu)

    # ---- SR-LRU ----

    cdef inline void _to_r(self, int64_t slot) noexcept nogil:
        """Put ``slot`` (on no list) at R's head, then demote R's tails to SR's head while R is
        over its size (each newly demoted block counted in ``c_demoted``)."""
        cdef int32_t t
        dl_push_head(&self.r, slot)
        self.flags[slot] |= F_IN_R
        while self.r.n > self.r_size:
            t = self.r.tail
            dl_unlink(&self.r, t)
            self.flags[t] &= ~F_IN_R
            dl_push_head(&self.sr, t)
            if not self.flags[t] & F_DEMOTED:
                self.c_demoted += 1
                self.flags[t] |= F_DEMOTED

    cdef inline void _grow_sr(self) noexcept nogil:
        """A block that was evicted while new came back from H: SR grows by
        ``max(1, c_demoted / c_new + 0.5)`` (truncated), to at most the residents - 1."""
        cdef int64_t q = _cdiv(self.c_demoted, self.c_new), top = self.n_resident - 1
        cdef double delta = 1.0 if 1.0 > <double>q + 0.5 else <double>q + 0.5
        if <double>self.sr_size + delta > <double>top:
            self.sr_size = top
        else:
            self.sr_size = <int64_t>(<double>self.sr_size + delta)
        self.r_size = self.capacity - self.sr_size

    cdef inline int32_t _sr_lru_victim(self) noexcept nogil:
        cdef int32_t s = _unpinned_from_tail(&self.sr, self.pins)
        if s < 0:
            s = _unpinned_from_tail(&self.r, self.pins)
        if s < 0:
            s = self.sr.tail if self.sr.tail >= 0 else self.r.tail
        return s

    cdef inline void _off(self, int64_t slot) noexcept nogil:
        """Take ``slot`` off SR or R, its bucket and its slot."""
        if self.flags[slot] & F_IN_R:
            dl_unlink(&self.r, slot)
        else:
            dl_unlink(&self.sr, slot)
        self.flags[slot] = 0
        self._unlink(slot)

    cdef inline int64_t _leave(self, int64_t slot, bint keep_demoted) noexcept nogil:
        """Evict ``slot``: its id enters H with its frequency and marks (``keep_demoted``:
        SR_LRU_evict keeps the demoted mark in H; its spill and remove clear it)."""
        cdef uint8_t f = self.flags[slot]
        cdef int64_t v = self.bfreq[self.bucket[slot]] * 4, victim
        if f & F_NEW:
            self.c_new += 1
            v |= H_NEW
        if f & F_DEMOTED:
            self.c_demoted -= 1
            if keep_demoted:
                v |= H_DEMOTED
        self._off(slot)
        victim = self._drop_slot(slot)
        gv_push(&self.hist, victim, v)
        return victim

    # ---- CR-LFU ----

    cdef inline void _cr_lfu_insert(self, int64_t slot, int64_t freq) noexcept nogil:
        """Put the new ``slot`` at the back of bucket ``freq`` (made if missing)."""
        cdef int32_t b = self.lowest, below = -1
        if freq == 1:
            self._lfu_insert(slot)
            return
        while b >= 0 and self.bfreq[b] < freq:
            below = b
            b = self.bup[b]
        if b < 0 or self.bfreq[b] != freq:
            b = self._new_bucket(freq, below)
            if b < 0:
                b = below if below >= 0 else self.lowest   # NOTE: out of memory (``nomem``)
                if b < 0:
                    self._lfu_insert(slot)
                    return
        self._append(b, slot)

    # ---- learning ----

    cdef inline void _update_lr(self) noexcept nogil:
        """libCacheSim's ``update_lr`` (every C gets)."""
        cdef double hit_rate = <double>(self.num_hit / self.capacity)   # NOTE: integers
        cdef double d_hit = hit_rate - self.hit_rate_prev
        cdef double d_lr = self.lr - self.lr_prev
        cdef double cand
        cdef int sign
        self.lr_prev = self.lr
        self.hit_rate_prev = hit_rate
        if d_lr != 0.0:
            sign = 1 if d_hit / d_lr > 0.0 else -1
            cand = self.lr + sign * fabs(self.lr * d_lr)
            self.lr = cand if cand > 0.001 else 0.0001
            self.unlearn = 0
        elif hit_rate == 0.0 or d_hit <= 0.0:
            self.unlearn += 1
        elif self.unlearn >= 10:
            self.unlearn = 0
            self.lr = 0.001 + <double>(rng_next(&self.rng) % 1000) / 1000.0
        self.num_hit = 0

    cdef inline void _after_get(self, const Access* acc) noexcept nogil:
        if acc.vtime % self.capacity == 0:
            self._update_lr()

    # ---- the policy ----

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.num_hit += 1
        if self.flags[slot] & F_IN_R:
            dl_move_head(&self.r, slot)
        else:
            # NOTE: SR_LRU.c would shrink SR here for a demoted block; libCacheSim never does
            # (see the module docstring)
            dl_unlink(&self.sr, slot)
            self._to_r(slot)
        self._lfu_hit(slot)
        self._after_get(acc)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos, v, slot
        pos = gr_find(&self.g_lru, acc.block_id)
        if pos >= 0:
            self.w_lru = self.w_lru * exp(-self.lr)
            gr_remove(&self.g_lru, pos)
        else:
            pos = gr_find(&self.g_lfu, acc.block_id)
            if pos >= 0:
                self.w_lfu = self.w_lfu * exp(-self.lr)
                gr_remove(&self.g_lfu, pos)
        self.w_lru = self.w_lru / (self.w_lru + self.w_lfu)
        self.w_lfu = 1.0 - self.w_lru
        slot = self._take_slot(acc.block_id)
        if gv_take(&self.hist, acc.block_id, &v):
            self._cr_lfu_insert(slot, (v >> 2) + 1)
            self.flags[slot] = F_DEMOTED if v & H_DEMOTED else 0
            self._to_r(slot)
            if v & H_NEW:
                self._grow_sr()
        else:
            self._lfu_insert(slot)
            self.flags[slot] = F_NEW
            dl_push_head(&self.sr, slot)
        self._after_get(acc)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t a, b, s
        cdef double x
        cdef int64_t victim
        if self.n_resident == 0:
            return 0
        if self.sr.n > self.sr_size:
            s = _unpinned_from_tail(&self.sr, self.pins)
            if s >= 0:
                return self._leave(s, False)
        a = self._sr_lru_victim()
        b = self._lfu_victim(True)      # CR-LFU: the newest of the lowest frequency
        x = <double>(rng_next(&self.rng) % 100) / 100.0
        if a == b:
            return self._leave(a, True)
        if x < self.w_lru:
            victim = self._leave(a, True)
            gr_push_bounded(&self.g_lru, victim)
        else:
            victim = self._leave(b, False)
            gr_push_bounded(&self.g_lfu, victim)
        return victim

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._off(slot)
        self._drop_slot(slot)

    def lists(self) -> dict[str, list[int]]:
        """SR and R from head (most recent) to tail, H and the ghosts newest first (tests)."""
        cdef int32_t s
        out = {"sr": [], "r": [], "h": gr_ids(&self.hist.g), "g_lru": gr_ids(&self.g_lru),
               "g_lfu": gr_ids(&self.g_lfu)}
        s = self.sr.head
        while s >= 0:
            out["sr"].append(self.slot_id(s))
            s = self.sr.next[s]
        s = self.r.head
        while s >= 0:
            out["r"].append(self.slot_id(s))
            s = self.r.next[s]
        return out

    def history(self, block_id: int) -> tuple[int, bool, bool] | None:
        """(frequency, new, demoted) H keeps for ``block_id``, None if absent (tests)."""
        cdef int64_t pos = gr_find(&self.hist.g, block_id), v
        if pos < 0:
            return None
        v = self.hist.val[pos]
        return v >> 2, bool(v & H_NEW), bool(v & H_DEMOTED)

    def marks(self, block_id: int) -> tuple[bool, bool]:
        """(new, demoted) of a resident block (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return bool(self.flags[s] & F_NEW), bool(self.flags[s] & F_DEMOTED)

    def learning(self) -> tuple[float, float, float, int]:
        """(w_lru, w_lfu, lr, unlearning steps) (tests)."""
        return self.w_lru, self.w_lfu, self.lr, self.unlearn

    def counts(self) -> tuple[int, int]:
        """(c_new, c_demoted) (tests)."""
        return self.c_new, self.c_demoted


def make(capacity: int, params: dict) -> Cacheus:
    return Cacheus(capacity, check_seed("cacheus", params))
