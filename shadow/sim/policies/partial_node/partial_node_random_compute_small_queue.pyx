# cython: language_level=3
"""partial_node_random_compute_small_queue: partial_node_random_compute behind an S3-FIFO-style
small FIFO with a ghost (the PrefixSim fork's ``cpp/PartialNodeRandomComputeSmallQueue.cpp`` at
6293aadf, whose queue lives in ``partialNodeCache.{hpp,cpp}``; the vLLM prototype's
``RandomSmallQueueFreeBlockManager`` rules: small 10%, ghost 90%, promotion at 2).

The **main set** is partial_node_random_compute's, unchanged (a subclass: nodes, splitting,
stamping, sampling by ``cost / age``, trimming, ``micro``/``drain``, its pins).  In front of it:

* a **small FIFO** of ``small = int(C * small-size-ratio)`` blocks (at least 1) that are resident
  but in no node; each has a ``freq``: 0 at insert, +1 per hit (saturating at 255);
* a **ghost** FIFO of ``int(C * ghost-size-ratio)`` ids of blocks dropped from the small FIFO.

* insert: an id in the ghost leaves it and goes to main; before the first eviction, so does every
  id once the small FIFO holds ``small`` blocks; otherwise the block enters the small FIFO.  A block
  going to main is inserted as partial_node_random_compute inserts (it joins the previous main
  insert's node when their positions are consecutive).
* evict (``evict_n``): while the small FIFO is not empty and main holds at most ``C - small``
  blocks, the small FIFO gives one block per round: walking from its oldest, a block with
  ``freq >= move-to-main-threshold`` is promoted (a node of its own, stamped with the access's
  vtime: the fork sets its last access to ``n_req``), and the first one below leaves into the
  ghost.  The rest comes from main as partial_node_random_compute evicts; if main has nothing, the
  small FIFO gives it.

Pins: honoured.  In the small FIFO a pinned block is promoted as it would be unpinned, but one that
would leave is passed over (it keeps its place); a small FIFO with only such blocks left sends the
eviction to main.  Main is partial_node_random_compute's (a node with a pinned tail is no
candidate; best effort from a pinned tail only when every node's tail is pinned).  When main gives
nothing, the small FIFO's oldest leaves (best effort).

Memory: partial_node_random_compute's 42 B/slot from 32k slots + freq 1 + the small FIFO's ring
(about 5 B per queued block; its positions live in ``s_up``, which a queued block does not use) +
the ghost ring (13 B per ghost id, 0.9 C at the default).
"""

from libc.stdint cimport int64_t, int32_t, uint8_t, uint16_t
from libc.stdlib cimport calloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Access
from shadow.sim.policies.partial_node.partial_node_random_compute cimport PartialNodeRandomCompute
from shadow.sim.policies.partial_node.partial_node_random_compute import make_node_policy
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove,
                                         gr_push_bounded, gr_ids, SlotFIFO, sf_init, sf_free,
                                         sf_push, sf_remove, sf_remove_at, sf_next_pos, sf_tail,
                                         sf_slots)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="partial_node_random_compute behind a small FIFO (10%) and ghost (90%), promotion at 2 hits (PrefixSim fork)",
    family="partial-node",
    defaults=("n-sample=128,eviction-mode=micro,micro-batch=64,seed=1,"
              "small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2"),
    deterministic=False,
    weight=2.4,
    reference_params="micro-batch=1",
)


cdef class PartialNodeRandomComputeSmallQueue(PartialNodeRandomCompute):
    """See the module docstring.  Invariants (besides the base class's, for the main set): a
    resident slot is either in a node (``s_node >= 0`` outside ``on_request``) or on ``small``
    (``s_node == -1``, never touched by ``on_request``, which passes negative entries); the ghost
    holds no resident id."""

    cdef SlotFIFO small
    cdef GhostRing ghost
    cdef uint8_t* freq
    cdef readonly int64_t small_size, ghost_size, threshold
    cdef readonly bint has_evicted

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        # NOTE: the base __cinit__ already ran with the same arguments; the queue is set up by
        # set_queue (make), its sizes not being constructor arguments of the base.
        self.freq = <uint8_t*>calloc(max(capacity, 1), sizeof(uint8_t))
        if self.freq == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.small.q = NULL
        self.ghost.e = NULL

    def __dealloc__(self):
        free(self.freq)
        if self.small.q != NULL:
            sf_free(&self.small)
        if self.ghost.e != NULL:
            gr_free(&self.ghost)

    def set_queue(self, double small_ratio, double ghost_ratio, int64_t threshold) -> None:
        """Size the small FIFO and the ghost (once, before any access)."""
        self.small_size = max(1, <int64_t>(self.capacity * small_ratio))
        self.ghost_size = <int64_t>(self.capacity * ghost_ratio)
        self.threshold = threshold
        self.has_evicted = False
        # NOTE: a queued block is in no node, so its ``s_up`` entry holds its ring position.
        sf_init(&self.small, self.small_size, self.s_up, &self.nomem)
        gr_init(&self.ghost, self.ghost_size, &self.nomem)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        PartialNodeRandomCompute.hit(self, slot, acc)
        if self.s_node[slot] == -1 and self.freq[slot] < 255:
            self.freq[slot] += 1

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, acc.block_id), slot
        if pos >= 0:
            gr_remove(&self.ghost, pos)
        if pos >= 0 or (not self.has_evicted and self.small.n >= self.small_size):
            return PartialNodeRandomCompute.insert(self, acc)
        slot = self._take_slot(acc.block_id)
        self._set_cost(slot, acc.cost)
        self.s_node[slot] = -1
        self.freq[slot] = 0
        if self.last_slot == slot:
            self.last_slot = -1     # NOTE: the base joins its next insert only to a node's block
        sf_push(&self.small, slot)
        return slot

    cdef int64_t _evict_small(self, int64_t now) noexcept nogil:
        """One round of the small FIFO: promote from its oldest end, drop the first block below
        the threshold into the ghost and return its id; 0 if only pinned blocks that would leave
        are left (the walk passes them)."""
        cdef int64_t p = self.small.tail if self.small.n > 0 else -1, nxt, victim
        cdef int32_t s
        while p >= 0:
            s = self.small.q[p]
            # NOTE: found before the removal; small's positions hold (nothing is pushed here).
            nxt = sf_next_pos(&self.small, p)
            if self.freq[s] >= self.threshold:
                sf_remove_at(&self.small, p, s)
                self.s_up[s] = -1
                self.s_node[s] = self._new_node(s, now, -1)
            elif self.pins[s] <= 0:
                sf_remove_at(&self.small, p, s)
                victim = self._drop_slot(s)
                gr_push_bounded(&self.ghost, victim)
                return victim
            p = nxt
        return 0

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, v
        cdef int32_t s
        self.has_evicted = True
        while (k < n and self.small.n > 0
               and self.n_resident - self.small.n <= self.capacity - self.small_size):
            v = self._evict_small(acc.vtime)
            if v == 0:
                break
            out[k] = v
            k += 1
        if k < n:
            k += PartialNodeRandomCompute.evict_n(self, acc, n - k, out + k)
        while k < n and self.small.n > 0:
            v = self._evict_small(acc.vtime)
            if v == 0:
                # best effort: the small FIFO's oldest
                s = sf_tail(&self.small)
                sf_remove(&self.small, s)
                v = self._drop_slot(s)
                gr_push_bounded(&self.ghost, v)
            out[k] = v
            k += 1
        return k

    # NOTE: the base's ``evict`` is ``evict_n`` of one block (a virtual call: this one).

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.s_node[slot] == -1:
            sf_remove(&self.small, slot)
            self._drop_slot(slot)
        else:
            PartialNodeRandomCompute.remove(self, slot)

    # ---- tests ----

    def queue(self) -> dict:
        """The small FIFO's ids oldest first with their freq, and the ghost's ids oldest first."""
        ids = [self.slot_id(s) for s in reversed(sf_slots(&self.small))]
        freq = {self.slot_id(s): self.freq[s] for s in sf_slots(&self.small)}
        return {"small": ids, "freq": freq, "ghost": list(reversed(gr_ids(&self.ghost)))}


def make(capacity: int, params: dict) -> PartialNodeRandomComputeSmallQueue:
    name = "partial_node_random_compute_small_queue"
    small = float(params["small-size-ratio"])
    ghost = float(params["ghost-size-ratio"])
    threshold = int(params["move-to-main-threshold"])
    if not 0.0 < small < 1.0:
        raise ShadowError(f"policy {name}: small-size-ratio must be in (0, 1), got {small}")
    if not 0.0 <= ghost <= 4.0:
        raise ShadowError(f"policy {name}: ghost-size-ratio must be in [0, 4], got {ghost}")
    if not 1 <= threshold <= 255:
        raise ShadowError(f"policy {name}: move-to-main-threshold must be in [1, 255], got {threshold}")
    p = make_node_policy(PartialNodeRandomComputeSmallQueue, name, capacity, params)
    p.set_queue(small, ghost, threshold)
    return p
