# cython: language_level=3
"""random_compute_small_queue: random_compute behind a small FIFO admission queue.

The notes give only the name (random_compute with a small admission queue), so this project
defines it, S3-FIFO style with a threshold of one re-access and no ghost:

* an inserted block enters the **small** FIFO (its random_compute statistics start as usual);
* a hit on a block in the small FIFO promotes it to **main**, the random_compute population;
  hits in main update the statistics only;
* eviction takes the small FIFO's oldest block while the small FIFO holds more than
  ``int(small-size-ratio * capacity)`` blocks (or main is empty), otherwise it samples main
  exactly like random_compute (``n-sample`` draws, ``evict-batch`` victims per sample).

So one-touch blocks (a request's private tail that is never reused) leave first, and main is kept
for blocks that proved reuse, ranked by decayed frequency x cost / age.

Pins: honoured.  The small FIFO is walked from its oldest end past pinned blocks; if all of it is
pinned, main is sampled (pinned draws redrawn, as random_compute); best effort only when every
block of the population in question is pinned.

Memory: random_compute's 72 B/slot + small FIFO links 8 = 80 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t

from shadow.errors import ShadowError
from shadow.sim.policy cimport Policy, Access
from shadow.sim.policies.random_compute cimport RandomCompute, dense_add, dense_del
from shadow.sim.policies._dlist cimport DList, dl_init, dl_free, dl_push_head, dl_unlink

from shadow.sim.policies.random_compute import check_sampling_params

DEFAULTS = "n-sample=128,evict-batch=8,small-size-ratio=0.10,timestamp=request,seed=1"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "random_compute over blocks that passed a small FIFO admission queue"


cdef class RandomComputeSmallQueue(RandomCompute):
    """See the module docstring.  Invariant: a resident slot is in exactly one of ``small`` (then
    ``dense.pos[slot] == -1``) and ``dense`` (main)."""
    cdef DList small
    cdef readonly int64_t small_target

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, bint per_request=True, double small_ratio=0.1, *args, **kwargs):
        dl_init(&self.small, capacity)
        self.small_target = <int64_t>(capacity * small_ratio)

    def __dealloc__(self):
        dl_free(&self.small)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._touch(slot, acc)
        if self.dense.pos[slot] < 0:
            dl_unlink(&self.small, slot)
            dense_add(&self.dense, slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._init_stats(slot, acc)
        dl_push_head(&self.small, slot)
        return slot

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, got
        cdef int32_t s
        while k < n:
            if self.small.n > self.small_target or self.dense.n == 0:
                s = self.small.tail
                while s >= 0 and self.pins[s] > 0:
                    s = self.small.prev[s]
                if s < 0 and self.dense.n == 0:
                    s = self.small.tail      # NOTE: everything is pinned: best effort
                if s >= 0:
                    dl_unlink(&self.small, s)
                    out[k] = self._drop_slot(s)
                    k += 1
                    continue
            got = self._sample_evict(acc, n - k, out + k)
            if got == 0:
                break
            k += got
        return k

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.dense.pos[slot] >= 0:
            dense_del(&self.dense, slot, False)
        else:
            dl_unlink(&self.small, slot)
        self._drop_slot(slot)

    def small_ids(self) -> list[int]:
        """Ids in the small FIFO, newest first (tests)."""
        out = []
        cdef int32_t s = self.small.head
        while s >= 0:
            out.append(self.slot_ids[s])
            s = self.small.next[s]
        return out


def make(capacity: int, params: dict) -> RandomComputeSmallQueue:
    check_sampling_params("random_compute_small_queue", params)
    ratio = float(params["small-size-ratio"])
    if not 0.0 <= ratio <= 1.0:
        raise ShadowError(f"policy random_compute_small_queue: small-size-ratio must be in [0, 1], got {ratio}")
    return RandomComputeSmallQueue(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                                   int(params["seed"]), params["timestamp"] == "request", ratio)
