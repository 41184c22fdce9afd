# cython: language_level=3
"""S3-FIFO-d (libCacheSim ``S3FIFOd.c``, "quick demotion + lazy promotion v2"): QDLP (qdlp.pyx)
whose FIFO size adapts to where recently evicted blocks come back from.

Sizes start as libCacheSim truncates them: ``fifo = int(C * fifo-size-ratio)``, ``main = C -
fifo``, ghost ``main`` ids; main is a CLOCK (``main-cache``: ``Clock`` 1, ``Clock2`` 2,
``Clock3`` 3 counter bits, ``FIFO`` 0).  Two eviction histories, FIFOs of ``C // 10`` ids,
remember the ids last evicted from the FIFO (``fhist``) and from main (``mhist``); ``fhit`` and
``mhit`` count the gets that found their id there (the id then leaves the history).

Queues: ``fifo`` (a SlotFIFO: every new block, whatever main does not hold; its size bounds
nothing but main's), ``main`` (a DList, CLOCK order from the tail), ``ghost``, ``fhist``,
``mhist`` (GhostRings).  A resident block is on exactly one of fifo and main; ``freq[slot]`` is
its FIFO hit count (saturating at 255) or its main counter.

* every get (``hit``, ``insert``) first adapts the sizes: with ``fhit + mhit > 100`` and ``mhist``
  non-empty, ``step = max(1, min(fifo, main) // 1000)``; ``fhit > 2 mhit`` and ``main > C // 100``
  move ``step`` from main to the FIFO and the ghost, ``mhit > 2 fhit`` and ``fifo > C // 100``
  the other way; both counts then become ``int(0.8 x)``.  An empty ``mhist`` zeroes both counts.
* hit: ``freq += 1`` (FIFO: up to 255; main: up to the counter's max), then for a main block the
  history checks below.
* insert: an id in ``fhist`` leaves it, ``fhit += 1``; in ``mhist``: ``mhit += 1``.  An id in the
  ghost leaves it and enters main's head (counter 0) after main spills CLOCK victims while it
  holds ``main`` or more (inside ``insert``: the loop counts them as unexpected; not remembered
  in ``mhist``, as libCacheSim's ``main->get``).  Any other id enters the FIFO's head.
* evict: the FIFO is walked from its oldest block: count >= threshold moves it to main's head
  (counter 0), and if main is then over its size its CLOCK victim (possibly that block) is the
  evicted block; a lower count evicts it into the ghost and ``fhist``.  An empty FIFO evicts
  main's CLOCK victim.  Main's victims go into ``mhist``.
* CLOCK victim (libCacheSim ``Clock.c``): from the tail, a counter >= 1 loses one and the block
  moves to the head; the first block with 0 goes.

NOTE: one call evicts exactly one block (the PrefixSim fork's fix of ``S3FIFOd_evict``, which may
only move a block to main, or, after main shrank, evict several at once).  So a main over its
size (the FIFO grew) gives one CLOCK victim per call, before the FIFO is looked at, where
libCacheSim evicts all the excess in one call.  The sizes adapt at the get that hits or inserts,
after the evictions that made room for it (libCacheSim: before them); the ghost and histories are
probed there too (as qdlp).  Where libCacheSim dereferences NULL (a ghost hit while main's size
is 0, small caches only), the block enters main all the same.

Pins: honoured, strictly: a pinned block is never the victim while an unpinned one exists.  A
pinned FIFO block is promoted as it would be unpinned, else passed in place; CLOCK passes a pinned
block with counter 0 in place; with every main block pinned, main stays over its size (spills
stop the same way).  No FIFO victim: main's CLOCK victim; every main block pinned too: the
FIFO's oldest unpinned block; every block pinned: the FIFO's oldest, or with an empty FIFO main's
CLOCK victim taken as if unpinned (best effort).

Memory: as qdlp, 40 B/slot + the ghost (about 13 B per id, ``main`` ids at the start) + the two
histories (0.1 C ids each, 37 B per id below 32k ids): about 55 B/slot with all full (computed).
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.core.policy cimport Access
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_ids, gr_find, gr_remove,
                                         gr_push_bounded, sf_remove, sf_remove_at,
                                         sf_next_pos)
from shadow.sim.policies.adaptive.qdlp cimport QDLP
from shadow.sim.policies.adaptive.qdlp import main_params
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="S3-FIFO-d: QDLP whose FIFO size adapts to hits on recently evicted ids "
                "(libCacheSim S3FIFOd)",
    family="adaptive",
    defaults="fifo-size-ratio=0.10,main-cache=Clock2,move-to-main-threshold=1",
    strict_pins=True,
    weight=2.0,
)


cdef inline void _hist_get(GhostRing* g, int64_t block_id) noexcept nogil:
    """libCacheSim FIFO ``get`` on a FIFO of ids: nothing if present, else a bounded push."""
    if gr_find(g, block_id) < 0:
        gr_push_bounded(g, block_id)


cdef class S3FIFOd(QDLP):
    """See the module docstring; the FIFO, main, ghost and CLOCK walk are qdlp.pxd's."""
    cdef GhostRing fhist, mhist
    cdef readonly int64_t hist_size, fhit, mhit

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        # NOTE: QDLP's __cinit__ ran first with ghost ratio 0: the ghost holds main's size here.
        gr_free(&self.ghost)
        self.ghost_size = self.main_size
        gr_init(&self.ghost, self.ghost_size, &self.nomem)
        self.hist_size = capacity // 10
        gr_init(&self.fhist, self.hist_size, &self.nomem)
        gr_init(&self.mhist, self.hist_size, &self.nomem)

    def __dealloc__(self):
        gr_free(&self.fhist)
        gr_free(&self.mhist)

    cdef inline void _adapt(self) noexcept nogil:
        cdef int64_t step
        if self.mhist.n == 0:
            self.fhit = self.mhit = 0
            return
        if self.fhit + self.mhit > 100:
            step = min(self.fifo_size, self.main_size) // 1000
            if step < 1:
                step = 1
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
            self.ghost.limit = self.ghost_size if self.ghost_size > 0 else 0
            self.fhit = <int64_t>(self.fhit * 0.8)
            self.mhit = <int64_t>(self.mhit * 0.8)

    cdef inline void _histories(self, int64_t block_id) noexcept nogil:
        cdef int64_t pos = gr_find(&self.fhist, block_id)
        if pos >= 0:
            gr_remove(&self.fhist, pos)
            self.fhit += 1
        pos = gr_find(&self.mhist, block_id)
        if pos >= 0:
            gr_remove(&self.mhist, pos)
            self.mhit += 1

    cdef inline int64_t _main_out(self, int32_t s) noexcept nogil:
        cdef int64_t block_id = self._drop_slot(s)
        _hist_get(&self.mhist, block_id)
        return block_id

    cdef inline int64_t _fifo_out(self, int32_t s) noexcept nogil:
        cdef int64_t block_id
        sf_remove(&self.fifo, s)
        block_id = self._drop_slot(s)
        _hist_get(&self.ghost, block_id)
        _hist_get(&self.fhist, block_id)
        return block_id

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._adapt()
        self._count(slot)
        if self.qpos[slot] < 0:
            self._histories(acc.block_id)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos
        cdef int32_t v
        self._adapt()
        pos = gr_find(&self.ghost, acc.block_id)
        if pos >= 0:
            gr_remove(&self.ghost, pos)
        self._histories(acc.block_id)
        if pos >= 0:
            while self.main.tail >= 0 and self.main_n() >= self.main_size:
                v = self._clock_victim(True)
                if v < 0:
                    break
                self._drop_slot(v)
            return self._insert_main(acc.block_id)
        return self._insert_fifo(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t p, nxt
        cdef int32_t s, v
        if self.main_n() > self.main_size:
            v = self._clock_victim(True)
            if v >= 0:
                return self._main_out(v)
        p = self.fifo.tail if self.fifo.n > 0 else -1
        while p >= 0:
            s = self.fifo.q[p]
            # NOTE: found before the removal; the FIFO's positions hold (only a push compacts).
            nxt = sf_next_pos(&self.fifo, p)
            if self.freq[s] >= self.threshold:
                sf_remove_at(&self.fifo, p, s)
                self._to_main(s)
                if self.main_n() > self.main_size:
                    v = self._clock_victim(True)
                    if v >= 0:
                        return self._main_out(v)
            elif self.pins[s] <= 0:
                return self._fifo_out(s)
            p = nxt
        v = self._clock_victim(True)
        if v >= 0:
            return self._main_out(v)
        # best effort: every main block is pinned
        if self.fifo.n > 0:
            return self._fifo_out(self._fifo_oldest_unpinned())
        v = self._clock_victim(False)
        return self._main_out(v) if v >= 0 else 0

    # ---- Python-level views (tests) ----

    def queues(self) -> dict:
        """qdlp's queues, and the histories newest first."""
        out = QDLP.queues(self)
        out["fhist"] = gr_ids(&self.fhist)
        out["mhist"] = gr_ids(&self.mhist)
        return out


def make(capacity: int, params: dict) -> S3FIFOd:
    fifo, main_bits, threshold = main_params("s3fifod", params)
    return S3FIFOd(capacity, fifo, 0.0, main_bits, threshold)
