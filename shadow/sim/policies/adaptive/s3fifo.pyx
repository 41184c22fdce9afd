# cython: language_level=3
"""S3-FIFO (libCacheSim 0.3.5 ``S3FIFO.c``): a small FIFO, a main FIFO with reinsertion, a ghost FIFO.

Sizes are truncated as libCacheSim does: ``small = int(C * small-size-ratio)`` (at least 1 here;
libCacheSim refuses such tiny caches), ``main = C - small``, ``ghost = int(C * ghost-size-ratio)``.

* insert: an id in the ghost leaves it and goes to main's head; before the first eviction a full
  small queue sends new ids to main; otherwise to small's head.  freq starts at 0.
* hit: ``freq += 1`` (saturating at 255; libCacheSim only ever uses ``min(freq, 3)`` and the
  threshold).
* evict: main if it is over its size or small is empty, else small.  Small's tail with
  ``freq >= move-to-main-threshold`` moves to main's head (freq 0); the first tail below the
  threshold leaves into the ghost.  Main's tail with ``freq >= 1`` is reinserted at the head with
  ``min(freq, 3) - 1``; the first tail with freq 0 leaves.  One call evicts exactly one block
  (libCacheSim's ``get`` loops over ``evict`` until a block leaves; this does it inside).

Pins: honoured.  A pinned block is still promoted/reinserted as it would be unpinned but is never
the victim while an unpinned candidate exists: the walk passes it; a queue with only pinned
candidates sends the eviction to the other queue; only if both have none is the plain tail taken.

Memory: base 22 B/slot (18 from 32k slots: ``TABLE_PER_SLOT``) + ring positions 4 + the two slot rings (4 B x 1.25 per queued slot, about
5) + freq/queue 2 B/slot + the ghost ring (4 B x 1.25 in the ring + 4 B x 2 in its table = 13 B per
ghost entry, 37 B below 32k ghost ids, 5 B more once an id past 2**31 - 1 has been pushed;
``ghost-size-ratio`` of C); measured empty and full: docs/performance.md, "Memory per slot".
"""

from libc.stdint cimport int64_t, int32_t, uint8_t
from libc.stdlib cimport malloc, calloc, free

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access
from libc.string cimport memset
from shadow.sim.policies._shared.ghost cimport gr_init, gr_free, gr_ids, sf_init, sf_free, sf_slots
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="S3-FIFO: small FIFO, main FIFO with reinsertion, ghost FIFO (libCacheSim S3FIFO)",
    family="adaptive",
    defaults="small-size-ratio=0.10,ghost-size-ratio=0.90,move-to-main-threshold=2",
    weight=1.8,
    libcachesim="S3FIFO",
)


# ---- S3FIFO ----------------------------------------------------------------------------------

cdef class S3FIFO(Policy):
    """See the module docstring.  ``small``/``main`` share one pair of link arrays.

    The operations are the inline ``fast_*`` methods of s3fifo.pxd.
    """
    TABLE_PER_SLOT = 3    # NOTE: resident table 12 B/slot from 32k slots (budget: see Memory)

    def __cinit__(self, int64_t capacity, double small_ratio=0.10, double ghost_ratio=0.90,
                  int64_t threshold=2, *args, **kwargs):
        self.small_size = <int64_t>(capacity * small_ratio)
        if self.small_size < 1:
            self.small_size = 1
        self.main_size = capacity - self.small_size
        self.ghost_size = <int64_t>(capacity * ghost_ratio)
        self.threshold = threshold
        self.has_evicted = False
        self.freq = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        self.in_main = <uint8_t*>calloc(capacity, sizeof(uint8_t))
        self.qpos = <int32_t*>malloc(max(capacity, 1) * sizeof(int32_t))
        if self.freq == NULL or self.in_main == NULL or self.qpos == NULL:
            raise MemoryError(f"cannot allocate an S3FIFO cache of {capacity} slots")
        memset(self.qpos, 0xFF, max(capacity, 1) * sizeof(int32_t))
        sf_init(&self.small, self.small_size, self.qpos, &self.nomem)
        sf_init(&self.main, self.main_size, self.qpos, &self.nomem)
        gr_init(&self.ghost, self.ghost_size, &self.nomem)

    def __dealloc__(self):
        sf_free(&self.small)
        sf_free(&self.main)
        free(self.qpos)
        free(self.freq)
        free(self.in_main)
        gr_free(&self.ghost)

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.fast_hit(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        return self.fast_insert(acc.block_id)

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        return self.fast_evict()

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.in_main[slot]:
            sf_remove(&self.main, slot)
        else:
            sf_remove(&self.small, slot)
        self._drop_slot(slot)

    # ---- Python-level views (tests) ----

    def queues(self) -> dict[str, list[int]]:
        """Ids per queue from the head (newest) to the tail (next candidate); freq per resident id."""
        out = {"small": [], "main": [], "ghost": [], "freq": {}}
        for name, slots in (("small", sf_slots(&self.small)), ("main", sf_slots(&self.main))):
            for s in slots:
                out[name].append(self.slot_id(s))
                out["freq"][self.slot_id(s)] = self.freq[s]
        out["ghost"] = gr_ids(&self.ghost)
        return out


def make(capacity: int, params: dict) -> S3FIFO:
    small = float(params.get("small-size-ratio", 0.10))
    ghost = float(params.get("ghost-size-ratio", 0.90))
    threshold = int(params.get("move-to-main-threshold", 2))
    if not 0.0 < small < 1.0:
        raise ShadowError(f"policy s3fifo: small-size-ratio must be in (0, 1), got {small}")
    if not 0.0 <= ghost <= 4.0:
        raise ShadowError(f"policy s3fifo: ghost-size-ratio must be in [0, 4], got {ghost}")
    if not 1 <= threshold <= 255:
        raise ShadowError(f"policy s3fifo: move-to-main-threshold must be in [1, 255], got {threshold}")
    return S3FIFO(capacity, small, ghost, threshold)
