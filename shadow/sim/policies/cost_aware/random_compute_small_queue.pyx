# cython: language_level=3
"""random_compute_small_queue: random_compute behind a small FIFO admission queue with a ghost.

The notes give only the name (random_compute with a small admission queue), so this project
defines it, S3-FIFO style with a threshold of one re-access:

* an inserted block enters the **small** FIFO (its random_compute statistics start as usual),
  unless its id is in the **ghost** FIFO: then it leaves the ghost and goes straight to **main**,
  the random_compute population;
* a hit on a block in the small FIFO promotes it to main; hits in main update the statistics only;
* eviction takes the small FIFO's oldest block while the small FIFO holds more than
  ``int(small-size-ratio * capacity)`` blocks (or main is empty), and its id enters the ghost
  (the ghost's oldest id leaves first when it holds ``int(ghost-size-ratio * capacity)`` ids);
  otherwise it samples main exactly like random_compute (``n-sample`` draws, ``evict-batch``
  victims per sample).  Main's victims leave no ghost.

So one-touch blocks (a request's private tail that is never reused) leave first, and a block that
comes back after leaving the small FIFO (the next turn of a conversation, usually later than the
small FIFO's span) is admitted to main on its second life.  ``ghost-size-ratio=0`` is the former
ghost-less policy.

Pins: honoured.  The small FIFO is walked from its oldest end past pinned blocks; if all of it is
pinned, main is sampled (pinned draws redrawn, as random_compute) for at most as many victims as it
has unpinned blocks, and small gives the rest; best effort only when every block is pinned.

Memory: random_compute's 42 B/slot + the small FIFO (a slot ring, 5 B per queued slot; its ring
positions share the sampling set's ``pos`` array), plus the ghost (a ghost ring, 13 B per ghost
entry, 18 once an id past 2**31 - 1 has been pushed): above the 48 B budget with the ghost full at
the default ratio 0.9 (measured empty and full: docs/performance.md, "Memory per slot").
"""

from libc.stdint cimport int64_t, int32_t, uint64_t, INT32_MIN

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access, RequestCtx
from shadow.sim.policies.cost_aware.random_compute cimport RandomCompute, dense_add, dense_del
from shadow.sim.core.idtable cimport SHADOW_PREFETCH, sids_addr
from shadow.sim.policies._shared.ghost cimport (GhostRing, gr_init, gr_free, gr_find, gr_remove,
                                         gr_push_bounded, gr_ids, gr_prefetch, SlotFIFO, sf_init,
                                         sf_free, sf_push, sf_remove, sf_remove_at, sf_tail,
                                         sf_next_pos, sf_ahead, sf_slots)


cdef enum:
    PF_NEAR = 2     # small-FIFO evictions ahead whose table entries are prefetched
    PF_FAR = 8      # small-FIFO evictions ahead whose per-slot data are prefetched

from shadow.sim.policies.cost_aware.random_compute import check_sampling_params
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="random_compute over blocks that passed a small FIFO admission queue (with a ghost)",
    family="cost-aware",
    defaults="n-sample=128,evict-batch=8,small-size-ratio=0.10,ghost-size-ratio=0.90,timestamp=request,seed=1",
    deterministic=False,
    weight=2.0,
    reference_params="evict-batch=1",
)


cdef class RandomComputeSmallQueue(RandomCompute):
    """See the module docstring.  Invariant: a resident slot is in exactly one of ``small`` (then
    ``dense.pos[slot]`` is its ring position ^ INT32_MIN, below -1) and ``dense`` (main: its
    index, >= 0); a free slot has ``dense.pos[slot] == -1``; a ghost id is never resident."""
    cdef SlotFIFO small          # its positions: in dense.pos, stored as position ^ INT32_MIN
    cdef readonly int64_t small_target
    cdef GhostRing ghost
    cdef readonly int64_t ghost_size

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, bint per_request=True, double small_ratio=0.1,
                  double ghost_ratio=0.9, *args, **kwargs):
        self.small_target = <int64_t>(capacity * small_ratio)
        # NOTE: small's ring positions live in the sampling set's ``pos`` (negative there: see
        # SlotFIFO's ``pxor``), not in an array of their own: 4 B/slot saved.
        sf_init(&self.small, self.small_target, self.dense.pos, &self.nomem, INT32_MIN)
        self.ghost_size = <int64_t>(capacity * ghost_ratio)
        gr_init(&self.ghost, self.ghost_size, &self.nomem)

    def __dealloc__(self):
        sf_free(&self.small)
        gr_free(&self.ghost)

    cdef void _ghost_add(self, int64_t block_id) noexcept nogil:
        gr_push_bounded(&self.ghost, block_id)

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        """Prefetch the ghost table entries the request's inserts will probe (its misses)."""
        cdef int64_t i
        # NOTE: the serve loop prefetches the resident table only; the ghost probe of each
        # miss is a cache miss of its own at large sizes unless it is started here.
        if self.ghost.limit > 0:
            for i in range(ctx.n_blocks):
                gr_prefetch(&self.ghost, ctx.block_ids[i])

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._touch(slot, acc)
        if self.dense.pos[slot] < 0:
            sf_remove(&self.small, slot)
            dense_add(&self.dense, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t pos = gr_find(&self.ghost, acc.block_id)
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._init_stats(slot, acc)
        if pos >= 0:
            # NOTE: back after leaving the small FIFO: reuse proven, admitted to main directly.
            gr_remove(&self.ghost, pos)
            dense_add(&self.dense, slot)
        else:
            sf_push(&self.small, slot)
        return slot

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, got, want, unpinned_main, p
        cdef int32_t s
        cdef bint from_small
        while k < n:
            want = n - k
            from_small = self.small.n > self.small_target or self.dense.n == 0
            if not from_small and self.n_pinned + want > self.dense.n:
                # NOTE: main may hold fewer unpinned blocks than wanted (only then is small
                # walked): take no more than those from main, and go to small when main has none.
                unpinned_main = self._unpinned_main()
                if unpinned_main == 0:
                    from_small = True
                elif want > unpinned_main:
                    want = unpinned_main
            if from_small:
                p = self.small.tail if self.small.n > 0 else -1
                while p >= 0 and self.pins[self.small.q[p]] > 0:
                    p = sf_next_pos(&self.small, p)
                if p < 0 and self.dense.n == 0 and self.small.n > 0:
                    p = self.small.tail      # NOTE: everything is pinned: best effort
                if p >= 0:
                    s = self.small.q[p]
                    sf_remove_at(&self.small, p, s)
                    out[k] = self._drop_slot(s)
                    self._ghost_add(out[k])
                    k += 1
                    # NOTE: the next victims are small's oldest blocks: load the per-slot data
                    # of the one PF_FAR ahead and the table entries (resident delete, ghost
                    # insert) of the one PF_NEAR ahead, whose id the earlier prefetch loaded.
                    s = sf_ahead(&self.small, PF_FAR)
                    if s >= 0:
                        SHADOW_PREFETCH(sids_addr(&self.slot_ids, s))
                        SHADOW_PREFETCH(&self.pins[s])
                    s = sf_ahead(&self.small, PF_NEAR)
                    if s >= 0:
                        self.prefetch(self.slot_id(s))
                        gr_prefetch(&self.ghost, self.slot_id(s))
                    continue
            got = self._sample_evict(acc, want, out + k)
            if got == 0:
                break
            k += got
        return k

    cdef int64_t _unpinned_main(self) noexcept nogil:
        """Unpinned blocks in main: all pinned blocks not in small are in main."""
        cdef int64_t p = self.small.tail if self.small.n > 0 else -1
        cdef int64_t pinned_small = 0
        while p >= 0:
            if self.pins[self.small.q[p]] > 0:
                pinned_small += 1
            p = sf_next_pos(&self.small, p)
        return self.dense.n - (self.n_pinned - pinned_small)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.dense.pos[slot] >= 0:
            dense_del(&self.dense, slot, False)
        else:
            sf_remove(&self.small, slot)
        self._drop_slot(slot)

    def small_ids(self) -> list[int]:
        """Ids in the small FIFO, newest first (tests)."""
        return [self.slot_id(s) for s in sf_slots(&self.small)]

    def ghost_ids(self) -> list[int]:
        """Ids in the ghost FIFO, newest first (tests)."""
        return gr_ids(&self.ghost)


def make(capacity: int, params: dict) -> RandomComputeSmallQueue:
    check_sampling_params("random_compute_small_queue", params)
    ratio = float(params["small-size-ratio"])
    if not 0.0 <= ratio <= 1.0:
        raise ShadowError(f"policy random_compute_small_queue: small-size-ratio must be in [0, 1], got {ratio}")
    ghost = float(params["ghost-size-ratio"])
    if not 0.0 <= ghost <= 4.0:
        raise ShadowError(f"policy random_compute_small_queue: ghost-size-ratio must be in [0, 4], got {ghost}")
    return RandomComputeSmallQueue(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                                   int(params["seed"]), params["timestamp"] == "request", ratio,
                                   ghost)
