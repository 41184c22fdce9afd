# cython: language_level=3
"""s3fifo_compute: S3-FIFO whose promotion and reinsertion tests weigh frequency by the arriving
block's compute cost (the PrefixSim fork's ``S3FIFOCompute.c`` at 32b6ce0a, the newest of its 6
versions).

Sizes: ``small = int(C * small-size-ratio)`` (at least 1), ``main = C - small``,
``ghost = int(C * ghost-size-ratio)`` ids, each with the frequency it left with.  Every size is 1,
so a queue's mean object size is 1 while it holds a block, 0 when empty; ``cost`` below is the
llround cost of the access passed to insert or evict (during allocation the first missing block of
the arriving request), 1 if it is not positive, and ``thr = move-to-main-threshold``.

* insert, id in the ghost with frequency ``g`` (it leaves the ghost): to main with freq 1 if small
  is empty or ``g / (1 / cost) >= thr``, else to small with freq ``g + 1``;
* insert, other ids: before the first eviction to main while main holds fewer than its size, then
  to small; after it to small; freq 1;
* hit: ``freq += 1`` (saturating at 255: only ``min(freq, 4)`` and ``freq * cost >= thr`` with
  ``thr <= 255`` are read, so no decision changes);
* evict, repeated until one block has left: take from main if main is over its size or small is
  empty, else from small.  Small's candidate with ``freq / (1 / cost) >= thr`` moves to main's head
  with freq 1, else it leaves into the ghost with its freq.  Main's candidate with
  ``freq / (1 / cost) >= thr`` is reinserted at main's head with ``min(freq, 4) - 1``, else it
  leaves.  (The fork computes ``mean / cost`` with the cache's mean size, 1: the same division.)

Pins: honoured, as s3fifo: a pinned candidate is promoted or reinserted as it would be unpinned,
but one that would leave is passed over (it keeps its place and freq; the walk goes on).  If the
chosen queue has only such blocks left, the other queue takes the step; if both have, the oldest
block of small (else of main) leaves (best effort), small's into the ghost.  NOTE: the walk of each
queue goes on from where it stood within one evict call (what it passed is still pinned and would
still leave), so a long pinned run is read once per call, not once per step.

Memory: base 22 B/slot (18 from 32k slots: ``TABLE_PER_SLOT``) + ring positions 4 + the two slot
rings (about 5) + freq/queue 2 + the ghost (an id ring with one 8-byte value each, about 23 B per
ghost id, ``ghost-size-ratio`` of C).
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies._shared.ghost cimport (SlotFIFO, sf_slots, sf_push, sf_remove, sf_remove_at,
                                         sf_next_pos, sf_tail, sf_pos, gr_ids)
from shadow.sim.policies.adaptive.s3fifo cimport S3FIFO
from shadow.sim.policies._shared.ghostval cimport GhostVals, gv_init, gv_free, gv_push, gv_take
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="S3-FIFO with frequency weighted by the arriving block's cost (PrefixSim fork S3FIFOCompute)",
    family="cost-aware",
    defaults="small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=1",
    weight=1.8,
)


cdef inline double _cost_of(const Access* acc) noexcept nogil:
    """The fork's compute intensity: the access's cost, 1 if not positive."""
    return <double>acc.cost if acc.cost > 0 else 1.0


cdef inline bint _passes(int64_t freq, double ratio, int64_t threshold) noexcept nogil:
    """The fork's ``freq / ratio >= threshold`` (a ratio of 0, an empty queue's mean: +inf)."""
    return ratio == 0.0 or <double>freq / ratio >= <double>threshold


cdef struct Walk:
    # NOTE: where one evict call's walk of a queue stands: ``slot`` is the next slot to examine
    # (-1: the queue's oldest), or with ``done`` the last one passed over (a pinned block that
    # would leave), after which the walk goes on; ``slot == -2``: nothing left to examine.
    int32_t slot
    bint done


cdef inline int64_t _walk_pos(const SlotFIFO* f, const Walk* w) noexcept nogil:
    """The ring position the walk ``w`` of ``f`` examines next, or -1."""
    cdef int64_t p
    if w.slot == -2:
        return -1
    if w.slot < 0:
        return f.tail if f.n > 0 else -1
    p = sf_pos(f, w.slot)
    return sf_next_pos(f, p) if w.done else p


cdef class S3FIFOCompute(S3FIFO):
    """See the module docstring.  s3fifo's queues, freq and hit/remove (a subclass, s3fifo.pxd),
    with a ghost whose ids carry their freq in place of s3fifo's (kept empty).  Invariants: every
    resident slot is on exactly one of ``small`` and ``main`` (``in_main`` says which); ``vghost``
    holds no resident id."""

    cdef GhostVals vghost

    def __cinit__(self, int64_t capacity, double small_ratio=0.10, double ghost_ratio=0.0,
                  int64_t threshold=1, double vghost_ratio=0.90, *args, **kwargs):
        # NOTE: S3FIFO's __cinit__ ran first with ghost_ratio 0 (its ghost stays empty).
        self.ghost_size = <int64_t>(capacity * vghost_ratio)
        gv_init(&self.vghost, self.ghost_size, &self.nomem)

    def __dealloc__(self):
        gv_free(&self.vghost)

    cdef inline void _to_main(self, int64_t slot, int64_t f) noexcept nogil:
        self.freq[slot] = <uint8_t>f
        self.in_main[slot] = 1
        sf_push(&self.main, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t g
        cdef bint ghost_hit = gv_take(&self.vghost, acc.block_id, &g)
        cdef int64_t slot = self._take_slot(acc.block_id)
        # NOTE: the mean size of small is 1 while it holds a block, 0 (any freq passes) if empty.
        cdef double ratio = (1.0 if self.small.n > 0 else 0.0) / _cost_of(acc)
        if ghost_hit:
            if _passes(g, ratio, self.threshold):
                self._to_main(slot, 1)
                return slot
            self.freq[slot] = <uint8_t>(g + 1 if g < 254 else 255)
        elif not self.has_evicted and self.main.n < self.main_size:
            self._to_main(slot, 1)
            return slot
        else:
            self.freq[slot] = 1
        self.in_main[slot] = 0
        sf_push(&self.small, slot)
        return slot

    cdef int64_t _step_small(self, Walk* w, double ratio) noexcept nogil:
        """One step of small's walk: its candidate promoted (0) or gone into the ghost (its
        id); -1 if only pinned blocks that would leave are left (the walk passes them)."""
        cdef int64_t p = _walk_pos(&self.small, w), nxt, f, victim
        cdef int32_t s
        while p >= 0:
            s = self.small.q[p]
            f = self.freq[s]
            nxt = sf_next_pos(&self.small, p)
            if _passes(f, ratio, self.threshold):
                sf_remove_at(&self.small, p, s)
                self._to_main(s, 1)
                # NOTE: nothing is pushed onto small during an eviction: past its newest, the walk
                # is over for this call.
                w.slot = self.small.q[nxt] if nxt >= 0 else -2
                w.done = False
                return 0
            if self.pins[s] <= 0:
                sf_remove_at(&self.small, p, s)
                victim = self._drop_slot(s)
                gv_push(&self.vghost, victim, f)
                return victim
            p = nxt
        w.slot = -2
        return -1

    cdef int64_t _step_main(self, Walk* w, double ratio) noexcept nogil:
        """One step of main's walk: its candidate reinserted (0) or gone (its id); -1 if only
        pinned blocks that would leave are left (the walk passes them; a promotion from small may
        give it more)."""
        cdef int64_t p = _walk_pos(&self.main, w), nxt, f
        cdef int32_t s
        while p >= 0:
            s = self.main.q[p]
            f = self.freq[s]
            nxt = sf_next_pos(&self.main, p)
            if _passes(f, ratio, self.threshold):
                if nxt < 0:
                    # NOTE: the newest block: reinserting it leaves it where it is (met again next)
                    self.freq[s] = <uint8_t>((f if f < 4 else 4) - 1)
                    w.slot = s
                else:
                    # NOTE: found before the move (a push may compact the ring), as s3fifo's walk
                    w.slot = self.main.q[nxt]
                    sf_remove_at(&self.main, p, s)
                    self._to_main(s, (f if f < 4 else 4) - 1)
                w.done = False
                return 0
            if self.pins[s] <= 0:
                sf_remove_at(&self.main, p, s)
                return self._drop_slot(s)
            w.slot = s
            w.done = True
            p = nxt
        return -1

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef double ratio = 1.0 / _cost_of(acc)
        cdef int64_t victim = 0
        cdef int32_t s
        cdef Walk wm, ws
        if self.n_resident == 0:
            return 0
        self.has_evicted = True
        wm.slot = ws.slot = -1
        wm.done = ws.done = False
        while victim == 0:
            if self.main.n > self.main_size or self.small.n == 0:
                victim = self._step_main(&wm, ratio)
                if victim < 0:          # only pinned blocks that would leave: small steps
                    victim = self._step_small(&ws, ratio)
            else:
                victim = self._step_small(&ws, ratio)
                if victim < 0:
                    victim = self._step_main(&wm, ratio)
        if victim < 0:
            # best effort: every candidate is pinned
            if self.small.n > 0:
                s = sf_tail(&self.small)
                sf_remove(&self.small, s)
                victim = self._drop_slot(s)
                gv_push(&self.vghost, victim, self.freq[s])
            else:
                s = sf_tail(&self.main)
                sf_remove(&self.main, s)
                victim = self._drop_slot(s)
        return victim

    # ---- Python-level views (tests) ----

    def queues(self) -> dict:
        """Ids per queue from the oldest (next candidate) to the newest; freq per resident id;
        ghost ids oldest first."""
        out = {"small": [], "main": [], "freq": {}}
        for name, slots in (("small", sf_slots(&self.small)), ("main", sf_slots(&self.main))):
            for s in reversed(slots):
                out[name].append(self.slot_id(s))
                out["freq"][self.slot_id(s)] = self.freq[s]
        out["ghost"] = list(reversed(gr_ids(&self.vghost.g)))
        return out


def make(capacity: int, params: dict) -> S3FIFOCompute:
    small = float(params.get("small-size-ratio", 0.10))
    ghost = float(params.get("ghost-size-ratio", 0.90))
    threshold = int(params.get("move-to-main-threshold", 1))
    if not 0.0 < small < 1.0:
        raise ShadowError(f"policy s3fifo_compute: small-size-ratio must be in (0, 1), got {small}")
    if not 0.0 <= ghost <= 4.0:
        raise ShadowError(f"policy s3fifo_compute: ghost-size-ratio must be in [0, 4], got {ghost}")
    if not 1 <= threshold <= 255:
        raise ShadowError(
            f"policy s3fifo_compute: move-to-main-threshold must be in [1, 255], got {threshold}")
    return S3FIFOCompute(capacity, small, 0.0, threshold, ghost)
