# cython: language_level=3
"""belady_compute: a sampled, cost-aware Belady oracle (the PrefixSim fork's BeladyCompute).

Per resident block: ``next`` (the next-access vtime its last access carried, -1 never) and ``cost``
(llround cost of its last access); both are refreshed on every hit and set on insert.

Eviction draws ``n-sample`` resident blocks uniformly with replacement (splitmix64, ``seed``) and
evicts the one of **highest** score

* ``+inf`` if the block is never reused (``next == -1``);
* ``-DBL_MAX / 2`` if ``next <= now`` (a stale annotation: its next access has passed);
* ``ln(next - now) - ln(max(cost, 1))`` otherwise, i.e. far-away and cheap goes first;

ties go to the first drawn.  ``now`` is the eviction's ``vtime`` (gets so far).  ``evict_n`` takes
the ``evict-batch`` best distinct candidates of one sample before drawing again.

Pins: honoured, as random_compute (pinned draws are redrawn; best effort if all are pinned).

Memory: base 22 B/slot + pin bitmap 1/8 + dense set 8 + next 8 + cost 4 = 42 B/slot.  NOTE: the cost is kept as
``max(cost, 1)`` in 32 bits (the score reads nothing else of it); the first cost past 2**31 - 1
switches to a 64-bit array for good (+4 B/slot), so no decision changes.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t, INT32_MAX
from libc.stdlib cimport malloc, free
from libc.math cimport log, exp, INFINITY
from libc.float cimport DBL_MAX

from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.policies.cost_aware.random_compute cimport SampledPolicy, dense_add, pick_push

from shadow.sim.policies.cost_aware.random_compute import check_sampling_params
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="sampled oracle: evict the farthest next access per unit of cost (PrefixSim fork)",
    family="oracle",
    defaults="n-sample=128,evict-batch=8,seed=1",
    needs_future=True,
    deterministic=False,
    weight=3.0,
    reference_params="evict-batch=1",
)


cdef enum:
    PF_COST_MIN = 1 << 16       # slots from which a draw prefetches the cost (256 KiB of costs)


cdef class BeladyCompute(SampledPolicy):
    """See the module docstring."""
    cdef int64_t* next_acc
    cdef int32_t* cost32        # max(cost, 1) per slot while every cost fits 32 bits
    cdef int64_t* cost64        # NULL until a cost past INT32_MAX arrives; then the only one

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.next_acc = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.cost32 = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.cost64 = NULL
        if self.next_acc == NULL or self.cost32 == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.pf_base = <const char*>self.next_acc
        self.pf_stride = sizeof(int64_t)
        # NOTE: a draw whose next access is ahead reads its cost as well: load both at the draw,
        # in a cache past L2 only (at 8k slots the costs stay in L2 and the hint costs more than
        # it hides).
        if capacity >= PF_COST_MIN:
            self.pf2_base = <const char*>self.cost32
            self.pf2_stride = sizeof(int32_t)

    def __dealloc__(self):
        free(self.next_acc)
        free(self.cost32)
        free(self.cost64)

    cdef inline int64_t _cost(self, int64_t slot) noexcept nogil:
        if self.cost64 != NULL:
            return self.cost64[slot]
        return self.cost32[slot]

    cdef inline void _set_cost(self, int64_t slot, int64_t c) noexcept nogil:
        if c < 1:
            c = 1
        if self.cost64 != NULL:
            self.cost64[slot] = c
        elif c <= INT32_MAX:
            self.cost32[slot] = <int32_t>c
        else:
            self._widen()
            if self.cost64 != NULL:
                self.cost64[slot] = c
            else:
                self.cost32[slot] = INT32_MAX

    cdef void _widen(self) noexcept nogil:
        """Move the costs to 64 bits (once).  NOTE: if that allocation fails the costs saturate
        at INT32_MAX instead (nothing here may raise) and ``nomem`` fails the cache."""
        cdef int64_t i
        cdef int64_t* c64 = <int64_t*>malloc(max(self.capacity, 1) * sizeof(int64_t))
        if c64 == NULL:
            self.nomem = 1
            return
        for i in range(self.capacity):
            c64[i] = self.cost32[i]
        self.cost64 = c64
        if self.pf2_base != NULL:
            self.pf2_base = <const char*>self.cost64
            self.pf2_stride = sizeof(int64_t)
        free(self.cost32)
        self.cost32 = NULL

    def cost_bits(self) -> int:
        """32 or 64: the width the costs are kept in (tests)."""
        return 64 if self.cost64 != NULL else 32

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        # NOTE: SampledPolicy evicts the lowest score, so this is the negated BeladyCompute score
        # (negation is exact, so the order and the ties are those of the original).
        cdef int64_t nxt = self.next_acc[slot]
        cdef int64_t c = self._cost(slot)
        if nxt < 0:
            return -INFINITY
        if nxt <= now:
            return DBL_MAX / 2
        if c < 1:
            c = 1
        return -(log(<double>(nxt - now)) - log(<double>c))

    cdef int64_t _pick(self, int64_t now, int64_t b) noexcept nogil:
        """``pick_best`` over ``_score``, taking the two ``log`` only for a draw that may enter the
        ``b`` best kept so far."""
        cdef int64_t nc = self._draw_slots(), i, m = 0, nxt, c
        cdef int32_t s
        cdef double sc, thr = 0.0, lim = 0.0
        cdef int32_t* out = self.best
        cdef double* out_score = self.best_score
        for i in range(nc):
            s = self.cand[i]
            nxt = self.next_acc[s]
            if nxt < 0:
                sc = -INFINITY
            elif nxt <= now:
                sc = DBL_MAX / 2
            else:
                c = self._cost(s)
                if c < 1:
                    c = 1
                if m == b:
                    if out_score[m - 1] != thr:
                        # NOTE: the b-th kept score changed: ratio form of the threshold.
                        # -(ln(a) - ln(c)) >= thr iff a / c <= exp(-thr); lim is shaved by 1e-9,
                        # far above the few ulps of rounding in the logs, so a draw skipped here
                        # is one pick_push would skip.  thr = -inf skips everything (so does
                        # pick_push); thr = DBL_MAX / 2 gives lim = 0 (nothing skipped).
                        thr = out_score[m - 1]
                        lim = exp(-thr) * (1.0 - 1e-9)
                    if <double>(nxt - now) <= lim * <double>c:
                        continue
                sc = -(log(<double>(nxt - now)) - log(<double>c))
            m = pick_push(out, out_score, m, b, s, sc)
        return m

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.next_acc[slot] = acc.next_access
        self._set_cost(slot, acc.cost)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self.next_acc[slot] = acc.next_access
        self._set_cost(slot, acc.cost)
        dense_add(&self.dense, slot)
        return slot


def make(capacity: int, params: dict) -> BeladyCompute:
    check_sampling_params("belady_compute", params)
    return BeladyCompute(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                         int(params["seed"]))
