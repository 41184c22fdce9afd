# cython: language_level=3
"""asym_cache: the block evictor of arXiv 2606.02964 (AsymCache / Multi-Segment Attention,
§4.2-4.5, Algorithm 1), as the PrefixSim fork's ``AsymCache.cpp`` runs it on the seconds clock.

The victim minimises the expected recompute cost ``E = f(tau) * dT`` (Eq. 3): ``dT = max(cost,
1)``, the access's integer cost at insert (the cost model is Eq. 7's linear-in-position cost);
``tau = now - last_access``; ``f(tau) = min(exp(-tau / alpha), exp(-(tau - tau0) / beta))``
(Eq. 9) with ``alpha = -L / ln(p)``, ``beta = alpha / r``, ``tau0 = L (1 - 1/r)``: the two
branches meet at ``tau = L`` with ``f = p``.  ``L`` is the P99 of the reuse gaps seen before the
first eviction (at most 200,000), at least 1, or ``default-lifespan`` without any; it is frozen
at the first eviction.

Two heaps, one per branch, each order-preserving (Eq. 8): branch 1 (``tau < L``) keyed by
``ln dT + last / alpha``, branch 2 (``tau >= L``) by ``ln dT + (last + tau0) / beta``, ties by
the access stamp (older first); the two minima are compared by ``ln E`` (no underflow) and then
the stamp.  Blocks move from branch 1 to 2 exactly when ``tau`` reaches ``L``: branch 1's blocks
also sit on a list in access order, which is ``last`` order (the clock never moves backwards), so
at each eviction the expired ones are its prefix.  A hit re-keys the block in place (no stale
entries).  Under a uniform cost both keys follow ``last`` and the policy is LRU.

Clock: ``clock=seconds`` (default) the request's arrival seconds from ``set_request_ctx`` (its
``vtime``, block accesses before it, when it has none); ``clock=block`` always the ``vtime``: the
P99 gap is then far beyond any cache and the order collapses to cost-weighted LRU.

Pins: honoured.  Each heap's minimum unpinned entry (the pinned region below its root walked
depth first); the minimum over all blocks when every block is pinned (best effort).

Memory: base 22 B/slot + last access 8 + ln dT 8 + key 8 + stamp 8 + list links 8 + heap
position 4 + branch 1 + two heaps of 4-byte slots (each sized for every slot) 8 = 75 B/slot.  The
gap samples (8 B each, at most 200,000) exist only until the first eviction.
"""

from libc.stdint cimport int64_t, int32_t, int8_t
from libc.stdlib cimport malloc, realloc, free, qsort
from libc.math cimport log, exp

from shadow.sim.core.policy cimport Policy, Access, ArrivalCtx, RequestCtx
from shadow.sim.policies.cost_aware._asym_cache_params import check_params
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="least expected recompute cost f(tau)*dT, f piecewise exponential around the "
                "P99 reuse gap, seconds clock (arXiv 2606.02964, AsymCache)",
    family="cost-aware",
    defaults="reuse-prob=0.5,slope-ratio=40.0,default-lifespan=180.0,clock=seconds",
    weight=3.0,
)

cdef enum:
    GAP_SAMPLE_CAP = 200000
    FIRST_GAPS = 1024


cdef struct KeyStamp:
    double key            # the heap key in the block's branch
    int64_t stamp         # hits and inserts so far at its last access (ties: older first)


cdef int _cmp_double(const void* a, const void* b) noexcept nogil:
    cdef double x = (<const double*>a)[0], y = (<const double*>b)[0]
    return (x > y) - (x < y)


cdef class AsymCache(Policy):
    """See the module docstring.  Invariants (once ``frozen``): a resident slot is in exactly
    one heap, ``h1`` iff ``br[s] == 1`` iff it is on the branch-1 list; ``hpos[s]`` is its index
    there; both heaps are 4-ary min-heaps on (key, stamp); branch-1 list order is stamp order."""
    cdef double* last
    cdef double* lnc
    cdef KeyStamp* ks                 # heap key and access stamp, side by side
    cdef int32_t* prev
    cdef int32_t* nxt
    cdef int32_t* hpos
    cdef int8_t* br
    cdef int32_t* h1
    cdef int32_t* h2
    cdef int64_t n1, n2
    cdef int32_t head, tail          # branch-1 list (before freezing: every block)
    cdef double* gaps
    cdef int64_t n_gaps, cap_gaps
    cdef readonly double p, r, default_lifespan
    cdef readonly bint block_clock
    cdef readonly bint frozen
    cdef readonly double L, alpha, beta, tau0
    cdef readonly double now
    cdef int64_t clock
    cdef readonly int64_t n_arrivals     # set_request_ctx calls
    cdef readonly int64_t n_untimed      # of them without an arrival time

    def __cinit__(self, int64_t capacity, double p=0.5, double r=40.0,
                  double default_lifespan=180.0, bint block_clock=False, *args, **kwargs):
        cdef int64_t n = max(capacity, 1)
        self.last = <double*>malloc(n * sizeof(double))
        self.lnc = <double*>malloc(n * sizeof(double))
        self.ks = <KeyStamp*>malloc(n * sizeof(KeyStamp))
        self.prev = <int32_t*>malloc(n * sizeof(int32_t))
        self.nxt = <int32_t*>malloc(n * sizeof(int32_t))
        self.hpos = <int32_t*>malloc(n * sizeof(int32_t))
        self.br = <int8_t*>malloc(n * sizeof(int8_t))
        self.h1 = <int32_t*>malloc(n * sizeof(int32_t))
        self.h2 = <int32_t*>malloc(n * sizeof(int32_t))
        self.gaps = <double*>malloc(FIRST_GAPS * sizeof(double))
        if (self.last == NULL or self.lnc == NULL or self.ks == NULL
                or self.prev == NULL or self.nxt == NULL or self.hpos == NULL or self.br == NULL
                or self.h1 == NULL or self.h2 == NULL or self.gaps == NULL):
            raise MemoryError(f"cannot allocate an asym_cache cache of {capacity} slots")
        self.cap_gaps = FIRST_GAPS
        self.n_gaps = 0
        self.n1 = 0
        self.n2 = 0
        self.head = -1
        self.tail = -1
        self.p = p
        self.r = r
        self.default_lifespan = default_lifespan
        self.block_clock = block_clock
        self.frozen = False
        self.L = 1.0
        self.alpha = 1.0
        self.beta = 1.0
        self.tau0 = 0.0
        self.now = 0.0
        self.clock = 0
        self.n_arrivals = 0
        self.n_untimed = 0
        self.wants_request_ctx = True

    def __dealloc__(self):
        free(self.last)
        free(self.lnc)
        free(self.ks)
        free(self.prev)
        free(self.nxt)
        free(self.hpos)
        free(self.br)
        free(self.h1)
        free(self.h2)
        free(self.gaps)

    # ---- the branch-1 list (access order) ----

    cdef inline void _append(self, int64_t s) noexcept nogil:
        self.prev[s] = self.tail
        self.nxt[s] = -1
        if self.tail >= 0:
            self.nxt[self.tail] = <int32_t>s
        else:
            self.head = <int32_t>s
        self.tail = <int32_t>s

    cdef inline void _unlink(self, int64_t s) noexcept nogil:
        cdef int32_t a = self.prev[s], b = self.nxt[s]
        if a >= 0:
            self.nxt[a] = b
        else:
            self.head = b
        if b >= 0:
            self.prev[b] = a
        else:
            self.tail = a

    # ---- two 4-ary heaps of slots on (key, stamp) ----

    cdef inline bint _less(self, int32_t a, int32_t b) noexcept nogil:
        cdef const KeyStamp* x = &self.ks[a]
        cdef const KeyStamp* y = &self.ks[b]
        if x.key != y.key:
            return x.key < y.key
        return x.stamp < y.stamp

    cdef void _rise(self, int32_t* h, int64_t i, int32_t s) noexcept nogil:
        """Put slot ``s`` at hole ``i`` of heap ``h`` and move it up to its place."""
        cdef int64_t parent
        while i > 0:
            parent = (i - 1) >> 2
            if not self._less(s, h[parent]):
                break
            h[i] = h[parent]
            self.hpos[h[i]] = <int32_t>i
            i = parent
        h[i] = s
        self.hpos[s] = <int32_t>i

    cdef void _resift(self, int32_t* h, int64_t n, int64_t i, int32_t s) noexcept nogil:
        """Put slot ``s`` at hole ``i`` of heap ``h`` (``n`` entries), bottom up: the hole sinks
        to a leaf through the smaller children, then ``s`` rises from there.  NOTE: an entry
        re-keyed on a hit, or the last one moved into a deleted entry's place, mostly belongs
        near the leaves: 3 comparisons a level instead of 4, and a short rise."""
        cdef int64_t c, m, last
        while True:
            c = 4 * i + 1
            if c >= n:
                break
            m = c
            last = c + 3 if c + 3 < n else n - 1
            c += 1
            while c <= last:
                if self._less(h[c], h[m]):
                    m = c
                c += 1
            h[i] = h[m]
            self.hpos[h[i]] = <int32_t>i
            i = m
        self._rise(h, i, s)

    cdef inline void _push(self, int32_t* h, int64_t* n, int64_t s) noexcept nogil:
        n[0] += 1
        self._rise(h, n[0] - 1, <int32_t>s)

    cdef inline void _delete(self, int32_t* h, int64_t* n, int64_t s) noexcept nogil:
        cdef int64_t i = self.hpos[s]
        n[0] -= 1
        if i != n[0]:
            self._resift(h, n[0], i, h[n[0]])

    cdef int64_t _best_below(self, const int32_t* h, int64_t n, int64_t i,
                             int64_t best) noexcept nogil:
        """The lower of entry ``best`` (-1: none) and the lowest unpinned entry of the subtree at
        ``i``.  NOTE: below an unpinned entry nothing is lower, so only pinned entries are
        descended: the walk visits the request's own blocks near the root (few) and their
        children, and recurses at most the heap's height (16 levels for 2**31 slots)."""
        cdef int64_t c, last
        if self.pins[h[i]] == 0:
            return i if best < 0 or self._less(h[i], h[best]) else best
        c = 4 * i + 1
        last = c + 3 if c + 3 < n else n - 1
        while c <= last:
            best = self._best_below(h, n, c, best)
            c += 1
        return best

    cdef inline int64_t _top(self, const int32_t* h, int64_t n) noexcept nogil:
        """The heap's lowest unpinned slot, -1 if none (or the heap is empty)."""
        cdef int64_t i
        if n == 0:
            return -1
        if self.pins[h[0]] == 0:
            return h[0]
        i = self._best_below(h, n, 0, -1)
        return h[i] if i >= 0 else -1

    # ---- lifespan, branches ----

    cdef inline double _key1(self, int64_t s) noexcept nogil:
        return self.lnc[s] + self.last[s] / self.alpha

    cdef inline double _key2(self, int64_t s) noexcept nogil:
        return self.lnc[s] + (self.last[s] + self.tau0) / self.beta

    cdef inline double _log_e(self, int64_t s) noexcept nogil:
        cdef double tau = self.now - self.last[s]
        if tau < 0.0:
            tau = 0.0
        if self.br[s] == 2:
            return self.lnc[s] - (tau - self.tau0) / self.beta
        return self.lnc[s] - tau / self.alpha

    cdef void _freeze(self) noexcept nogil:
        cdef double life = self.default_lifespan
        cdef int64_t idx, s
        if self.n_gaps > 0:
            qsort(self.gaps, self.n_gaps, sizeof(double), _cmp_double)
            idx = <int64_t>(0.99 * <double>self.n_gaps)
            if idx > self.n_gaps - 1:
                idx = self.n_gaps - 1
            life = self.gaps[idx]
        self.L = life if life > 1.0 else 1.0
        self.alpha = -self.L / log(self.p)
        self.beta = self.alpha / self.r
        self.tau0 = self.L * (1.0 - 1.0 / self.r)
        free(self.gaps)
        self.gaps = NULL
        self.n_gaps = 0
        self.cap_gaps = 0
        self.frozen = True
        s = self.head
        while s >= 0:
            self.br[s] = 1
            self.ks[s].key = self._key1(s)
            self._push(self.h1, &self.n1, s)
            s = self.nxt[s]

    cdef void _expire(self) noexcept nogil:
        """Move the branch-1 blocks whose ``tau`` reached ``L`` (a prefix of the list) to 2."""
        cdef int32_t s = self.head
        while s >= 0 and self.now - self.last[s] >= self.L:
            self._unlink(s)
            self._delete(self.h1, &self.n1, s)
            self.br[s] = 2
            self.ks[s].key = self._key2(s)
            self._push(self.h2, &self.n2, s)
            s = self.head

    cdef void _sample_gap(self, double gap) noexcept nogil:
        cdef double* g
        if self.n_gaps >= GAP_SAMPLE_CAP or self.gaps == NULL:
            return
        if self.n_gaps == self.cap_gaps:
            # NOTE: grows only until the first eviction (the fill phase), doubling to the cap
            g = <double*>realloc(self.gaps, min(2 * self.cap_gaps, GAP_SAMPLE_CAP) * sizeof(double))
            if g == NULL:
                self.nomem = 1
                return
            self.gaps = g
            self.cap_gaps = min(2 * self.cap_gaps, GAP_SAMPLE_CAP)
        self.gaps[self.n_gaps] = gap
        self.n_gaps += 1

    # ---- the policy ----

    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil:
        cdef double t = <double>rctx.vtime
        self.n_arrivals += 1
        self.n_untimed += rctx.timestamp_s < 0
        if not self.block_clock and rctx.timestamp_s >= 0:
            t = rctx.timestamp_s
        if t > self.now:
            self.now = t

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        cdef double gap = self.now - self.last[slot]
        if not self.frozen:
            if gap > 0.0:
                self._sample_gap(gap)
        self.last[slot] = self.now
        self.clock += 1
        self.ks[slot].stamp = self.clock
        if not self.frozen:
            self._unlink(slot)
            self._append(slot)
            return
        if self.br[slot] == 2:
            self._delete(self.h2, &self.n2, slot)
            self.br[slot] = 1
            self.ks[slot].key = self._key1(slot)
            self._push(self.h1, &self.n1, slot)
        else:
            self._unlink(slot)
            self.ks[slot].key = self._key1(slot)
            self._resift(self.h1, self.n1, self.hpos[slot], <int32_t>slot)
        self._append(slot)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t s = self._take_slot(acc.block_id)
        self.last[s] = self.now
        self.lnc[s] = log(<double>(acc.cost if acc.cost > 1 else 1))
        self.clock += 1
        self.ks[s].stamp = self.clock
        self._append(s)
        if self.frozen:
            self.br[s] = 1
            self.ks[s].key = self._key1(s)
            self._push(self.h1, &self.n1, s)
        else:
            self.br[s] = 0
        return s

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t a, b, v
        cdef double ea, eb
        if self.n_resident == 0:
            return 0
        if not self.frozen:
            self._freeze()
        self._expire()
        a = self._top(self.h1, self.n1)
        b = self._top(self.h2, self.n2)
        if a < 0 and b < 0:
            # every block pinned: the plain minima (best effort)
            a = self.h1[0] if self.n1 > 0 else -1
            b = self.h2[0] if self.n2 > 0 else -1
        if a < 0:
            v = b
        elif b < 0:
            v = a
        else:
            ea = self._log_e(a)
            eb = self._log_e(b)
            v = a if (ea < eb or (ea == eb and self.ks[a].stamp < self.ks[b].stamp)) else b
        self._leave(v)
        return self._drop_slot(v)

    cdef inline void _leave(self, int64_t s) noexcept nogil:
        """Take ``s`` out of its heap and the list."""
        if self.br[s] == 2:
            self._delete(self.h2, &self.n2, s)
            return
        self._unlink(s)
        if self.br[s] == 1:
            self._delete(self.h1, &self.n1, s)

    cdef void remove(self, int64_t slot) noexcept nogil:
        self._leave(slot)
        self._drop_slot(slot)

    # ---- what the run falls back to ----

    def setup_notes(self, cost_model: str) -> list[str]:
        """One line per setting that defeats the policy (``shadow simulate`` warns before the
        run)."""
        if cost_model == "uniform":
            return ["asym_cache: the cost model is uniform, so every block's dT is the same and "
                    "asym_cache evicts as lru does (arXiv 2606.02964); use a position cost"]
        return []

    def trace_notes(self) -> list[str]:
        """One line per fallback the requests served so far forced (``shadow simulate`` warns)."""
        if self.n_untimed and not self.block_clock:
            return [f"asym_cache: {self.n_untimed} of {self.n_arrivals} requests have no arrival "
                    f"time: their clock is the block count before them (as clock=block)"]
        return []

    # ---- tests ----

    def py_arrive(self, double timestamp_s, int64_t vtime=0) -> None:
        """``set_request_ctx`` with this arrival (tests)."""
        cdef ArrivalCtx a
        a.timestamp_s = timestamp_s
        a.category = 0
        a.session_id = -1
        a.session_next_req = -1
        a.n_blocks = 0
        a.vtime = vtime
        self.set_request_ctx(&a)

    def branch(self, block_id: int) -> int:
        """0 before the lifespan is frozen, else the block's branch, 1 or 2 (tests); as of the
        last eviction (branch 2 is entered there)."""
        cdef int64_t s = self.find(block_id)
        if s < 0:
            raise KeyError(block_id)
        return self.br[s]

    def check(self) -> None:
        """Assert the invariants of the class docstring (tests)."""
        cdef int64_t i, s, n = 0
        if not self.frozen:
            return
        for i in range(1, self.n1):
            assert not self._less(self.h1[i], self.h1[(i - 1) >> 2]), i
        for i in range(1, self.n2):
            assert not self._less(self.h2[i], self.h2[(i - 1) >> 2]), i
        for i in range(self.n1):
            assert self.hpos[self.h1[i]] == i and self.br[self.h1[i]] == 1
        for i in range(self.n2):
            assert self.hpos[self.h2[i]] == i and self.br[self.h2[i]] == 2
        assert self.n1 + self.n2 == self.n_resident
        s = self.head
        while s >= 0:
            assert self.br[s] == 1
            if self.nxt[s] >= 0:
                assert self.ks[self.nxt[s]].stamp > self.ks[s].stamp
            n += 1
            s = self.nxt[s]
        assert n == self.n1


def make(capacity: int, params: dict) -> AsymCache:
    p, r, life, clock = check_params(params)
    return AsymCache(capacity, p, r, life, clock == "block")
