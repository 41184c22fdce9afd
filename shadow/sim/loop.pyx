# cython: language_level=3
"""The serve loop: one (policy, capacity) cache stepped over requests, no Python object per block.

Per request (see docs/sim.md and PrefixSim's design; ``--no-pin`` gives the older, unpinned loop):

0. **skip**: more distinct blocks (plus anonymous slots) than the cache can hold -> counted, untouched.
1. **match** (read-only; every statistic comes from here): each block probed in prefix order; a
   block resident after an earlier miss still counts (gap-spanning hit); the prefix counters stop
   at the first miss; misses de-duplicated for allocation; runs of misses are holes.  With
   pinning, each hit block's pin count goes up so a pin-honouring policy will not evict it.
2. **allocate**: evict exactly ``missing + anonymous - free`` blocks; a victim the request needs
   is a self-eviction and is not progress.  Anonymous slots (vLLM's final partial block) hold
   room but no block: offline they are free again after the request, live they stay reserved
   until the release.
3. ``on_request`` (PrefixSim's record_request), then **access**: deepest block first by default,
   one ``get`` each (vtime +1 per get, one recency stamp per request); an eviction here is
   ``n_unexpected_eviction``.
4. **verify**: every block resident; a failure stops this cache (``failed``).  So does a policy
   that ran out of memory in steps 2-3 (``policy.nomem``; ``FAIL_NOMEM``): nothing in the loop
   raises or aborts, so the engine it runs in survives, and no figure rests on the state the
   policy could not keep.
5. unpin; release the request's blocks tail first (``on_release``) for a policy that wants it, or
   (live admission) keep everything pinned until :meth:`CacheRun.release`.

Invariant after each request: ``policy.n_resident + reserved <= policy.capacity``.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint8_t, uint64_t
from libc.stdlib cimport malloc, calloc, free
from libc.stdio cimport FILE, fopen, fclose, fprintf, fflush

from shadow.sim.policy cimport Policy, Access, RequestCtx
from shadow.sim.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._dlist cimport LR_RING_MIN
from shadow.sim.policies.lru cimport LRU
from shadow.sim.policies.fifo cimport FIFO
from shadow.sim.policies.clock cimport Clock
from shadow.sim.policies.sieve cimport Sieve
from shadow.sim.policies.vllm cimport VLLM
from shadow.sim.policies.s3fifo cimport S3FIFO
from shadow.sim.policies.arc cimport ARC
from shadow.sim.policies._ghost cimport gr_prefetch

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    enum: CLOCK_THREAD_CPUTIME_ID
    int clock_gettime(int clk, timespec* tp)


cdef inline int64_t _thread_cpu_ns() noexcept nogil:
    """CPU time of the calling thread (ns): what a cache's serving costs, whatever else runs."""
    cdef timespec t
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t)
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec

import logging

log = logging.getLogger(__name__)

# NOTE: the policies whose operations are short get a direct, inlined path in the loop (their
# ``fast_*`` methods, declared inline in their .pxd): a virtual call per block costs about as much
# as their whole hit or insert.  Any other policy (or a subclass) is K_GENERIC and goes through the
# Policy vtable.  The fast kinds have no on_request and no evict_n of their own, read nothing of an
# Access but the id, and (but s3fifo and arc) are STRICT_PINS.
cdef enum:
    K_GENERIC = 0
    K_LRU = 1
    K_FIFO = 2
    K_CLOCK = 3
    K_SIEVE = 4
    K_VLLM = 5
    K_S3FIFO = 6
    K_ARC = 7

cdef enum:
    FAIL_NONE = 0
    FAIL_VERIFY = 1
    FAIL_STUCK = 2
    FAIL_UNEXPECTED_STUCK = 3
    FAIL_NOMEM = 4

FAIL_MESSAGES = {
    1: "verify failed: block {block} of request {req} is not resident after its access phase",
    2: "the policy could not evict while making room for request {req} (every candidate refused)",
    3: "the policy could not evict during the access phase of request {req}",
    4: ("out of memory: the policy could not allocate what request {req} needed, so this cache "
        "stopped there (its figures cover the requests before it)"),
}


cdef inline int64_t _bsearch(const int64_t* a, int64_t n, int64_t key) noexcept nogil:
    cdef int64_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo < n and a[lo] == key


# ---- the policy's operations, specialised per kind (fused type: one C function per policy) ----

ctypedef fused AnyPolicy:
    LRU
    FIFO
    Clock
    Sieve
    VLLM
    S3FIFO
    ARC
    Policy


cdef inline void _hit(AnyPolicy p, int64_t slot, const Access* acc) noexcept nogil:
    if AnyPolicy is Policy:
        p.hit(slot, acc)
    elif AnyPolicy is FIFO:
        pass
    else:
        p.fast_hit(slot)


cdef inline int64_t _insert(AnyPolicy p, const Access* acc) noexcept nogil:
    if AnyPolicy is Policy:
        return p.insert(acc)
    else:
        return p.fast_insert(acc.block_id)


cdef inline int64_t _evict(AnyPolicy p, const Access* acc) noexcept nogil:
    if AnyPolicy is Policy:
        return p.evict(acc)
    else:
        return p.fast_evict()


cdef inline void _on_release(AnyPolicy p, int64_t slot) noexcept nogil:
    if AnyPolicy is VLLM:
        p.fast_release(slot)
    elif AnyPolicy is Policy:
        p.on_release(slot)


cdef int64_t _evict_n(AnyPolicy p, int64_t n, const Access* acc, int64_t* out) noexcept nogil:
    """Up to ``n`` evictions, victims to ``out`` (the fast kinds' evict_n is the base loop)."""
    cdef int64_t k = 0, victim
    if AnyPolicy is Policy:
        return p.evict_n(acc, n, out)
    else:
        while k < n:
            victim = p.fast_evict()
            if victim == 0:
                break
            out[k] = victim
            k += 1
        return k


cdef void _evict_trusted(AnyPolicy p, int64_t n, const Access* acc) noexcept nogil:
    """``n`` evictions that cannot fail nor hit the request (see serve's ``trusted``)."""
    cdef int64_t j
    for j in range(n):
        _evict(p, acc)


cdef int64_t _access(CacheRun run, AnyPolicy p, const int64_t* ids, int64_t B,
                     const int64_t* nxt, const double* cexact, const int64_t* cint,
                     int64_t n_anonymous, bint sorted_unique, Access* acc,
                     int64_t req_index) noexcept nogil:
    """The access phase of :meth:`CacheRun.serve`: evictions during it, or -1 if stuck (failed)."""
    cdef int64_t i, j, step, slot, bid, victim, n_res = 0, n_ev = 0
    cdef int64_t* slots = run.slots
    cdef int64_t limit = p.capacity - run.reserved - n_anonymous
    # NOTE: counters in locals, stored back at the end: through ``run`` every store to the
    # policy's arrays would force the compiler to reload them.
    cdef int64_t vt = run.vtime, n_unexpected = 0
    if run.deepest_first:
        i = B - 1
        step = -1
    else:
        i = 0
        step = 1
    for j in range(B):
        bid = ids[i]
        vt += 1
        acc.block_id = bid
        if AnyPolicy is Policy:
            acc.cost = cint[i]
            acc.cost_exact = cexact[i]
            acc.next_access = nxt[i]
            acc.vtime = vt
            acc.position = i
        slot = slots[i]
        if slot >= 0 and p.slot_id(slot) != bid:
            slot = -1                       # evicted since the match
        if slot < 0 and not sorted_unique:
            # NOTE: with distinct ids a block missing at match time (or evicted since) stays
            # missing until its own get; with duplicates an earlier get may have inserted it.
            slot = p.find(bid)
        if slot >= 0:
            if AnyPolicy is Policy:
                n_res = p.n_resident
            _hit(p, slot, acc)
        else:
            if p.n_resident >= limit:
                if AnyPolicy is not Policy:
                    # NOTE: the fast kinds read nothing of ``acc`` but the id; fill it anyway
                    # here (rare) so every path sees the same access.
                    acc.cost = cint[i]
                    acc.cost_exact = cexact[i]
                    acc.next_access = nxt[i]
                    acc.vtime = vt
                    acc.position = i
                victim = _evict(p, acc)
                if victim == 0:
                    run.vtime = vt
                    run.n_unexpected_eviction += n_unexpected
                    run._fail(FAIL_UNEXPECTED_STUCK, req_index, bid)
                    return -1
                n_unexpected += 1
                n_ev += 1
            if AnyPolicy is Policy:
                n_res = p.n_resident + 1
            slot = _insert(p, acc)
            slots[i] = slot
        if AnyPolicy is Policy:
            # NOTE: a policy may evict inside hit/insert (twoq's Am spills its own tail even when
            # the cache has room, as libCacheSim does): a *spilled* eviction the loop did not ask
            # for, so it counts as unexpected.  The dropped slot is caught by the id checks
            # after.  (The fast kinds never do.)
            if p.n_resident < n_res:
                n_unexpected += n_res - p.n_resident
                n_ev += 1
        i += step
    run.vtime = vt
    run.n_unexpected_eviction += n_unexpected
    return n_ev


cdef void _release_request(AnyPolicy p, const int64_t* ids, int64_t B,
                           const int64_t* slots) noexcept nogil:
    """Release the request's resident blocks tail first (a policy with ``wants_release``)."""
    cdef int64_t i, slot
    for i in range(B - 1, -1, -1):
        slot = slots[i]
        if slot >= 0 and p.slot_id(slot) == ids[i]:
            _on_release(p, slot)


cdef class CacheRun:
    """One simulated cache: a policy instance, the loop's options and its statistics."""

    cdef readonly Policy policy
    cdef readonly bint pin
    cdef readonly bint deepest_first
    cdef readonly bint verify
    # statistics (match phase)
    cdef readonly int64_t n_req, n_req_skipped, n_blocks, n_hits, n_prefix_hits
    cdef readonly double total_cost, saved_cost, prefix_saved_cost
    cdef readonly int64_t n_eviction, n_self_eviction, n_unexpected_eviction
    cdef readonly int64_t n_holes, hole_len_sum, max_hole_len
    cdef readonly int64_t vtime
    cdef readonly int64_t reserved
    # last served request (live API)
    cdef readonly int64_t last_hits, last_prefix_hits, last_blocks
    cdef readonly double last_saved, last_prefix_saved, last_cost
    # skip warning / failure
    cdef readonly int64_t first_skip_req, first_skip_distinct
    cdef readonly int failed
    cdef readonly int64_t failed_req, failed_block
    cdef readonly int64_t busy_ns  # thread CPU time serve_chunks spent on this cache (balancing)
    # the policy again, typed for its inlined path (None unless ``kind`` says so)
    cdef int kind
    cdef LRU p_lru
    cdef FIFO p_fifo
    cdef Clock p_clock
    cdef Sieve p_sieve
    cdef VLLM p_vllm
    cdef S3FIFO p_s3fifo
    cdef ARC p_arc
    # scratch
    cdef int64_t n_prefetched      # leading ids of the next serve's request already prefetched
    cdef bint pf_table            # prefetch table entries ahead of the probes (large caches only)
    cdef bint pf_ghost            # prefetch a missed block's ghost entry at the match (ARC, s3fifo)
    cdef int64_t* slots
    cdef int64_t* hitidx          # positions the match phase pinned (its hits), in order
    cdef int64_t n_hitidx
    cdef int64_t* evbuf
    cdef int64_t scratch_cap
    cdef int64_t* skeys
    cdef uint32_t* sgen
    cdef uint8_t* smark
    cdef uint64_t smask
    cdef uint32_t gen
    cdef FILE* holes

    def __cinit__(self, Policy policy, bint pin=True, str replay_order="deepest-first", bint verify=True):
        if replay_order not in ("deepest-first", "prefix-order"):
            raise ValueError(f"bad replay order {replay_order!r}")
        self.policy = policy
        self.kind = K_GENERIC
        if type(policy) is LRU:
            self.kind = K_LRU
            self.p_lru = <LRU>policy
        elif type(policy) is FIFO:
            self.kind = K_FIFO
            self.p_fifo = <FIFO>policy
        elif type(policy) is Clock:
            self.kind = K_CLOCK
            self.p_clock = <Clock>policy
        elif type(policy) is Sieve:
            self.kind = K_SIEVE
            self.p_sieve = <Sieve>policy
        elif type(policy) is VLLM:
            self.kind = K_VLLM
            self.p_vllm = <VLLM>policy
        elif type(policy) is S3FIFO:
            self.kind = K_S3FIFO
            self.p_s3fifo = <S3FIFO>policy
        elif type(policy) is ARC:
            self.kind = K_ARC
            self.p_arc = <ARC>policy
        self.pin = pin
        policy.pin_enabled = pin
        # NOTE: from 32k slots (LR_RING_MIN) on, as the rings' prefetch-ahead: below, the table
        # sits in the L2 and the prefetches cost 1-7% at 8k slots (loop only, measured).
        self.pf_table = policy.capacity >= LR_RING_MIN
        self.pf_ghost = self.pf_table and self.kind in (K_ARC, K_S3FIFO)
        self.deepest_first = replay_order == "deepest-first"
        self.verify = verify
        self.first_skip_req = -1
        self.failed_req = -1
        self.busy_ns = 0
        self.scratch_cap = 0
        self.holes = NULL
        self.reserve(1024)

    def __dealloc__(self):
        free(self.slots)
        free(self.hitidx)
        free(self.evbuf)
        free(self.skeys)
        free(self.sgen)
        free(self.smark)
        if self.holes != NULL:
            fclose(self.holes)

    def holds(self, int64_t block_id) -> bool:
        """Whether ``block_id`` is resident in this cache (read-only; the connector's interner
        keeps an id while some cache holds it)."""
        return self.policy.find(block_id) >= 0

    def reserve(self, int64_t n_blocks):
        """Make the per-request scratch arrays hold a request of ``n_blocks`` (plus anonymous) blocks."""
        cdef uint64_t size = 16
        if n_blocks <= self.scratch_cap:
            return
        n_blocks = max(n_blocks, 2 * self.scratch_cap)
        free(self.slots)
        free(self.hitidx)
        free(self.evbuf)
        free(self.skeys)
        free(self.sgen)
        free(self.smark)
        while size < <uint64_t>(2 * n_blocks):
            size <<= 1
        self.slots = <int64_t*>malloc(n_blocks * sizeof(int64_t))
        self.hitidx = <int64_t*>malloc(n_blocks * sizeof(int64_t))
        self.n_hitidx = 0
        self.evbuf = <int64_t*>malloc(n_blocks * sizeof(int64_t))
        self.skeys = <int64_t*>calloc(size, sizeof(int64_t))
        self.sgen = <uint32_t*>calloc(size, sizeof(uint32_t))
        self.smark = <uint8_t*>calloc(size, sizeof(uint8_t))
        if (self.slots == NULL or self.hitidx == NULL or self.evbuf == NULL or self.skeys == NULL or self.sgen == NULL
                or self.smark == NULL):
            self.scratch_cap = 0    # NOTE: the next reserve allocates again; none is served
            raise MemoryError(f"cannot allocate scratch space for {n_blocks} blocks")
        self.smask = size - 1
        self.gen = 1
        self.scratch_cap = n_blocks

    def open_holes(self, path: str) -> None:
        """Write PrefixSim's per-request hole lines to ``path`` (the caller renames it when done)."""
        self.close_holes()
        self.holes = fopen(path.encode(), b"w")
        if self.holes == NULL:
            raise OSError(f"cannot open {path} for writing")

    def close_holes(self) -> None:
        if self.holes != NULL:
            fclose(self.holes)
            self.holes = NULL

    # ---- scratch set: the request's distinct ids (generation-stamped, never cleared) ----

    cdef inline uint64_t _sslot(self, int64_t key) noexcept nogil:
        cdef uint64_t i = ((<uint64_t>key) * <uint64_t>0x9E3779B97F4A7C15ULL) >> 20
        i &= self.smask
        while self.sgen[i] == self.gen and self.skeys[i] != key:
            i = (i + 1) & self.smask
        return i

    cdef inline bint _sadd(self, int64_t key) noexcept nogil:
        """Add ``key``; True if it was new in this request."""
        cdef uint64_t i = self._sslot(key)
        if self.sgen[i] == self.gen:
            return False
        self.sgen[i] = self.gen
        self.skeys[i] = key
        self.smark[i] = 0
        return True

    cdef inline void _snew_gen(self) noexcept nogil:
        cdef uint64_t i
        self.gen += 1
        if self.gen == 0:
            for i in range(self.smask + 1):
                self.sgen[i] = 0
            self.gen = 1

    cdef inline int64_t _evict_batch(self, int64_t n, const Access* acc) noexcept nogil:
        """Up to ``n`` evictions into ``evbuf`` (the policy's kind picks the inlined path)."""
        if self.kind == K_LRU:
            return _evict_n(self.p_lru, n, acc, self.evbuf)
        elif self.kind == K_FIFO:
            return _evict_n(self.p_fifo, n, acc, self.evbuf)
        elif self.kind == K_CLOCK:
            return _evict_n(self.p_clock, n, acc, self.evbuf)
        elif self.kind == K_SIEVE:
            return _evict_n(self.p_sieve, n, acc, self.evbuf)
        elif self.kind == K_VLLM:
            return _evict_n(self.p_vllm, n, acc, self.evbuf)
        elif self.kind == K_S3FIFO:
            return _evict_n(self.p_s3fifo, n, acc, self.evbuf)
        elif self.kind == K_ARC:
            return _evict_n(self.p_arc, n, acc, self.evbuf)
        return self.policy.evict_n(acc, n, self.evbuf)

    # ---- one request ----

    cdef int serve(self, const int64_t* ids, int64_t B, const int64_t* nxt, const double* cexact,
                   const int64_t* cint, double ts, int64_t req_index, int64_t n_match,
                   int64_t n_anonymous, bint hold) noexcept nogil:
        """Serve one request; 0 served, 1 skipped, -1 failed (see ``failed``).

        ``n_match`` blocks (a prefix of ``ids``) are looked up for statistics; all ``B`` are
        allocated and accessed.  ``hold`` keeps every block pinned (and ``n_anonymous`` slots
        reserved) until :meth:`release`; otherwise pins drop and blocks are released at the end.
        """
        cdef int64_t i, j, k, slot, bid, n_distinct, n_missing = 0, first_miss = -1
        cdef int64_t cap_eff, needed, progress, victim, hole_start = -1, hole_len
        cdef bint sorted_unique = True, in_prefix = True, in_alpha, trusted
        cdef int64_t hits = 0, phits = 0, nh = 0, n_ev_access = 0
        cdef double cost_all = 0.0, saved = 0.0, psaved = 0.0
        cdef uint64_t si
        cdef Access acc
        cdef RequestCtx ctx
        cdef int64_t V0, step, n_res, n_lim = min(B, n_match), n_pinned0
        cdef int64_t* slots = self.slots
        cdef int64_t* hitidx = self.hitidx
        cdef bint generic = self.kind == K_GENERIC
        cdef bint pin = self.pin
        cdef int64_t n_pf = self.n_prefetched

        self.n_prefetched = 0
        self.n_hitidx = 0
        if self.failed:
            return -1
        if self.policy.nomem:
            # NOTE: out of memory outside a serve (a live release's inserts): fail before this
            # request counts anything.
            self._fail(FAIL_NOMEM, req_index, 0)
            return -1
        # 0. skip check on the distinct count
        for i in range(1, B):
            if ids[i] <= ids[i - 1]:
                sorted_unique = False
                break
        if sorted_unique:
            n_distinct = B
        else:
            self._snew_gen()
            n_distinct = 0
            for i in range(B):
                if self._sadd(ids[i]):
                    n_distinct += 1
        cap_eff = self.policy.capacity - self.reserved
        if n_distinct + n_anonymous > cap_eff:
            self.n_req_skipped += 1
            if self.first_skip_req < 0:
                self.first_skip_req = req_index
                self.first_skip_distinct = n_distinct
            return 1
        self.n_req += 1

        # 1. match
        # NOTE: the probes of a request are independent: prefetch their home entries first so
        # the table's cache misses overlap instead of stalling one after the other.
        # NOTE: the first ``n_pf`` were prefetched by _serve_range during the previous request
        # (one request ago: they have arrived; most requests have fewer than 64 blocks).  A small
        # cache's table sits in the L2, where the prefetches only cost instructions (``pf_table``).
        if self.pf_table:
            for i in range(n_pf, min(B, 128)):
                self.policy.prefetch(ids[i])
        for i in range(0, n_lim, 8):
            SHADOW_PREFETCH(&cexact[i])
        # NOTE: the statistics cover the first ``n_match`` blocks; the rest (``--lookup``) are
        # only probed, so the loop is split there instead of testing ``i < n_match`` per block.
        for i in range(n_lim):
            slot = self.policy.find(ids[i])
            slots[i] = slot
            cost_all += cexact[i]
            if slot >= 0:
                if pin:
                    self.policy._pin(slot)
                    hitidx[nh] = i
                    nh += 1
                hits += 1
                saved += cexact[i]
                if in_prefix:
                    phits += 1
                    psaved += cexact[i]
                if hole_start >= 0:
                    self._hole(hole_start, i - hole_start)
                    hole_start = -1
            else:
                if first_miss < 0:
                    first_miss = i
                in_prefix = False
                if hole_start < 0:
                    hole_start = i
                if self.pf_ghost:
                    self._prefetch_ghost(ids[i])
                if sorted_unique:
                    n_missing += 1
                else:
                    si = self._sslot(ids[i])
                    if self.smark[si] == 0:
                        self.smark[si] = 1
                        n_missing += 1
        for i in range(n_lim, B):
            bid = ids[i]
            slot = self.policy.find(bid)
            slots[i] = slot
            if slot >= 0:
                if pin:
                    self.policy._pin(slot)
                    hitidx[nh] = i
                    nh += 1
            else:
                if first_miss < 0:
                    first_miss = i
                if sorted_unique:
                    n_missing += 1
                else:
                    si = self._sslot(bid)
                    if self.smark[si] == 0:
                        self.smark[si] = 1
                        n_missing += 1
        self.n_hitidx = nh
        if hole_start >= 0:
            self._hole(hole_start, n_lim - hole_start)
        if self.holes != NULL:
            self._dump_holes(req_index, n_lim)
        self.n_blocks += n_lim
        self.n_hits += hits
        self.n_prefix_hits += phits
        self.total_cost += cost_all
        self.saved_cost += saved
        self.prefix_saved_cost += psaved
        self.last_blocks = n_lim
        self.last_hits = hits
        self.last_prefix_hits = phits
        self.last_cost = cost_all
        self.last_saved = saved
        self.last_prefix_saved = psaved

        # 2. allocate
        V0 = self.vtime
        needed = n_missing + n_anonymous - (cap_eff - self.policy.n_resident)
        if needed > 0:
            if first_miss >= 0:
                acc.block_id = ids[first_miss]
                acc.cost = cint[first_miss]
                acc.cost_exact = cexact[first_miss]
                # NOTE: the fast kinds read nothing of ``acc`` but the id, and ``nxt`` is read
                # nowhere else for them: this one load per request was a cache miss (the array is
                # streamed past, one entry per request), ~12-15% of lru/fifo's loop time at 8k
                # slots (perf, base and main alike).
                acc.next_access = nxt[first_miss] if generic else -1
                acc.position = first_miss
            else:
                acc.block_id = 0
                acc.cost = 0
                acc.cost_exact = 0.0
                acc.next_access = -1
                acc.position = -1
            acc.vtime = V0
            acc.req_vtime = V0 + B
            progress = 0
            # NOTE: with pins on, every resident block of the request (a match hit) is pinned, so a
            # strictly pin-honouring policy (STRICT_PINS) takes none of them while ``n_resident - n_pinned`` unpinned
            # blocks can cover all the victims: no "victim in the request" check is needed then.
            trusted = (pin and self.policy.strict_pins and self.policy.n_resident - self.policy.n_pinned >= needed)
            if hold and needed > self.policy.n_resident - self.policy.n_pinned:
                # NOTE: live admission: blocks held by running requests cannot be evicted (an
                # engine would make the request wait); the shadow skips it instead.
                self._unpin_match(ids, B)
                self._unserve()
                return 1
            if trusted and not generic:
                # NOTE: the fast kinds evict one at a time anyway (no evict_n of their own); with
                # enough unpinned blocks every call returns a victim outside the request.
                if self.kind == K_LRU:
                    _evict_trusted(self.p_lru, needed, &acc)
                elif self.kind == K_FIFO:
                    _evict_trusted(self.p_fifo, needed, &acc)
                elif self.kind == K_CLOCK:
                    _evict_trusted(self.p_clock, needed, &acc)
                elif self.kind == K_SIEVE:
                    _evict_trusted(self.p_sieve, needed, &acc)
                elif self.kind == K_VLLM:
                    _evict_trusted(self.p_vllm, needed, &acc)
                else:
                    self.policy.evict_n(&acc, needed, self.evbuf)
                self.n_eviction += needed
                progress = needed
            while progress < needed:
                n_pinned0 = self.policy.n_pinned
                k = self._evict_batch(needed - progress, &acc)
                if k <= 0:
                    self._unpin_match(ids, B)
                    if hold:
                        # NOTE: live admission into a cache full of in-flight (held) blocks:
                        # the engine would have had to wait; the shadow skips the request.
                        self._unserve()
                        return 1
                    self._fail(FAIL_STUCK, req_index, 0)
                    return -1
                self.n_eviction += k
                # NOTE: with pins on, every block of the request a victim could be (a resident
                # one: a match hit) is pinned, and evicting a pinned block lowers n_pinned; if it
                # did not move, no victim of this batch was the request's (no search needed).
                if trusted or (pin and self.policy.n_pinned == n_pinned0):
                    progress += k
                    continue
                for j in range(k):
                    victim = self.evbuf[j]
                    if sorted_unique:
                        in_alpha = _bsearch(ids, B, victim)
                    else:
                        si = self._sslot(victim)
                        in_alpha = self.sgen[si] == self.gen
                    if in_alpha:
                        self.n_self_eviction += 1
                    else:
                        progress += 1

        # 3. access
        if generic:
            ctx.block_ids = ids
            ctx.n_blocks = B
            ctx.timestamp_s = ts
            ctx.req_vtime = V0 + B
            ctx.vtime = V0
            self.policy.on_request(&ctx)
        acc.req_vtime = V0 + B
        if self.kind == K_LRU:
            n_ev_access = _access(self, self.p_lru, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_FIFO:
            n_ev_access = _access(self, self.p_fifo, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_CLOCK:
            n_ev_access = _access(self, self.p_clock, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_SIEVE:
            n_ev_access = _access(self, self.p_sieve, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_VLLM:
            n_ev_access = _access(self, self.p_vllm, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_S3FIFO:
            n_ev_access = _access(self, self.p_s3fifo, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        elif self.kind == K_ARC:
            n_ev_access = _access(self, self.p_arc, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        else:
            n_ev_access = _access(self, self.policy, ids, B, nxt, cexact, cint, n_anonymous,
                                  sorted_unique, &acc, req_index)
        if n_ev_access < 0:
            self._unpin_match(ids, B)
            return -1
        if self.policy.nomem:
            self._fail(FAIL_NOMEM, req_index, 0)
            self._unpin_match(ids, B)
            return -1

        # 4. verify
        # NOTE: with distinct ids every ``slots[i]`` was right when block i was accessed; only an
        # eviction during the access phase can make one stale, so without one verify is a no-op.
        if self.verify and (n_ev_access > 0 or not sorted_unique):
            for i in range(B):
                slot = slots[i]
                if slot < 0 or self.policy.slot_id(slot) != ids[i]:
                    slot = self.policy.find(ids[i])
                    if slot < 0:
                        self._fail(FAIL_VERIFY, req_index, ids[i])
                        self._unpin_match(ids, B)
                        return -1
                    slots[i] = slot

        # 5. unpin / hold / release
        self._unpin_match(ids, B)
        if hold:
            for i in range(B):
                slot = slots[i]
                if slot >= 0 and self.policy.slot_id(slot) == ids[i]:
                    self.policy._pin(slot)
            self.reserved += n_anonymous
        elif self.policy.wants_release:
            if self.kind == K_VLLM:
                _release_request(self.p_vllm, ids, B, slots)
            else:
                _release_request(self.policy, ids, B, slots)
        return 0

    cdef inline void _unpin_match(self, const int64_t* ids, int64_t B) noexcept nogil:
        """Drop the match-phase pins (a pinned block evicted meanwhile had its count reset).

        NOTE: only the match's hits were pinned (``hitidx``); ``slots`` is overwritten in the
        access phase for misses only, so a hit's slot is still the one it was pinned in unless
        the block left meanwhile (then ``slot_ids`` no longer matches and there is no pin to drop).
        A position that missed at match time and was filled later never carries a pin of this
        request's match (its slot was taken afresh with no pin), so skipping it changes nothing.
        """
        cdef int64_t h, i, slot
        for h in range(self.n_hitidx):
            i = self.hitidx[h]
            slot = self.slots[i]
            if slot >= 0 and self.policy.slot_id(slot) == ids[i]:
                self.policy._unpin(slot)
        self.n_hitidx = 0

    cdef void _unserve(self) noexcept nogil:
        """Take the last request's match statistics back and count it as skipped."""
        self.n_req -= 1
        self.n_req_skipped += 1
        self.n_blocks -= self.last_blocks
        self.n_hits -= self.last_hits
        self.n_prefix_hits -= self.last_prefix_hits
        self.total_cost -= self.last_cost
        self.saved_cost -= self.last_saved
        self.prefix_saved_cost -= self.last_prefix_saved

    cdef inline void _hole(self, int64_t start, int64_t length) noexcept nogil:
        self.n_holes += 1
        self.hole_len_sum += length
        if length > self.max_hole_len:
            self.max_hole_len = length

    cdef void _dump_holes(self, int64_t req_index, int64_t n) noexcept nogil:
        cdef int64_t i = 0, start
        fprintf(self.holes, b"Request %lld:", <long long>req_index)
        while i < n:
            if self.slots[i] < 0:
                start = i
                while i < n and self.slots[i] < 0:
                    i += 1
                fprintf(self.holes, b" (idx: %lld, len: %lld)", <long long>start, <long long>(i - start))
            else:
                i += 1
        fprintf(self.holes, b"\n")

    cdef inline void _fail(self, int kind, int64_t req_index, int64_t block) noexcept nogil:
        # NOTE: a policy out of memory may refuse or misplace blocks; that, not the symptom,
        # is the failure to report.
        self.failed = FAIL_NOMEM if self.policy.nomem else kind
        self.failed_req = req_index
        self.failed_block = block

    cdef inline void _prefetch_ghost(self, int64_t block_id) noexcept nogil:
        """Start loading the ghost-table entry the access of missed ``block_id`` probes."""
        if self.kind == K_ARC:
            gr_prefetch(&self.p_arc.ghost, block_id)
        elif self.p_s3fifo.ghost_size > 0:
            gr_prefetch(&self.p_s3fifo.ghost, block_id)

    # ---- Python entry points ----

    cdef int64_t _serve_range(self, const int64_t* off, const int64_t* ids, const int64_t* nxt,
                              const double* ts, const double* cexact, const int64_t* cint,
                              const int64_t* n_match, const int64_t* n_anon, int64_t r0,
                              int64_t r1, int64_t first_request) noexcept nogil:
        """Serve requests ``r0 .. r1-1`` of a batch (``n_match`` NULL: every block looked up;
        ``n_anon`` NULL: no anonymous slots)."""
        cdef int64_t r, a, b, c, served = 0, pf_cur, pf_next = 0
        cdef int rc
        for r in range(r0, r1):
            a = off[r]
            b = off[r + 1]
            pf_cur = pf_next
            pf_next = 0
            if r + 1 < r1 and self.pf_table:
                pf_next = min(off[r + 2] - b, 64)
                # NOTE: start loading the next request's table entries now: one request's work
                # is enough time for them to arrive, where serve's own prefetch is too late for
                # the first probes.
                # NOTE: the resident table only: a ghost entry is read for a miss alone, so ARC's
                # and s3fifo's are prefetched by the match phase's misses (``pf_ghost``), one
                # eviction phase before the access reads them.
                for c in range(b, min(off[r + 2], b + 64)):
                    self.policy.prefetch(ids[c])
            self.n_prefetched = pf_cur
            rc = self.serve(&ids[a], b - a, &nxt[a], cexact, cint, ts[r], first_request + r,
                            b - a if n_match == NULL else n_match[r],
                            0 if n_anon == NULL else n_anon[r], False)
            if rc == 0:
                served += 1
            elif rc < 0:
                break
        return served

    def serve_batch(self, const int64_t[::1] offsets, const int64_t[::1] block_ids,
                    const int64_t[::1] next_access, const double[::1] timestamps,
                    const double[::1] cost_exact, const int64_t[::1] cost_int,
                    int64_t first_request, const int64_t[::1] n_match=None,
                    const int64_t[::1] n_anonymous=None) -> int:
        """Serve every request of a batch with the GIL released; returns how many were served.

        ``n_match[r]`` (optional) is how many leading blocks of request r are looked up;
        ``n_anonymous[r]`` (optional) how many anonymous slots it holds while it is served.
        """
        cdef int64_t n = offsets.shape[0] - 1, served
        cdef const int64_t* nm = NULL
        cdef const int64_t* na = NULL
        cdef const int64_t* idp
        cdef const int64_t* nxp
        if n <= 0:
            return 0
        _check_batch(offsets, block_ids, timestamps, cost_exact, cost_int, n_match, n_anonymous)
        if next_access.shape[0] != block_ids.shape[0]:
            raise ValueError("next-access array of the wrong length")
        if n_match is not None:
            nm = &n_match[0]
        if n_anonymous is not None:
            na = &n_anonymous[0]
        # NOTE: a batch of empty requests has no entries; any valid pointer will do then.
        idp = &block_ids[0] if block_ids.shape[0] > 0 else &offsets[0]
        nxp = &next_access[0] if next_access.shape[0] > 0 else &offsets[0]
        with nogil:
            served = self._serve_range(&offsets[0], idp, nxp, &timestamps[0], &cost_exact[0],
                                       &cost_int[0], nm, na, 0, n, first_request)
        return served

    def admit(self, const int64_t[::1] block_ids, const int64_t[::1] next_access, int64_t n_match,
              int64_t n_anonymous, double timestamp_s, const double[::1] cost_exact,
              const int64_t[::1] cost_int, int64_t req_index) -> int:
        """Live admission: serve and keep the blocks pinned (and anonymous slots reserved)."""
        cdef int64_t B = block_ids.shape[0]
        cdef int rc
        self.reserve(B + n_anonymous + 1)
        with nogil:
            rc = self.serve(&block_ids[0] if B > 0 else NULL, B, &next_access[0] if B > 0 else NULL,
                            &cost_exact[0], &cost_int[0], timestamp_s, req_index,
                            min(n_match, B), n_anonymous, True)
        return rc

    def release(self, const int64_t[::1] block_ids, const int64_t[::1] extra_ids,
                const double[::1] cost_exact, const int64_t[::1] cost_int, int64_t n_anonymous,
                int64_t n_anonymous_final=0) -> None:
        """Live release: insert ``extra_ids`` (generated blocks), then unpin tail first.

        While the generated blocks go in, the request holds ``n_anonymous_final`` anonymous slots
        (vLLM's final partial block, still allocated until the request is freed): the admission's
        ``n_anonymous`` slots shrink to that many, or grow to it after the generated blocks (a
        prompt that ended on a block boundary reserved none; its final partial block was
        allocated after the generated ones, evicting if the cache was full).  Every anonymous
        slot is given back at the end.
        """
        cdef int64_t B = block_ids.shape[0], E = extra_ids.shape[0]
        cdef const int64_t* ip = &block_ids[0] if B > 0 else NULL
        cdef const int64_t* ep = &extra_ids[0] if E > 0 else NULL
        if cost_exact.shape[0] < B + E + 1 or cost_int.shape[0] < B + E + 1:
            raise ValueError("cost arrays shorter than the request's blocks")
        with nogil:
            self._release(ip, B, ep, E, &cost_exact[0], &cost_int[0], n_anonymous,
                          n_anonymous_final)

    cdef void _release(self, const int64_t* block_ids, int64_t B, const int64_t* extra_ids,
                       int64_t E, const double* cost_exact, const int64_t* cost_int,
                       int64_t n_anonymous, int64_t n_anonymous_final) noexcept nogil:
        """The body of :meth:`release` (``cost_*`` hold at least ``B + E + 1`` entries)."""
        cdef int64_t i, slot, bid, pos, victim, n_res, grow
        cdef Access acc
        cdef int64_t keep = min(n_anonymous_final, n_anonymous)
        if keep < 0:
            keep = 0
        self.reserved -= n_anonymous - keep
        if self.reserved < 0:
            self.reserved = 0
        for i in range(E):
            bid = extra_ids[i]
            pos = B + i
            self.vtime += 1
            acc.block_id = bid
            acc.cost = cost_int[pos]
            acc.cost_exact = cost_exact[pos]
            acc.next_access = -1
            acc.vtime = self.vtime
            acc.req_vtime = self.vtime
            acc.position = pos
            slot = self.policy.find(bid)
            if slot >= 0:
                n_res = self.policy.n_resident
                self.policy.hit(slot, &acc)
            else:
                if self.policy.n_resident + self.reserved >= self.policy.capacity:
                    victim = self.policy.evict(&acc)
                    if victim == 0:
                        continue
                    self.n_eviction += 1
                n_res = self.policy.n_resident + 1
                self.policy.insert(&acc)
            if self.policy.n_resident < n_res:          # spilled (see serve)
                self.n_eviction += n_res - self.policy.n_resident
        # NOTE: the final partial block beyond the admission's reservation is allocated after
        # the generated blocks (vLLM allocates a request's blocks in order); it takes a free slot
        # or evicts one block, like an insert of a block no request will ever look up.
        grow = n_anonymous_final - keep
        for i in range(grow):
            if self.policy.n_resident + self.reserved >= self.policy.capacity:
                pos = B + E
                self.vtime += 1
                acc.block_id = 0
                acc.cost = cost_int[pos]
                acc.cost_exact = cost_exact[pos]
                acc.next_access = -1
                acc.vtime = self.vtime
                acc.req_vtime = self.vtime
                acc.position = pos
                if self.policy.evict(&acc) == 0:
                    grow = i
                    break
                self.n_eviction += 1
            self.reserved += 1
        if grow < 0:
            grow = 0
        # NOTE: tail first, like vLLM's free_blocks(reversed(req_blocks)): the generated
        # blocks are the deepest, then the prompt from its last block to its root.
        if self.policy.wants_release:
            for i in range(E - 1, -1, -1):
                slot = self.policy.find(extra_ids[i])
                if slot >= 0:
                    self.policy.on_release(slot)
        for i in range(B - 1, -1, -1):
            slot = self.policy.find(block_ids[i])
            if slot >= 0:
                self.policy._unpin(slot)
                if self.policy.wants_release:
                    self.policy.on_release(slot)
        self.reserved -= keep + grow
        if self.reserved < 0:
            self.reserved = 0

    def live_batch(self, int64_t k, const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                   const int64_t[::1] block_ids, const int64_t[::1] next_access,
                   const double[::1] timestamps, const double[::1] cost_exact,
                   const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                   double[:, :, ::1] out_f, int64_t req0) -> int:
        """Serve a sequence of live admissions and releases in order, as cache ``k`` of a group.

        One call per drained batch instead of one per request (the connector's worker; all
        caches at once: :func:`live_batch_all`): the GIL is released for the whole batch and
        this cache's tables stay hot while it serves it.

        Event ``e`` is row ``ev[e] = (kind, a, b, c, link)`` over the entries
        ``offsets[e]:offsets[e+1]`` of ``block_ids`` (and of ``next_access``):

        * kind 0, admission: ``a`` = n_match, ``b`` = n_anonymous; request index ``req0`` + the
          number of admissions before it in the batch.  Writes ``out_i[e, k] = (rc, hits,
          prefix_hits)`` (rc as :meth:`admit`: 0 served) and ``out_f[e, k] = (cost, saved,
          prefix_saved)``.
        * kind 1, release: the entries are the admission's blocks then the generated ones;
          ``a`` = the admission's block count, ``b`` = its n_anonymous, ``c`` =
          n_anonymous_final.  Released only if served: ``out_i[link, k, 0] == 0`` when ``link
          >= 0`` (an admission earlier in this batch), else ``out_i[e, k, 0] == 0`` as set by
          the caller.

        ``cost_*`` must hold ``max entries per event + 1`` values.  Returns the admissions served.
        """
        cdef int64_t max_len, served
        if ev.shape[0] == 0:
            return 0
        if k < 0 or k >= out_i.shape[1] or k >= out_f.shape[1]:
            raise ValueError("live_batch: cache index out of range")
        max_len = _check_live_batch(ev, offsets, block_ids, next_access, timestamps, cost_exact,
                                    cost_int, out_i, out_f)
        self.reserve(max_len + 1)
        with nogil:
            served = self._live_batch(k, &ev[0, 0], ev.shape[0], &offsets[0],
                                      &block_ids[0] if block_ids.shape[0] > 0 else &offsets[0],
                                      &next_access[0] if next_access.shape[0] > 0 else &offsets[0],
                                      &timestamps[0], &cost_exact[0], &cost_int[0],
                                      &out_i[0, 0, 0], out_i.shape[1], &out_f[0, 0, 0], req0)
        return served

    cdef int64_t _live_batch(self, int64_t k, const int64_t* ev, int64_t n, const int64_t* off,
                             const int64_t* idp, const int64_t* nxp, const double* ts,
                             const double* cexact, const int64_t* cint, int64_t* out_i,
                             int64_t K, double* out_f, int64_t req0) noexcept nogil:
        """The body of :meth:`live_batch` on checked arrays (``ev`` rows of 5, ``out_*`` of
        shape (n, K, 3), C order; scratch reserved for the longest event)."""
        cdef int64_t e, a0, L, link, served = 0, req = req0, o
        cdef const int64_t* row
        cdef int rc
        for e in range(n):
            row = &ev[5 * e]
            a0 = off[e]
            L = off[e + 1] - a0
            o = (e * K + k) * 3
            if row[0] == 0:
                rc = self.serve(&idp[a0], L, &nxp[a0], cexact, cint, ts[e], req,
                                min(row[1], L), row[2], True)
                req += 1
                out_i[o] = rc
                if rc == 0:
                    served += 1
                    out_i[o + 1] = self.last_hits
                    out_i[o + 2] = self.last_prefix_hits
                    out_f[o] = self.last_cost
                    out_f[o + 1] = self.last_saved
                    out_f[o + 2] = self.last_prefix_saved
                else:
                    out_i[o + 1] = 0
                    out_i[o + 2] = 0
                    out_f[o] = 0.0
                    out_f[o + 1] = 0.0
                    out_f[o + 2] = 0.0
            else:
                link = row[4]
                rc = out_i[(link * K + k) * 3] if link >= 0 else out_i[o]
                if rc == 0:
                    self._release(&idp[a0], row[1], &idp[a0 + row[1]], L - row[1], cexact, cint,
                                  row[2], row[3])
        return served

cdef int _check_batch(const int64_t[::1] offsets, const int64_t[::1] block_ids,
                      const double[::1] timestamps, const double[::1] cost_exact,
                      const int64_t[::1] cost_int, const int64_t[::1] n_match,
                      const int64_t[::1] n_anonymous) except -1:
    """Check the shapes of a batch's arrays before the loop reads them without bounds checks.

    ``offsets`` (n + 1 non-decreasing entries from 0) must stay inside ``block_ids``; the
    per-request arrays (``timestamps``, ``n_match``, ``n_anonymous``) need n entries and the
    per-position cost arrays one entry per block of the longest request.
    """
    cdef int64_t n = offsets.shape[0] - 1, r, longest = 0, d
    if offsets[0] != 0 or offsets[n] > block_ids.shape[0]:
        raise ValueError(f"offsets span 0..{offsets[n]}, outside the {block_ids.shape[0]} block ids")
    for r in range(n):
        d = offsets[r + 1] - offsets[r]
        if d < 0:
            raise ValueError(f"offsets decrease at request {r}")
        if d > longest:
            longest = d
    if timestamps.shape[0] < n:
        raise ValueError(f"one timestamp per request: {timestamps.shape[0]} for {n} requests")
    if n_match is not None and n_match.shape[0] < n:
        raise ValueError(f"one match length per request: {n_match.shape[0]} for {n} requests")
    if n_anonymous is not None and n_anonymous.shape[0] < n:
        raise ValueError(f"one anonymous-slot count per request: {n_anonymous.shape[0]} for "
                         f"{n} requests")
    if cost_exact.shape[0] < longest or cost_int.shape[0] < longest:
        raise ValueError(f"cost arrays of {min(cost_exact.shape[0], cost_int.shape[0])} "
                         f"positions for a request of {longest} blocks")
    return 0


def serve_chunks(list runs, list next_access, const int64_t[::1] offsets,
                 const int64_t[::1] block_ids, const double[::1] timestamps,
                 const double[::1] cost_exact, const int64_t[::1] cost_int, int64_t first_request,
                 const int64_t[::1] n_match=None, int64_t chunk_entries=16384,
                 const int64_t[::1] n_anonymous=None) -> None:
    """Step every cache of ``runs`` over a batch, a chunk of requests at a time.

    ``next_access[k]`` is the next-access array cache ``k`` reads (the oracles may get their own);
    ``n_match`` and ``n_anonymous`` as in :meth:`CacheRun.serve_batch`.
    NOTE: one chunk (about ``chunk_entries`` block entries, whole requests) is served in every
    cache before the next: the chunk's ids, next-access times and costs stay in the CPU cache
    while the caches take turns, instead of each cache streaming the whole batch from memory.
    The GIL is released while each cache serves a chunk, so groups of caches can run on threads.
    """
    cdef int64_t n = offsets.shape[0] - 1, r0 = 0, r1, k, n_runs = len(runs), t0
    cdef const int64_t* off
    cdef const int64_t* idp
    cdef const int64_t* nm = NULL
    cdef const int64_t* na = NULL
    cdef const double* tsp
    cdef const double* cep
    cdef const int64_t* cip
    cdef const int64_t[::1] mv
    cdef const int64_t** nxps
    cdef CacheRun run
    if n <= 0 or n_runs == 0:
        return
    if len(next_access) != n_runs:
        raise ValueError("one next-access array per cache")
    _check_batch(offsets, block_ids, timestamps, cost_exact, cost_int, n_match, n_anonymous)
    off = &offsets[0]
    idp = &block_ids[0] if block_ids.shape[0] > 0 else off
    tsp = &timestamps[0]
    cep = &cost_exact[0]
    cip = &cost_int[0]
    if n_match is not None:
        nm = &n_match[0]
    if n_anonymous is not None:
        na = &n_anonymous[0]
    if chunk_entries < 1:
        chunk_entries = 1
    nxps = <const int64_t**>malloc(n_runs * sizeof(int64_t*))
    if nxps == NULL:
        raise MemoryError()
    try:
        for k in range(n_runs):
            # NOTE: the arrays stay alive in ``next_access`` for the whole call.
            mv = next_access[k]
            if mv.shape[0] != block_ids.shape[0]:
                raise ValueError("next-access array of the wrong length")
            nxps[k] = &mv[0] if mv.shape[0] > 0 else off
        while r0 < n:
            r1 = r0 + 1
            while r1 < n and off[r1 + 1] - off[r0] <= chunk_entries:
                r1 += 1
            for k in range(n_runs):
                run = <CacheRun>runs[k]
                with nogil:
                    t0 = _thread_cpu_ns()
                    run._serve_range(off, idp, nxps[k], tsp, cep, cip, nm, na, r0, r1,
                                     first_request)
                    run.busy_ns += _thread_cpu_ns() - t0
            r0 = r1
    finally:
        free(nxps)


cdef int64_t _check_live_batch(const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                               const int64_t[::1] block_ids, const int64_t[::1] next_access,
                               const double[::1] timestamps, const double[::1] cost_exact,
                               const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                               double[:, :, ::1] out_f) except -1:
    """Check a live batch's arrays (see :meth:`CacheRun.live_batch`); its longest event."""
    cdef int64_t n = ev.shape[0], e, L, max_len = 0
    if (ev.shape[1] != 5 or offsets.shape[0] != n + 1 or out_i.shape[0] < n
            or out_f.shape[0] < n or out_i.shape[1] != out_f.shape[1]
            or out_i.shape[2] != 3 or out_f.shape[2] != 3
            or next_access.shape[0] != block_ids.shape[0] or timestamps.shape[0] < n
            or offsets[n] > block_ids.shape[0] or offsets[0] != 0):
        raise ValueError("live_batch: inconsistent array shapes")
    for e in range(n):
        L = offsets[e + 1] - offsets[e]
        if L < 0 or ev[e, 1] < 0 or ev[e, 2] < 0 or ev[e, 3] < 0:
            raise ValueError(f"live_batch: bad event {e}")
        if ev[e, 0] == 1 and ev[e, 1] > L:
            raise ValueError(f"live_batch: release {e} has fewer entries than its blocks")
        if ev[e, 4] >= e or (ev[e, 4] >= 0 and ev[ev[e, 4], 0] != 0):
            raise ValueError(f"live_batch: release {e} does not link to an earlier admission")
        if L + ev[e, 2] > max_len:
            max_len = L + ev[e, 2]
    if cost_exact.shape[0] < max_len + 1 or cost_int.shape[0] < max_len + 1:
        raise ValueError("live_batch: cost arrays shorter than the longest event")
    return max_len


def live_batch_all(list runs, const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                   const int64_t[::1] block_ids, const int64_t[::1] next_access,
                   const double[::1] timestamps, const double[::1] cost_exact,
                   const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                   double[:, :, ::1] out_f, int64_t req0) -> None:
    """:meth:`CacheRun.live_batch` for every cache of ``runs`` (cache ``k`` = ``runs[k]``).

    NOTE: one Python call per batch, the arrays checked once and the GIL released once: at one
    event per batch (a quiet engine) the per-cache call overhead was most of the worker's time.
    """
    cdef int64_t n = ev.shape[0], k, K = len(runs), max_len
    cdef CacheRun run
    cdef const int64_t* idp
    cdef const int64_t* nxp
    if n == 0 or K == 0:
        return
    if out_i.shape[1] != K:
        raise ValueError("live_batch_all: one output column per cache")
    max_len = _check_live_batch(ev, offsets, block_ids, next_access, timestamps, cost_exact,
                                cost_int, out_i, out_f)
    for k in range(K):
        (<CacheRun?>runs[k]).reserve(max_len + 1)
    idp = &block_ids[0] if block_ids.shape[0] > 0 else &offsets[0]
    nxp = &next_access[0] if next_access.shape[0] > 0 else &offsets[0]
    for k in range(K):
        run = <CacheRun>runs[k]
        with nogil:
            run._live_batch(k, &ev[0, 0], n, &offsets[0], idp, nxp, &timestamps[0],
                            &cost_exact[0], &cost_int[0], &out_i[0, 0, 0], K, &out_f[0, 0, 0],
                            req0)
