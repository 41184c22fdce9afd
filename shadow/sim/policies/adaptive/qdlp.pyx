# cython: language_level=3
"""QDLP, quick demotion and lazy promotion (libCacheSim ``QDLP.c``): a FIFO in front of a CLOCK
main cache, with a ghost FIFO of ids evicted from the FIFO.

Sizes as libCacheSim truncates them: ``fifo = int(C * fifo-size-ratio)``, ``main = C - fifo``,
``ghost = int(C * ghost-size-ratio)`` (none when 0).  Main is a CLOCK of ``main`` blocks whose
counter has ``main-cache``'s bits (``Clock`` 1, ``Clock2`` 2, ``Clock3`` 3, ``FIFO`` 0).
NOTE: the FIFO's size bounds nothing but main's: every new block enters the FIFO, which holds
whatever main does not (libCacheSim refuses a block when ``fifo <= 1``; a prefix cache caches
every served block, so shadow admits it).

Queues: ``fifo`` (a SlotFIFO, newest at the head), ``main`` (a DList, CLOCK order: the tail is
looked at first), ``ghost`` (a GhostRing).  A resident block is on exactly one of fifo and main;
``freq[slot]`` is its FIFO hit count (saturating at 255) or its main counter.

* hit: ``freq += 1`` (FIFO: up to 255; main: up to the counter's max).
* insert: an id in the ghost leaves it and enters main's head with counter 0; a full main first
  evicts its CLOCK victim inside ``insert`` (the loop counts it as unexpected).  Any other id
  enters the FIFO's head with count 0.
* evict: while the FIFO is non-empty its oldest block is looked at: count >= threshold moves it
  to main's head (counter 0), after main evicts its CLOCK victim if main is full (that victim is
  the evicted block); a count below the threshold leaves into the ghost.  An empty FIFO evicts
  main's CLOCK victim.  One call evicts exactly one block (the PrefixSim fork's fix of
  ``QDLP_evict``, which may only move a block to main; libCacheSim's ``get`` loops instead).
* CLOCK victim (libCacheSim ``Clock.c``): from the tail, a counter >= 1 loses one and the block
  moves to the head; the first block with 0 goes.

Pins: honoured, strictly: a pinned block is never the victim while an unpinned one exists.  A
pinned FIFO block is promoted as it would be unpinned, else passed in place; CLOCK passes a pinned
block with counter 0 in place.  A promotion into a full main whose blocks are all pinned does not
happen (the block is passed in place); a ghost hit into such a main overfills it by one.  If the
FIFO walk finds no victim, main's CLOCK victim goes; if every main block is pinned too, the FIFO's
oldest unpinned block; only if every block is pinned, the FIFO's oldest, or with an empty FIFO
main's CLOCK victim taken as if unpinned (best effort).

NOTE: the ghost is probed in ``insert``, after the evictions that made room (as s3fifo does);
libCacheSim probes it in ``find``, before them, so an arriving id that one of those evictions
pushes out of a full ghost is a ghost hit there and a plain FIFO insert here.

Memory: base 22 B/slot + the FIFO ring sized for the whole cache (4 B x 1.25 a slot) and its
positions 4 B/slot + main's links 8 B/slot + freq 1 B/slot = 40 B/slot, + the ghost ring (about
13 B per ghost id, 37 B below 32k ghost ids; ``ghost-size-ratio`` of C): about 52 B/slot with
the ghost full at the defaults (computed, not measured).
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.dlist cimport dl_init, dl_free, dl_unlink
from shadow.sim.policies._shared.ghost cimport (gr_init, gr_free, gr_ids, gr_find, gr_remove,
                                         gr_push_bounded, sf_init, sf_free, sf_slots,
                                         sf_remove, sf_remove_at, sf_next_pos)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="QDLP: FIFO with lazy promotion into a CLOCK main cache, ghost FIFO "
                "(libCacheSim QDLP)",
    family="adaptive",
    defaults="fifo-size-ratio=0.10,ghost-size-ratio=0.9,main-cache=Clock2,move-to-main-threshold=1",
    strict_pins=True,
    weight=1.8,
)

_MAIN_BITS = {"fifo": 0, "clock": 1, "clock2": 2, "clock3": 3}


cdef class QDLP(Policy):
    """See the module docstring."""

    def __cinit__(self, int64_t capacity, double fifo_ratio=0.10, double ghost_ratio=0.9,
                  int main_bits=2, int64_t threshold=1, *args, **kwargs):
        self.fifo_size = <int64_t>(capacity * fifo_ratio)
        self.main_size = capacity - self.fifo_size
        self.ghost_size = <int64_t>(capacity * ghost_ratio)
        self.max_freq = <uint8_t>((1 << main_bits) - 1)
        self.threshold = threshold
        self.freq = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        self.qpos = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        if self.freq == NULL or self.qpos == NULL:
            raise MemoryError(f"cannot allocate a QDLP cache of {capacity} slots")
        memset(self.qpos, 0xFF, max(capacity, 1) * sizeof(int32_t))
        dl_init(&self.main, capacity)
        sf_init(&self.fifo, capacity, self.qpos, &self.nomem)
        gr_init(&self.ghost, self.ghost_size, &self.nomem)

    def __dealloc__(self):
        sf_free(&self.fifo)
        dl_free(&self.main)
        free(self.qpos)
        free(self.freq)
        gr_free(&self.ghost)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._count(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, acc.block_id)
        cdef int32_t v
        if pos >= 0:
            gr_remove(&self.ghost, pos)
            if self.main_n() >= self.main_size:
                v = self._clock_victim(True)
                if v >= 0:
                    self._drop_slot(v)
            return self._insert_main(acc.block_id)
        return self._insert_fifo(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t p = self.fifo.tail if self.fifo.n > 0 else -1, nxt
        cdef int32_t s, v
        cdef int64_t block_id
        while p >= 0:
            s = self.fifo.q[p]
            # NOTE: found before the removal; the FIFO's positions hold (only a push compacts).
            nxt = sf_next_pos(&self.fifo, p)
            if self.freq[s] >= self.threshold:
                if self.main_n() >= self.main_size:
                    v = self._clock_victim(True)
                    if v >= 0:
                        sf_remove_at(&self.fifo, p, s)
                        self._to_main(s)
                        return self._drop_slot(v)
                else:
                    sf_remove_at(&self.fifo, p, s)
                    self._to_main(s)
            elif self.pins[s] <= 0:
                sf_remove_at(&self.fifo, p, s)
                block_id = self._drop_slot(s)
                gr_push_bounded(&self.ghost, block_id)
                return block_id
            p = nxt
        v = self._clock_victim(True)
        if v >= 0:
            return self._drop_slot(v)
        # best effort: every main block is pinned
        if self.fifo.n > 0:
            s = self._fifo_oldest_unpinned()
            sf_remove(&self.fifo, s)
            block_id = self._drop_slot(s)
            gr_push_bounded(&self.ghost, block_id)
            return block_id
        v = self._clock_victim(False)
        return self._drop_slot(v) if v >= 0 else 0

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.qpos[slot] >= 0:
            sf_remove(&self.fifo, slot)
        else:
            dl_unlink(&self.main, slot)
        self._drop_slot(slot)

    # ---- Python-level views (tests) ----

    def queues(self) -> dict:
        """Ids per queue: fifo from the head (newest) to the oldest, main from the head to the
        tail, ghost newest first; freq per resident id."""
        out = {"fifo": [], "main": [], "ghost": gr_ids(&self.ghost), "freq": {}}
        for s in sf_slots(&self.fifo):
            out["fifo"].append(self.slot_id(s))
            out["freq"][self.slot_id(s)] = self.freq[s]
        s = self.main.head
        while s >= 0:
            out["main"].append(self.slot_id(s))
            out["freq"][self.slot_id(s)] = self.freq[s]
            s = self.main.next[s]
        return out


def main_params(name: str, params: dict) -> tuple[float, int, int]:
    """``fifo-size-ratio``, the main CLOCK's counter bits and ``move-to-main-threshold``, checked
    (qdlp's and s3fifod's)."""
    fifo = float(params.get("fifo-size-ratio", 0.10))
    main = str(params.get("main-cache", "Clock2")).lower()
    threshold = int(params.get("move-to-main-threshold", 1))
    if not 0.0 <= fifo < 1.0:
        raise ShadowError(f"policy {name}: fifo-size-ratio must be in [0, 1), got {fifo}")
    if main not in _MAIN_BITS:
        raise ShadowError(f"policy {name}: main-cache must be one of Clock, Clock2, Clock3, FIFO, "
                          f"got {params.get('main-cache')!r}")
    if not 1 <= threshold <= 255:
        raise ShadowError(f"policy {name}: move-to-main-threshold must be in [1, 255], got "
                          f"{threshold}")
    return fifo, _MAIN_BITS[main], threshold


def make(capacity: int, params: dict) -> QDLP:
    fifo, main_bits, threshold = main_params("qdlp", params)
    ghost = float(params.get("ghost-size-ratio", 0.9))
    if not 0.0 <= ghost <= 4.0:
        raise ShadowError(f"policy qdlp: ghost-size-ratio must be in [0, 4], got {ghost}")
    return QDLP(capacity, fifo, ghost, main_bits, threshold)
