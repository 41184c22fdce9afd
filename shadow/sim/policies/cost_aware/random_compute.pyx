# cython: language_level=3
"""random_compute: sampled eviction by decayed frequency x cost / age (the PrefixSim fork's RandomCompute).

Per resident block: ``last`` (stamp of its last access), ``freq`` (decayed access count) and
``cost`` (llround cost of its last access).  An insert sets ``freq = 1`` and ``last = stamp``; a hit
with ``d = stamp - last > 0`` sets ``freq = freq * exp(-d / 20000) + 1``, otherwise ``freq += 1``,
then ``last = stamp``.  The stamp is the request's ``req_vtime`` (``timestamp=request``, the PrefixSim
article's per-request stamp) or the get's ``vtime`` (``timestamp=access``, per-block as in the older build).

Eviction draws ``n-sample`` resident blocks uniformly with replacement (splitmix64, ``seed``) and
evicts the one of lowest ``cost * freq * exp(-r / 20000) / r`` with ``r = max(1, now - last)``;
ties go to the first drawn.  ``evict_n`` takes the ``evict-batch`` lowest distinct candidates of
one sample before drawing again (``evict-batch=1`` is the one-victim-per-sample behaviour).

Pins: honoured.  Draws that land on a pinned block are discarded and redrawn (at most
``4 * n-sample`` draws per sample); if none of them is unpinned the population is scanned in
order for unpinned blocks, and only if every block is pinned is a pinned one taken (best effort).

Memory: base 22 B/slot + pin bitmap 1/8 + dense set 8 + one 16-byte record (last 4, cost 4,
freq 8) = 46 B/slot; from 32k slots the resident table keeps 3 entries a slot instead of 4
(``TABLE_PER_SLOT``): 42 B/slot (measured: docs/performance.md, "Memory per slot").
NOTE: the record is all a draw or a hit reads; the score's numerator ``cost * freq`` is computed at
the draw (the same double product a touch used to store).  ``last`` is kept as ``stamp - epoch`` in
32 bits: a stamp 2**31 past the epoch moves it and clamps the older stamps, without changing a
decision (see ``_rel_slow``).  ``cost`` is kept in 32 bits; the first cost outside int32 moves every
cost to a 64-bit array for good (+8 B/slot), as belady_compute does, so no score ever sees a clipped
cost.

Speed (same draws and decisions): a sample's draws are scored with a cheap lower bound of the
score first; the ``exp`` is taken only for a draw that may enter the ``evict-batch`` kept so far.
A large cache is bound by the random loads of the draws (128 a sample, each ``items[index]``, its
pin state and its score record): the pin state is read from a bitmap that stays in L2 (not from
``pins``), and skipped when nothing is pinned; the record a draw reads is 16 B and 64 B aligned,
one cache line; large arrays are on huge pages.
"""

from libc.stdint cimport int64_t, int32_t, uint16_t, uint32_t, uint64_t, INT32_MIN, INT32_MAX
from libc.stdlib cimport malloc, free

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)
from libc.math cimport exp

from shadow.errors import ShadowError
from shadow.sim.core.policy cimport Policy, Access
from shadow.sim.core.idtable cimport slotmap_prefetch, sids_addr, shadow_big_malloc, shadow_big_bytes
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="sampled eviction of the lowest decayed-frequency x cost / age (PrefixSim fork)",
    family="cost-aware",
    defaults="n-sample=128,evict-batch=8,timestamp=request,seed=1",
    deterministic=False,
    weight=6.0,
    reference_params="evict-batch=1",
)

cdef double DECAY = 20000.0
cdef double LOG2E_PER_AGE = 1.4426950408889634 / 20000.0     # exp(-r / DECAY) = 2**(-r LOG2E_PER_AGE)


cdef int dense_init(Dense* d, int64_t cap, bint full_permutation) except -1:
    cdef int64_t i
    # NOTE: huge pages for a large set (see core/idtable.pxd): a draw reads ``items`` at random.
    d.items = <int32_t*>shadow_big_malloc(max(cap, 1) * sizeof(int32_t))
    d.pos = <int32_t*>shadow_big_malloc(max(cap, 1) * sizeof(int32_t))
    if d.items == NULL or d.pos == NULL:
        free(d.items)
        free(d.pos)
        d.items = NULL
        d.pos = NULL
        raise MemoryError(f"cannot allocate a sampling set of {cap} items")
    for i in range(cap):
        d.items[i] = <int32_t>i if full_permutation else -1
        d.pos[i] = <int32_t>i if full_permutation else -1
    d.n = 0
    d.cap = cap
    return 0


cdef void dense_free(Dense* d) noexcept nogil:
    free(d.items)
    free(d.pos)
    d.items = NULL
    d.pos = NULL


cdef int64_t pick_best(const int32_t* cand, const double* score, int64_t n, int64_t b,
                       int32_t* out, double* out_score) noexcept nogil:
    """Write the up to ``b`` distinct slots of lowest score (ties: earlier draw first) to ``out``,
    in ascending order; return how many."""
    cdef int64_t i, m = 0
    for i in range(n):
        m = pick_push(out, out_score, m, b, cand[i], score[i])
    return m


cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil


cdef union F64Bits:
    uint64_t u
    double d


cdef inline double exp2_neg_below(double y) noexcept nogil:
    """A cheap lower bound of ``2**-y`` for ``y >= 0``: at most 6% low, never high (0.0 far out).

    Writing ``1023 - y`` scaled by ``2**52`` into a double's bits gives the chord of ``2**-y``
    between its integer neighbours, which is convex: the chord is above it by a factor of at
    most 1.0612 (at 0.557 past an integer), so 0.942 times the chord is below it; the margin
    (3e-4) is far above the rounding of ``y`` and of the conversion.
    """
    cdef F64Bits p
    if not (y < 1000.0):
        return 0.0
    p.u = <uint64_t>((1023.0 - y) * 4503599627370496.0)
    return p.d * 0.942


cdef class SampledPolicy(Policy):
    """See random_compute.pxd."""

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, *args, **kwargs):
        if n_sample < 1 or n_sample > (1 << 30):
            raise ShadowError(f"n-sample must be in 1..2**30, got {n_sample}")
        if evict_batch < 1 or evict_batch > (1 << 30):
            raise ShadowError(f"evict-batch must be in 1..2**30, got {evict_batch}")
        self.n_sample = n_sample
        self.evict_batch = evict_batch
        self.rng = seed
        dense_init(&self.dense, capacity, False)
        self._want_pinbits()
        self.cand = <int32_t*>malloc(n_sample * sizeof(int32_t))
        self.cand_score = <double*>malloc(n_sample * sizeof(double))
        self.best = <int32_t*>malloc(evict_batch * sizeof(int32_t))
        self.best_score = <double*>malloc(evict_batch * sizeof(double))
        if self.cand == NULL or self.cand_score == NULL or self.best == NULL or self.best_score == NULL:
            raise MemoryError("cannot allocate the sampling buffers")

    def __dealloc__(self):
        dense_free(&self.dense)
        free(self.cand)
        free(self.cand_score)
        free(self.best)
        free(self.best_score)

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        return 0.0

    cdef int64_t _draw_slots(self) noexcept nogil:
        """Fill ``cand`` with one sample of slots; return its size (0 only if empty).

        NOTE: the draws go in rounds of two passes: the first makes a round's draw indices (the
        rng alone) and starts loading their ``items`` entries; the second reads them, tests the
        pins and starts loading the score inputs.  At production sizes every ``items`` read is a
        cache miss, and in one pass each waited behind the rng and pin work of the draws before
        it.  Same draws and decisions: a round makes as many attempts as draws are still missing
        (so it never makes one the one-pass loop would not), in the same order; the indices wait
        in the part of ``cand`` not filled yet (the draw at ``cand[nc0 + j]`` is read before any
        accepted draw is written at ``cand[nc]``, ``nc <= nc0 + j``).
        """
        cdef int64_t nc = 0, attempts = 0, limit = 4 * self.n_sample, n_sample = self.n_sample, i
        cdef int64_t s, j, k, nc0
        cdef Dense* d = &self.dense
        cdef int32_t* cand = self.cand
        cdef const int32_t* items = d.items
        cdef uint64_t n_items = <uint64_t>d.n
        cdef const uint16_t* pins = self.pins
        cdef const uint64_t* pinbits = self.pinbits
        cdef uint64_t rng = self.rng
        cdef const char* pf_base = self.pf_base
        cdef int64_t pf_stride = self.pf_stride
        cdef const char* pf2_base = self.pf2_base
        cdef int64_t pf2_stride = self.pf2_stride
        if d.n == 0:
            return 0
        # NOTE: the rng state lives in a local so that the loops keep it in a register.
        while nc < n_sample and attempts < limit:
            nc0 = nc
            k = min(n_sample - nc, limit - attempts)
            for j in range(k):
                i = <int64_t>(((rng_next(&rng) >> 32) * n_items) >> 32)
                cand[nc0 + j] = <int32_t>i
                __builtin_prefetch(&items[i])
            attempts += k
            if self.n_pinned == 0:
                # NOTE: nothing is pinned (a request with no hit, or pins off): no draw is
                # discarded and ``pins`` (a random load per draw) need not be read.
                for j in range(k):
                    s = items[cand[nc0 + j]]
                    cand[nc0 + j] = <int32_t>s
                    if pf_base != NULL:
                        __builtin_prefetch(pf_base + s * pf_stride)
                    if pf2_base != NULL:
                        __builtin_prefetch(pf2_base + s * pf2_stride)
                nc = nc0 + k
                continue
            for j in range(k):
                s = items[cand[nc0 + j]]
                # NOTE: the pin bitmap, not ``pins``: 64 KiB at 512k slots, in L2 (pins: 1 MiB).
                if (pinbits[s >> 6] >> (s & 63)) & 1:
                    continue
                cand[nc] = <int32_t>s
                nc += 1
                if pf_base != NULL:
                    # NOTE: the draws are independent: start loading the score inputs now so
                    # that the loads overlap instead of each waiting in the scoring loop.
                    __builtin_prefetch(pf_base + s * pf_stride)
                if pf2_base != NULL:
                    __builtin_prefetch(pf2_base + s * pf2_stride)
        self.rng = rng
        if nc == 0:
            # NOTE: every draw was pinned: look for unpinned blocks in population order, and only
            # if there are none take pinned ones (best effort; the loop never needs this unpinned).
            for i in range(d.n):
                s = d.items[i]
                if pins[s] == 0:
                    cand[nc] = <int32_t>s
                    nc += 1
                    if nc == n_sample:
                        break
        if nc == 0:
            for i in range(min(d.n, n_sample)):
                cand[nc] = d.items[i]
                nc += 1
        return nc

    cdef int64_t _draw(self, int64_t now) noexcept nogil:
        """Fill ``cand``/``cand_score`` with one sample; return its size (0 only if empty)."""
        cdef int64_t nc = self._draw_slots(), i
        for i in range(nc):
            self.cand_score[i] = self._score(self.cand[i], now)
        return nc

    cdef int64_t _pick(self, int64_t now, int64_t b) noexcept nogil:
        """Draw one sample and keep its up to ``b`` best in ``best``/``best_score``; return how
        many.  A subclass may fuse scoring and picking, with the same result."""
        cdef int64_t nc = self._draw(now)
        return pick_best(self.cand, self.cand_score, nc, b, self.best, self.best_score)

    cdef int64_t _sample_evict(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        """Evict up to ``n`` blocks of the population, ``evict_batch`` per sample."""
        cdef int64_t k = 0, got, i, s
        while k < n and self.dense.n > 0:
            got = self._pick(acc.vtime, min(n - k, self.evict_batch))
            # NOTE: the victims are known at once: load their ids together, then prefetch the base
            # table entries those ids hash to, so that the drops below do not each wait in turn.
            for i in range(got):
                __builtin_prefetch(sids_addr(&self.slot_ids, self.best[i]))
                __builtin_prefetch(&self.dense.pos[self.best[i]])
            for i in range(got):
                slotmap_prefetch(&self.table, self.slot_id(self.best[i]))
            for i in range(got):
                s = self.best[i]
                dense_del(&self.dense, s, False)
                out[k] = self._drop_slot(s)
                k += 1
        return k

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t victim = 0
        if self.evict_n(acc, 1, &victim) == 1:
            return victim
        return 0

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        return self._sample_evict(acc, n, out)

    cdef void remove(self, int64_t slot) noexcept nogil:
        if self.dense.pos[slot] >= 0:
            dense_del(&self.dense, slot, False)
        self._drop_slot(slot)

    def population(self) -> list[int]:
        """Ids of the sampling population in draw-index order (tests)."""
        cdef int64_t i
        return [self.slot_id(self.dense.items[i]) for i in range(self.dense.n)]


cdef enum:
    # NOTE: a stamp 2 * CLAMP_AGE (2**31: not an int, so not an enum) past the epoch moves the
    # epoch to the stamp less CLAMP_AGE; lasts older than the new epoch become it (see _rel_slow).
    CLAMP_AGE = 1 << 30


cdef inline double rc_num(const RCStat* st, const int64_t* cost64, int64_t slot) noexcept nogil:
    """The score's numerator ``<double>cost * freq`` of ``st`` (slot ``slot``'s record)."""
    # NOTE: the one product the touch stored as ``num`` before the record lost it (the access's
    # cost, converted to double, times the freq it had just set): same operands, same rounding.
    if cost64 != NULL:
        return <double>cost64[slot] * st.freq
    return <double>st.cost * st.freq


cdef class RandomCompute(SampledPolicy):
    """See the module docstring."""
    TABLE_PER_SLOT = 3    # NOTE: resident table 12 B/slot from 32k slots (budget: see Memory)

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, int64_t evict_batch=1,
                  uint64_t seed=1, bint per_request=True, *args, **kwargs):
        self.per_request = per_request
        # NOTE: a draw reads a whole 16-byte record, 64 B aligned so that none straddles a cache
        # line; a large array (2 MiB or more) gets huge pages (see core/idtable.pxd), as every draw
        # reads a record at random.
        cdef size_t nbytes = max(capacity, 1) * sizeof(RCStat)
        if shadow_big_bytes(nbytes) >= (<size_t>2 << 20):
            self.st = <RCStat*>shadow_big_malloc(nbytes)
        elif posix_memalign(<void**>&self.st, 64, nbytes) != 0:
            self.st = NULL
        if self.st == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        self.cost64 = NULL
        self.epoch = 0
        self.pf_base = <const char*>self.st
        self.pf_stride = sizeof(RCStat)

    def __dealloc__(self):
        free(self.st)
        free(self.cost64)

    cdef inline uint32_t _rel(self, int64_t stamp) noexcept nogil:
        """``stamp - epoch`` as stored in a record, moving the epoch first if it does not fit."""
        # NOTE: one unsigned test catches both a stamp past the span and one below the epoch.
        if <uint64_t>(stamp - self.epoch) >= 2 * <uint64_t>CLAMP_AGE:
            return self._rel_slow(stamp)
        return <uint32_t>(stamp - self.epoch)

    cdef uint32_t _rel_slow(self, int64_t stamp) noexcept nogil:
        """Move the epoch to ``stamp - CLAMP_AGE``, clamping every older ``last`` to it.

        NOTE: exact, not an approximation.  Let S be this stamp and L = 2**30 - 14_902_665
        (1.06e9).  The stamps never go back by more than L and a draw's ``now`` never lags the
        latest stamp by more than L (the simulator's stamps never go back, and its ``now`` lags
        by at most one request's blocks).  A clamped block's last is below S - 2**30, so at every
        later draw and hit its age, true or clamped (``t - (S - 2**30)``), is at least 14_902_665,
        from where exp(-age / 20000) is 0.0 in IEEE double (exp(-x) is 0 past x = 745.1332).  So
        with either age:

        * a draw scores ``num * 0.0 / r``: 0.0 (-0.0 for a negative cost; equal in every compare),
          the same ties;
        * the prefilter's bound ``exp2_neg_below(r * LOG2E_PER_AGE)`` is 0.0 (y >= 1000 from
          r = 13_862_944), so its test is ``0.0 * num >= thr * r`` with ``num >= 0`` finite, which
          depends on the sign of ``thr`` only: r >= 1 is finite, so ``thr * r`` is 0 only for a
          zero ``thr`` (it never underflows to 0) and keeps the sign of ``thr`` (overflow too);
        * a hit has d > 0 and sets ``freq = freq * 0.0 + 1.0 = 1.0``.

        Every stored value stays below 2**31.  The 2**24 the underflow alone needs would leave a
        lag of only 1.9e6; 2**30 costs a pass over the records every 2**30 stamps, not 2**31.
        A stamp below the epoch (back by more than 2**30, or negative: never from the simulator)
        is taken as the epoch.
        """
        cdef int64_t new_epoch, delta, i, a
        cdef RCStat* st = self.st
        if stamp < self.epoch:
            return 0
        new_epoch = stamp - CLAMP_AGE
        delta = new_epoch - self.epoch
        # NOTE: every slot, free ones too (harmless, an insert rewrites them): the small FIFO's
        # residents of random_compute_small_queue are not in ``dense``.
        for i in range(self.capacity):
            a = <int64_t>st[i].last - delta
            st[i].last = <uint32_t>a if a > 0 else 0
        self.epoch = new_epoch
        return <uint32_t>(stamp - new_epoch)

    cdef inline void _set_cost(self, int64_t slot, int64_t c) noexcept nogil:
        if self.cost64 != NULL:
            self.cost64[slot] = c
        elif INT32_MIN <= c <= INT32_MAX:
            self.st[slot].cost = <int32_t>c
        else:
            self._widen()
            if self.cost64 != NULL:
                self.cost64[slot] = c
            else:
                self.st[slot].cost = INT32_MAX if c > 0 else INT32_MIN

    cdef void _widen(self) noexcept nogil:
        """Move the costs to a 64-bit array for good (once), as belady_compute does.  NOTE: if that
        allocation fails the costs saturate at the int32 bounds instead (nothing here may raise)
        and ``nomem`` fails the cache."""
        cdef int64_t i
        cdef int64_t* c64 = <int64_t*>shadow_big_malloc(max(self.capacity, 1) * sizeof(int64_t))
        if c64 == NULL:
            self.nomem = 1
            return
        for i in range(self.capacity):
            c64[i] = self.st[i].cost
        self.cost64 = c64
        # NOTE: a draw now reads a second line (its cost): load it at the draw as well.
        self.pf2_base = <const char*>c64
        self.pf2_stride = sizeof(int64_t)

    def cost_bits(self) -> int:
        """32 or 64: the width the costs are kept in (tests)."""
        return 64 if self.cost64 != NULL else 32

    cdef void _init_stats(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef uint32_t rel = self._rel(acc.req_vtime if self.per_request else acc.vtime)
        cdef RCStat* st = &self.st[slot]
        st.last = rel
        st.freq = 1.0
        self._set_cost(slot, acc.cost)

    cdef void _touch(self, int64_t slot, const Access* acc) noexcept nogil:
        # NOTE: the stamp first: moving the epoch rewrites this record's ``last`` too.
        cdef uint32_t rel = self._rel(acc.req_vtime if self.per_request else acc.vtime)
        cdef RCStat* st = &self.st[slot]
        cdef int64_t d = <int64_t>rel - <int64_t>st.last
        cdef double f = st.freq
        if d > 0:
            f = f * exp(-<double>d / DECAY) + 1.0
        else:
            f += 1.0
        st.freq = f
        st.last = rel
        self._set_cost(slot, acc.cost)

    cdef double _score(self, int64_t slot, int64_t now) noexcept nogil:
        cdef const RCStat* st = &self.st[slot]
        cdef int64_t r = now - self.epoch - <int64_t>st.last
        if r < 1:
            r = 1
        return rc_num(st, self.cost64, slot) * exp(-<double>r / DECAY) / <double>r

    cdef int64_t _pick(self, int64_t now, int64_t b) noexcept nogil:
        """``pick_best`` over ``_score``, computing the exact score (an ``exp``) only when a cheap
        lower bound does not already lose to the ``b``-th best kept so far."""
        cdef int64_t nc = self._draw_slots(), i, m = 0, r
        cdef int64_t now_rel = now - self.epoch
        cdef int32_t s
        cdef const RCStat* st
        cdef const RCStat* stats = self.st
        cdef const int64_t* cost64 = self.cost64
        cdef const int32_t* cand = self.cand
        cdef double num, sc, thr = 0.0
        cdef int32_t* out = self.best
        cdef double* out_score = self.best_score
        for i in range(nc):
            s = cand[i]
            st = &stats[s]
            # NOTE: in 64 bits: ``now`` may be behind ``last`` (a request's stamp is ahead of its
            # gets' vtime), and the stored ``last`` is unsigned.
            r = now_rel - <int64_t>st.last
            if r < 1:
                r = 1
            num = rc_num(st, cost64, s)
            if m == b and num >= 0.0:
                # NOTE: pick_push skips a draw whose score is not below the b-th kept one (thr);
                # a lower bound of the score that is not below it decides the same without the
                # exp.  The bound is at most 6% low and never high (see exp2_neg_below).
                if exp2_neg_below(<double>r * LOG2E_PER_AGE) * num >= thr * <double>r:
                    continue
            sc = num * exp(-<double>r / DECAY) / <double>r
            m = pick_push(out, out_score, m, b, s, sc)
            if m == b:
                thr = out_score[m - 1]
        return m

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._touch(slot, acc)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        self._init_stats(slot, acc)
        dense_add(&self.dense, slot)
        return slot

    def stats(self, block_id: int) -> tuple:
        """(last, freq, cost) of a resident block, ``last`` absolute (tests)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        cost = self.cost64[s] if self.cost64 != NULL else self.st[s].cost
        return (self.epoch + self.st[s].last, self.st[s].freq, cost)


def check_sampling_params(name: str, params: dict) -> None:
    """Clear errors for the parameters every sampling policy shares."""
    if not 1 <= int(params["n-sample"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: n-sample must be in 1..2**30, got {params['n-sample']}")
    if not 1 <= int(params["evict-batch"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: evict-batch must be in 1..2**30, got {params['evict-batch']}")
    if int(params["seed"]) < 0 or int(params["seed"]) >= (1 << 64):
        raise ShadowError(f"policy {name}: seed must be in 0..2**64-1, got {params['seed']}")
    if "timestamp" in params and params["timestamp"] not in ("request", "access"):
        raise ShadowError(f"policy {name}: timestamp must be 'request' or 'access', got {params['timestamp']!r}")


def make(capacity: int, params: dict) -> RandomCompute:
    check_sampling_params("random_compute", params)
    return RandomCompute(capacity, int(params["n-sample"]), int(params["evict-batch"]),
                         int(params["seed"]), params["timestamp"] == "request")
