# cython: language_level=3
"""W-TinyLFU (libCacheSim ``WTinyLFU.c``, ``main-cache=SLRU,window-size=0.01``).

A window LRU of ``W = max(1, (int64)(C * window-size))`` blocks in front of a main SLRU of
``M = C - W`` blocks with two segments (libCacheSim's ``seg-size=1:4``): protected
``floor(0.8 M)``, probation the rest.  Admission to main is decided by a counting Bloom filter,
libCacheSim's ``minimalIncrementCBF`` with ``entries = M`` and error 0.001: ``n = ceil(bpe * M)``
32-bit counters (``bpe = -ln(0.001) / ln(2)^2``, about 14.4; at least ``2k``), ``k = 10`` cells
per id, cell ``i`` = ``(uint32)(a + i*b) % n`` with ``a``, ``b`` the low 32 bits of XXH64 of the
id's 8 bytes under seeds ``0x12345678`` and ``0x12344321``; an add increments all ``k`` cells,
the estimate is their minimum.

* insert: the window's head; the sketch adds the id.
* hit: in the window, to its head.  In main: probation -> protected's head (protected over its
  size cools its tail to probation's head), protected -> its head; the sketch adds the id and the
  hit is counted: after every ``32 M`` counted hits all counters are halved.
* evict: while the window has a candidate (its LRU end): if main has room the candidate moves to
  main (probation if it has room, else protected) and the loop goes on; otherwise it is compared
  with main's victim (probation's tail, else protected's): if the candidate's estimate is
  **strictly greater**, main's victim is evicted and the candidate moves to main, else the
  candidate is evicted.  Each candidate taken is added to the sketch after its decision.  An
  empty window evicts main's victim; a main of 0 blocks (``C = 1``) evicts the candidate.

Differences from libCacheSim (docs/policies/frequency.md): the window has at least one block (libCacheSim's
window of ``(int64)(0.01 C) = 0`` blocks below ``C = 100`` refuses every insert); probation gets
the remainder of ``M`` (libCacheSim sizes it ``floor(0.2 M)``, so when ``floor(0.2 M) +
floor(0.8 M) < M`` its probation runs one block over and a main hit can evict, which the serve
loop cannot allow).  Identical, event by event, when ``C >= 100`` and both products are exact.

Pins: honoured.  The window's candidate is its first unpinned block from the LRU end, main's
victim the first unpinned block from probation's tail, then protected's; a window of pinned
blocks counts as empty, a main of pinned blocks admits nothing.  Only when every block is pinned
is a pinned block evicted: the window's tail, else main's victim.

Memory: base 22 B/slot (18 from 32k slots) + lists 8 + list tag 1 + sketch ``4 * 14.38`` =
57.5 B per main slot: about 88 B/slot.  The sketch is libCacheSim's shape with its 32-bit
counters, so every estimate (and admission) is exact to it.
"""

from libc.math cimport log, ceil
from libc.stdint cimport int64_t, int32_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free

from shadow.errors import ShadowError
from shadow.sim.core.idtable cimport shadow_big_calloc, SHADOW_PREFETCH
from shadow.sim.core.policy cimport Policy, Access, RequestCtx
from shadow.sim.policies._shared.dlist cimport (DList, dl_init, dl_free, dl_push_head, dl_unlink,
                                         dl_move_head)
from shadow.sim.policies.adaptive.s3fifo cimport dl_first_unpinned
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="W-TinyLFU: window LRU, SLRU main, count-min admission (libCacheSim WTinyLFU)",
    family="frequency",
    defaults="main-cache=SLRU,window-size=0.01",
    strict_pins=True,
    weight=5.0,
    libcachesim="WTinyLFU",
    hashes_ids=True,
)

cdef enum:
    MAX_HASHES = 16
    IN_WINDOW = 0
    IN_PROBATION = 1
    IN_PROTECTED = 2

cdef extern from *:
    """
    /* NOTE: Lemire's fastmod (a % d for 32-bit a, d with m = 2**64 / d + 1): the sketch takes
       ten remainders per add or estimate, and a hardware divide each cost several times more. */
    static inline uint32_t wtinylfu_fastmod(uint32_t a, uint64_t m, uint32_t d) {
        uint64_t low = m * a;
        return (uint32_t)(((__uint128_t)low * d) >> 64);
    }
    """
    uint32_t wtinylfu_fastmod(uint32_t a, uint64_t m, uint32_t d) noexcept nogil

cdef uint64_t P1 = 0x9E3779B185EBCA87ULL
cdef uint64_t P2 = 0xC2B2AE3D27D4EB4FULL
cdef uint64_t P3 = 0x165667B19E3779F9ULL
cdef uint64_t P4 = 0x85EBCA77C2B2AE63ULL
cdef uint64_t P5 = 0x27D4EB2F165667C5ULL


cdef inline uint64_t _rotl(uint64_t x, int r) noexcept nogil:
    return (x << r) | (x >> (64 - r))


cdef inline uint64_t xxh64_u64(uint64_t v, uint64_t seed) noexcept nogil:
    """XXH64 of the 8 little-endian bytes of ``v`` (the xxHash spec for inputs under 32 B)."""
    cdef uint64_t h = seed + P5 + 8
    h ^= _rotl(v * P2, 31) * P1
    h = _rotl(h, 27) * P1 + P4
    h ^= h >> 33
    h *= P2
    h ^= h >> 29
    h *= P3
    return h ^ (h >> 32)


def py_xxh64_u64(v: int, seed: int) -> int:
    """:c:func:`xxh64_u64` for the tests."""
    return xxh64_u64(<uint64_t>v, <uint64_t>seed)


cdef class WTinyLFU(Policy):
    """See the module docstring.  The window and both segments share one pair of link arrays."""

    cdef DList window
    cdef DList seg[2]            # probation, protected
    cdef int64_t seg_size[2]
    cdef uint8_t* where          # IN_WINDOW, IN_PROBATION, IN_PROTECTED
    cdef readonly int64_t window_cap
    cdef readonly int64_t main_cap
    cdef uint32_t* counters
    cdef readonly uint32_t n_counters
    cdef uint64_t mod_m          # fastmod's multiplier for n_counters
    cdef readonly int n_hashes
    cdef readonly int64_t max_hits
    cdef readonly int64_t main_hits
    cdef readonly int64_t n_halvings
    # NOTE: the cells of the next window candidate and of main's victim, computed (and their
    # counters prefetched) at the end of the eviction before, keyed by block id (0: none): a
    # run of evictions then finds its counters loading or loaded.
    cdef int64_t cand_id
    cdef int64_t victim_id
    cdef uint32_t cand_cells[MAX_HASHES]
    cdef uint32_t victim_cells[MAX_HASHES]

    def __cinit__(self, int64_t capacity, double window_ratio=0.01, *args, **kwargs):
        cdef double bpe = -log(0.001) / 0.480453013918201
        cdef int64_t n, w = <int64_t>(<double>capacity * window_ratio)
        self.window_cap = min(max(w, 1), capacity)
        self.main_cap = capacity - self.window_cap
        self.seg_size[1] = <int64_t>(0.8 * <double>self.main_cap)
        self.seg_size[0] = self.main_cap - self.seg_size[1]
        dl_init(&self.window, capacity)
        self.seg[0] = self.window
        self.seg[1] = self.window
        self.where = <uint8_t*>shadow_big_calloc(capacity, sizeof(uint8_t))
        self.n_hashes = <int>ceil(0.693147180559945 * bpe)
        n = <int64_t>ceil(bpe * <double>self.main_cap)
        if n > 2**31 - 1:
            n = 2**31 - 1
        if n < self.n_hashes:
            n = 2 * self.n_hashes
        self.n_counters = <uint32_t>n
        self.mod_m = 0xFFFFFFFFFFFFFFFFULL // <uint64_t>n + 1
        self.counters = <uint32_t*>shadow_big_calloc(n, sizeof(uint32_t))
        if self.where == NULL or self.counters == NULL or self.n_hashes > MAX_HASHES:
            raise MemoryError(f"cannot allocate a W-TinyLFU cache of {capacity} slots")
        self.max_hits = 32 * self.main_cap
        self.cand_id = 0
        self.victim_id = 0
        self.main_hits = 0
        self.n_halvings = 0

    def __dealloc__(self):
        dl_free(&self.window)      # NOTE: the segments share the window's arrays
        free(self.where)
        free(self.counters)

    # ---- the sketch ----

    cdef inline void _cells(self, int64_t block_id, uint32_t* out) noexcept nogil:
        cdef uint32_t a = <uint32_t>xxh64_u64(<uint64_t>block_id, 0x12345678)
        cdef uint32_t b = <uint32_t>xxh64_u64(<uint64_t>block_id, 0x12344321)
        cdef uint32_t v = a
        cdef int i
        for i in range(self.n_hashes):
            # NOTE: (a + i*b) wraps at 32 bits before the remainder, as libCacheSim's unsigned
            out[i] = wtinylfu_fastmod(v, self.mod_m, self.n_counters)
            SHADOW_PREFETCH(&self.counters[out[i]])
            v += b

    cdef inline uint32_t _estimate(self, const uint32_t* cells) noexcept nogil:
        cdef uint32_t m = 0xFFFFFFFFU, c
        cdef int i
        for i in range(self.n_hashes):
            c = self.counters[cells[i]]
            if c < m:
                m = c
        return m

    cdef inline void _add(self, const uint32_t* cells) noexcept nogil:
        cdef int i
        for i in range(self.n_hashes):
            self.counters[cells[i]] += 1

    cdef inline uint32_t* _cells_of(self, int64_t block_id, bint victim) noexcept nogil:
        """The cells of ``block_id`` through the candidate's or the victim's one-entry cache."""
        if victim:
            if self.victim_id != block_id:
                self._cells(block_id, self.victim_cells)
                self.victim_id = block_id
            return self.victim_cells
        if self.cand_id != block_id:
            self._cells(block_id, self.cand_cells)
            self.cand_id = block_id
        return self.cand_cells

    cdef inline void _add_id(self, int64_t block_id) noexcept nogil:
        cdef uint32_t cells[MAX_HASHES]
        self._cells(block_id, cells)
        self._add(cells)

    # ---- main ----

    cdef inline void _main_insert(self, int64_t slot) noexcept nogil:
        cdef int i = 0 if self.seg[0].n < self.seg_size[0] else 1
        self.where[slot] = <uint8_t>(IN_PROBATION + i)
        dl_push_head(&self.seg[i], slot)

    cdef inline int32_t _main_victim(self) noexcept nogil:
        cdef int32_t s = dl_first_unpinned(&self.seg[0], self.pins)
        if s < 0:
            s = dl_first_unpinned(&self.seg[1], self.pins)
        return s

    cdef inline void _main_unlink(self, int64_t slot) noexcept nogil:
        dl_unlink(&self.seg[self.where[slot] - IN_PROBATION], slot)

    # ---- the policy ----

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef int32_t s
        cdef int64_t i
        if self.where[slot] == IN_WINDOW:
            dl_move_head(&self.window, slot)
            return
        if self.where[slot] == IN_PROTECTED:
            dl_move_head(&self.seg[1], slot)
        else:
            dl_unlink(&self.seg[0], slot)
            self.where[slot] = IN_PROTECTED
            dl_push_head(&self.seg[1], slot)
            if self.seg[1].n > self.seg_size[1]:
                s = self.seg[1].tail
                dl_unlink(&self.seg[1], s)
                self.where[s] = IN_PROBATION
                dl_push_head(&self.seg[0], s)
        self._add_id(acc.block_id)
        self.main_hits += 1
        if self.main_hits >= self.max_hits:
            self.main_hits = 0
            self.n_halvings += 1
            for i in range(self.n_counters):
                self.counters[i] >>= 1

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        # NOTE: only a prefetch: every block of the request is about to be an insert or a hit,
        # and all but window hits add to the sketch; start loading their counters together.
        cdef uint32_t cells[MAX_HASHES]
        cdef int64_t i
        for i in range(ctx.n_blocks):
            self._cells(ctx.block_ids[i], cells)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self.where[slot] = IN_WINDOW
        dl_push_head(&self.window, slot)
        self._add_id(acc.block_id)
        return slot

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int32_t cand, victim
        cdef uint32_t* cc
        cdef bint admit
        cdef int64_t out
        if self.n_resident == 0:
            return 0
        while True:
            cand = dl_first_unpinned(&self.window, self.pins)
            if cand < 0:
                break
            cc = self._cells_of(self.slot_id(cand), False)
            if self.seg[0].n + self.seg[1].n < self.main_cap:
                dl_unlink(&self.window, cand)
                self._main_insert(cand)
                self._add(cc)
                continue
            victim = self._main_victim()
            admit = False
            if victim >= 0:
                admit = self._estimate(cc) > self._estimate(self._cells_of(self.slot_id(victim), True))
            self._add(cc)
            if admit:
                self._main_unlink(victim)
                dl_unlink(&self.window, cand)
                self._main_insert(cand)
                out = self._drop_slot(victim)
            else:
                dl_unlink(&self.window, cand)
                out = self._drop_slot(cand)
            self._prefetch_next()
            return out
        victim = self._main_victim()
        if victim >= 0:
            self._main_unlink(victim)
            return self._drop_slot(victim)
        # NOTE: every block is pinned: best effort, the plain candidate.
        if self.window.tail >= 0:
            victim = self.window.tail
            dl_unlink(&self.window, victim)
            return self._drop_slot(victim)
        victim = self.seg[0].tail if self.seg[0].tail >= 0 else self.seg[1].tail
        self._main_unlink(victim)
        return self._drop_slot(victim)

    cdef inline void _prefetch_next(self) noexcept nogil:
        """Compute the next candidate's and main victim's cells (prefetching their counters)
        and prefetch their resident-table entries (one of them is the next victim's delete)."""
        cdef int32_t s = self.window.tail
        cdef int64_t block_id
        if s >= 0:
            block_id = self.slot_id(s)
            self._cells_of(block_id, False)
            self.prefetch(block_id)
        s = self.seg[0].tail if self.seg[0].tail >= 0 else self.seg[1].tail
        if s >= 0:
            block_id = self.slot_id(s)
            self._cells_of(block_id, True)
            self.prefetch(block_id)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.where[slot] == IN_WINDOW:
            dl_unlink(&self.window, slot)
        else:
            self._main_unlink(slot)
        self._drop_slot(slot)

    def estimate(self, block_id: int) -> int:
        """The sketch's estimate for ``block_id`` (read-only)."""
        cdef uint32_t cells[MAX_HASHES]
        self._cells(block_id, cells)
        return self._estimate(cells)

    @property
    def seg_sizes(self) -> list[int]:
        return [self.seg_size[0], self.seg_size[1]]

    def _ids(self, int which) -> list[int]:
        cdef const DList* d = &self.window if which < 0 else &self.seg[which]
        cdef int32_t s = d.head
        out = []
        while s >= 0:
            out.append(self.slot_id(s))
            s = d.next[s]
        return out

    def queues(self) -> dict[str, list[int]]:
        """Ids of the window, probation and protected, each from the head (most recent)."""
        return {"window": self._ids(-1), "probation": self._ids(0), "protected": self._ids(1)}


def check_params(params: dict) -> float:
    """The window ratio; a bad parameter raises :class:`ShadowError` naming it."""
    ws = float(params.get("window-size", 0.01))
    if not 0.0 < ws < 1.0:
        raise ShadowError(f"policy wtinylfu: window-size must be in (0, 1), got {ws}")
    main = str(params.get("main-cache", "SLRU"))
    if main.lower() != "slru":
        raise ShadowError(f"policy wtinylfu: main-cache must be SLRU, got {main}")
    return ws


def make(capacity: int, params: dict) -> WTinyLFU:
    return WTinyLFU(capacity, check_params(params))
