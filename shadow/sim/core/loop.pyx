# cython: language_level=3
"""The serve loop: one (policy, capacity) cache stepped over requests, no Python object per block.

Per request (see docs/sim.md and PrefixSim's design; ``--no-pin`` gives the older, unpinned loop):

0. **skip**: more distinct blocks (plus anonymous slots) than the cache can hold -> counted, untouched.
   A request that passes gets ``set_request_ctx`` (PrefixSim's hook of that name: timestamp,
   category, session) when its policy sets ``wants_request_ctx``, before anything else.
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

Leaf-only eviction (``policy.leaf`` set, core/policy.pxd): after each insert the loop reports the
block's prefix parent, the previous id of the request (or of the generated run) that inserted
it; room held by running requests is counted from request pins only (``n_pinned -
n_hold_only``), a leaf hold being freed by evicting the children first.

Invariant after each request: ``policy.n_resident + reserved <= policy.capacity``.

Structure: ``_serve`` (one request), ``_release`` (a live release), ``_serve_range`` and
``_live_events`` are fused over the policy classes (``AnyPolicy``): one compiled request path per
inlined policy plus the generic one, chosen once per call by ``_dispatch``.  The entry points
(:meth:`CacheRun.serve_batch`, :func:`serve_chunks`, :meth:`CacheRun.live_batch`,
:func:`live_batch_all`) check their arrays, describe the work as a ``Call`` and dispatch it.
"""

from libc.stdint cimport int64_t, int32_t, uint32_t, uint8_t, uint64_t
from libc.stdlib cimport malloc, calloc, free
from libc.stdio cimport FILE, fclose

from shadow.sim.core.policy cimport Policy, Access, RequestCtx, ArrivalCtx
from shadow.sim.core.idtable cimport SHADOW_PREFETCH
from shadow.sim.policies._shared.dlist cimport LR_RING_MIN
from shadow.sim.policies.recency.lru cimport LRU
from shadow.sim.policies.recency.fifo cimport FIFO
from shadow.sim.policies.recency.clock cimport Clock
from shadow.sim.policies.recency.sieve cimport Sieve
from shadow.sim.policies.engine_exact.vllm cimport VLLM
from shadow.sim.policies.engine_exact.sglang cimport SGLang
from shadow.sim.policies.adaptive.s3fifo cimport S3FIFO
from shadow.sim.policies.adaptive.arc cimport ARC
from shadow.sim.policies._shared.ghost cimport gr_prefetch
from shadow.sim.core.holes cimport holes_open, holes_close, holes_dump
from shadow.sim.live.wire cimport (check_live_batch, EV_ADMIT, ROW_KIND, ROW_N_BLOCKS,
                                  ROW_N_MATCH, ROW_N_ANONYMOUS, ROW_N_ANONYMOUS_FINAL, ROW_LINK,
                                  ROW_INFO, INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT,
                                  INFO_WIDTH, ROW_WIDTH, OUT_RC, OUT_HITS, OUT_PREFIX_HITS, OUT_COST,
                                  OUT_SAVED, OUT_PREFIX_SAVED, OUT_WIDTH)

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

# NOTE: the policies whose operations are short get a direct, inlined path in the loop (their
# ``fast_*`` methods, declared inline in their .pxd): a virtual call per block costs about as much
# as their whole hit or insert.  Any other policy (or a subclass) is K_GENERIC and goes through the
# Policy vtable.  The fast kinds have no on_request and no evict_n of their own, read nothing of an
# Access but the id, and (but s3fifo and arc) are STRICT_PINS.

ctypedef fused AnyPolicy:
    LRU
    FIFO
    Clock
    Sieve
    VLLM
    S3FIFO
    ARC
    SGLang
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
    if AnyPolicy is VLLM or AnyPolicy is SGLang:
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


cdef inline void _leaf_link(AnyPolicy p, const int64_t* ids, int64_t B, int64_t i,
                            int64_t slot, bint sorted_unique, const int64_t* slots) noexcept nogil:
    """Report position ``i``'s insert into ``slot`` to the leaf state, with the slots the match
    and the access phase know: the parent's (position ``i - 1``) and a child's (``i + 1``).

    NOTE: with distinct ids a block missing at the match stays missing until its own get, so
    ``slots[i - 1] < 0`` then means the parent is not resident (deepest-first: its get comes
    next); a stale slot (evicted since) is checked by the policy.  With repeated ids: look up."""
    cdef int64_t ps = -2, cs = -1
    if i == 0:
        p._leaf_insert(slot, 0, -1, slots[1] if B > 1 else -1)
        return
    if sorted_unique:
        ps = slots[i - 1]
        if ps < 0:
            ps = -1
    if i + 1 < B:
        cs = slots[i + 1]
    p._leaf_insert(slot, ids[i - 1], ps, cs)


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
            if p.leaf != NULL:
                _leaf_link(p, ids, B, i, slot, sorted_unique, slots)
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


cdef inline void _prefetch_ghost(AnyPolicy p, int64_t block_id) noexcept nogil:
    """Start loading the ghost-table entry the access of missed ``block_id`` probes."""
    if AnyPolicy is ARC:
        gr_prefetch(&p.ghost, block_id)
    elif AnyPolicy is S3FIFO:
        if p.ghost_size > 0:
            gr_prefetch(&p.ghost, block_id)


cdef void _request_ctx(Policy p, int64_t B, double ts, const int64_t* info,
                      int64_t vtime) noexcept nogil:
    """Build the request's :c:type:`ArrivalCtx` and hand it to ``p.set_request_ctx``."""
    cdef ArrivalCtx rctx
    rctx.timestamp_s = ts
    rctx.n_blocks = B
    rctx.vtime = vtime
    if info != NULL:
        rctx.category = info[INFO_CATEGORY]
        rctx.session_id = info[INFO_SESSION]
        rctx.session_next_req = info[INFO_SESSION_NEXT]
    else:
        rctx.category = 0
        rctx.session_id = -1
        rctx.session_next_req = -1
    p.set_request_ctx(&rctx)


cdef int _serve(CacheRun run, AnyPolicy p, const int64_t* ids, int64_t B, const int64_t* nxt,
                const double* cexact, const int64_t* cint, double ts, const int64_t* info,
                int64_t req_index, int64_t n_match, int64_t n_anonymous,
                bint hold) noexcept nogil:
    """Serve one request in cache ``run`` (whose policy is ``p``); 0 served, 1 skipped, -1
    failed (see ``CacheRun.failed``).

    ``ts`` and ``info`` (the request's info row of live/wire.pxd, NULL: none) are what
    ``set_request_ctx`` gets.

    ``n_match`` blocks (a prefix of ``ids``) are looked up for statistics; all ``B`` are
    allocated and accessed.  ``hold`` keeps every block pinned (and ``n_anonymous`` slots
    reserved) until ``CacheRun.release``; otherwise pins drop and blocks are released at the end.
    """
    cdef int64_t i, j, k, slot, bid, n_distinct, n_missing = 0, first_miss = -1
    cdef int64_t cap_eff, needed, progress, victim, hole_start = -1
    cdef int64_t n_holes = 0, hole_len_sum = 0, max_hole_len = 0
    cdef bint sorted_unique = True, in_prefix = True, in_alpha, trusted
    cdef int64_t hits = 0, phits = 0, nh = 0, n_ev_access = 0
    cdef double cost_all = 0.0, saved = 0.0, psaved = 0.0
    cdef uint64_t si
    cdef Access acc
    cdef RequestCtx ctx
    cdef int64_t V0, step, n_res, n_lim = min(B, n_match), n_pinned0
    cdef int64_t* slots = run.slots
    cdef int64_t* hitidx = run.hitidx
    cdef bint pin = run.pin
    cdef int64_t n_pf = run.n_prefetched

    run.n_prefetched = 0
    run.n_hitidx = 0
    if run.failed:
        return -1
    if p.nomem:
        # NOTE: out of memory outside a serve (a live release's inserts): fail before this
        # request counts anything.
        run._fail(FAIL_NOMEM, req_index, 0)
        return -1
    # 0. skip check on the distinct count
    for i in range(1, B):
        if ids[i] <= ids[i - 1]:
            sorted_unique = False
            break
    if sorted_unique:
        n_distinct = B
    else:
        run._snew_gen()
        n_distinct = 0
        for i in range(B):
            if run._sadd(ids[i]):
                n_distinct += 1
    cap_eff = p.capacity - run.reserved
    if n_distinct + n_anonymous > cap_eff:
        run.n_req_skipped += 1
        if run.first_skip_req < 0:
            run.first_skip_req = req_index
            run.first_skip_distinct = n_distinct
        return 1
    run.n_req += 1
    if AnyPolicy is Policy:
        # NOTE: the inlined kinds have no hook; a generic policy pays one flag test per request
        # when it does not want the context.
        if p.wants_request_ctx:
            _request_ctx(p, B, ts, info, run.vtime)

    # 1. match
    # NOTE: the probes of a request are independent: prefetch their home entries first so
    # the table's cache misses overlap instead of stalling one after the other.
    # NOTE: the first ``n_pf`` were prefetched by _serve_range during the previous request
    # (one request ago: they have arrived; most requests have fewer than 64 blocks).  A small
    # cache's table sits in the L2, where the prefetches only cost instructions (``pf_table``).
    if run.pf_table:
        for i in range(n_pf, min(B, 128)):
            p.prefetch(ids[i])
    for i in range(0, n_lim, 8):
        SHADOW_PREFETCH(&cexact[i])
    # NOTE: the statistics cover the first ``n_match`` blocks; the rest (``--lookup``) are
    # only probed, so the loop is split there instead of testing ``i < n_match`` per block.
    for i in range(n_lim):
        slot = p.find(ids[i])
        slots[i] = slot
        cost_all += cexact[i]
        if slot >= 0:
            if pin:
                p._pin(slot)
                hitidx[nh] = i
                nh += 1
            hits += 1
            saved += cexact[i]
            if in_prefix:
                phits += 1
                psaved += cexact[i]
            if hole_start >= 0:
                n_holes += 1
                hole_len_sum += i - hole_start
                max_hole_len = max(max_hole_len, i - hole_start)
                hole_start = -1
        else:
            if first_miss < 0:
                first_miss = i
            in_prefix = False
            if hole_start < 0:
                hole_start = i
            if run.pf_ghost:
                _prefetch_ghost(p, ids[i])
            if sorted_unique:
                n_missing += 1
            else:
                si = run._sslot(ids[i])
                if run.smark[si] == 0:
                    run.smark[si] = 1
                    n_missing += 1
    for i in range(n_lim, B):
        bid = ids[i]
        slot = p.find(bid)
        slots[i] = slot
        if slot >= 0:
            if pin:
                p._pin(slot)
                hitidx[nh] = i
                nh += 1
        else:
            if first_miss < 0:
                first_miss = i
            if sorted_unique:
                n_missing += 1
            else:
                si = run._sslot(bid)
                if run.smark[si] == 0:
                    run.smark[si] = 1
                    n_missing += 1
    run.n_hitidx = nh
    if hole_start >= 0:
        n_holes += 1
        hole_len_sum += n_lim - hole_start
        max_hole_len = max(max_hole_len, n_lim - hole_start)
    run.n_blocks += n_lim
    run.n_hits += hits
    run.n_prefix_hits += phits
    run.total_cost += cost_all
    run.saved_cost += saved
    run.prefix_saved_cost += psaved
    run.last_blocks = n_lim
    run.last_hits = hits
    run.last_prefix_hits = phits
    run.last_cost = cost_all
    run.last_saved = saved
    run.last_prefix_saved = psaved

    # 2. allocate
    V0 = run.vtime
    needed = n_missing + n_anonymous - (cap_eff - p.n_resident)
    if needed > 0:
        if first_miss >= 0:
            acc.block_id = ids[first_miss]
            acc.cost = cint[first_miss]
            acc.cost_exact = cexact[first_miss]
            # NOTE: the fast kinds read nothing of ``acc`` but the id, and ``nxt`` is read
            # nowhere else for them: this one load per request is a cache miss (the array is
            # streamed past, one entry per request), a measurable share of lru/fifo's loop time
            # (docs/performance.md, "Measured choices").
            acc.next_access = nxt[first_miss] if AnyPolicy is Policy else -1
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
        # strictly pin-honouring policy (STRICT_PINS) takes none of them while ``n_resident -
        # n_pinned`` unpinned
        # blocks can cover all the victims: no "victim in the request" check is needed then.
        trusted = (pin and p.strict_pins and p.n_resident - p.n_pinned >= needed)
        if hold and needed > p.n_resident - (p.n_pinned - p.n_hold_only):
            # NOTE: live admission: blocks held by running requests cannot be evicted (an
            # engine would make the request wait); the shadow skips it instead.
            run._unpin_match(ids, B)
            run._unserve()
            return 1
        if trusted and AnyPolicy is not Policy:
            # NOTE: the fast kinds evict one at a time anyway (no evict_n of their own); with
            # enough unpinned blocks every call returns a victim outside the request.
            _evict_trusted(p, needed, &acc)
            run.n_eviction += needed
            progress = needed
        while progress < needed:
            n_pinned0 = p.n_pinned - p.n_hold_only
            k = _evict_n(p, needed - progress, &acc, run.evbuf)
            if k <= 0:
                run._unpin_match(ids, B)
                if hold:
                    # NOTE: live admission into a cache full of in-flight (held) blocks:
                    # the engine would have had to wait; the shadow skips the request.
                    run._unserve()
                    return 1
                run._fail(FAIL_STUCK, req_index, 0)
                return -1
            run.n_eviction += k
            # NOTE: with pins on, every block of the request a victim could be (a resident
            # one: a match hit) is pinned, and evicting a pinned block lowers the request pins'
            # count (leaf holds apart: a hold that goes with its victim or is released by one
            # leaves it as it was); if it did not move, no victim of this batch was the
            # request's (no search needed).
            if trusted or (pin and p.n_pinned - p.n_hold_only == n_pinned0):
                progress += k
                continue
            for j in range(k):
                victim = run.evbuf[j]
                if sorted_unique:
                    in_alpha = _bsearch(ids, B, victim)
                else:
                    si = run._sslot(victim)
                    in_alpha = run.sgen[si] == run.gen
                if in_alpha:
                    run.n_self_eviction += 1
                else:
                    progress += 1

    # NOTE: the holes count (and are written) once the request is sure to be served: a live
    # admission skipped for held room (above) has none.
    run.n_holes += n_holes
    run.hole_len_sum += hole_len_sum
    run.max_hole_len = max(run.max_hole_len, max_hole_len)
    if run.holes != NULL:
        holes_dump(run.holes, req_index, slots, n_lim)

    # 3. access
    if AnyPolicy is Policy:
        ctx.block_ids = ids
        ctx.n_blocks = B
        ctx.timestamp_s = ts
        ctx.req_vtime = V0 + B
        ctx.vtime = V0
        n_res = p.n_resident
        p.on_request(&ctx)
        # NOTE: a policy may free blocks here (the session family frees what a session's turn
        # dropped, PrefixSim's record_request): evictions, never unexpected ones (phase 3 only)
        if p.n_resident < n_res:
            run.n_eviction += n_res - p.n_resident
    acc.req_vtime = V0 + B
    n_ev_access = _access(run, p, ids, B, nxt, cexact, cint, n_anonymous, sorted_unique, &acc,
                          req_index)
    if n_ev_access < 0:
        run._unpin_match(ids, B)
        return -1
    if p.nomem:
        run._fail(FAIL_NOMEM, req_index, 0)
        run._unpin_match(ids, B)
        return -1

    # 4. verify
    # NOTE: with distinct ids every ``slots[i]`` was right when block i was accessed; only an
    # eviction during the access phase can make one stale, so without one verify is a no-op.
    if run.verify and (n_ev_access > 0 or not sorted_unique):
        for i in range(B):
            slot = slots[i]
            if slot < 0 or p.slot_id(slot) != ids[i]:
                slot = p.find(ids[i])
                if slot < 0:
                    run._fail(FAIL_VERIFY, req_index, ids[i])
                    run._unpin_match(ids, B)
                    return -1
                slots[i] = slot

    # 5. unpin / hold / release
    run._unpin_match(ids, B)
    if hold:
        # NOTE: one pin per position, as the release drops one per position: a repeated id's
        # later position may hold a stale slot (its access found the block by id), so look it up.
        for i in range(B):
            slot = slots[i]
            if slot < 0 or p.slot_id(slot) != ids[i]:
                slot = p.find(ids[i])
            if slot >= 0:
                p._pin(slot)
        run.reserved += n_anonymous
    elif p.wants_release:
        _release_request(p, ids, B, slots)
    return 0



cdef void _release(CacheRun run, AnyPolicy p, const int64_t* block_ids, int64_t B,
                   const int64_t* extra_ids, int64_t E, const double* cost_exact,
                   const int64_t* cost_int, int64_t n_anonymous,
                   int64_t n_anonymous_final) noexcept nogil:
    """Live release: insert ``extra_ids`` (generated blocks), then unpin tail first.

    While the generated blocks go in, the request holds ``n_anonymous_final`` anonymous slots
    (vLLM's final partial block, still allocated until the request is freed): the admission's
    ``n_anonymous`` slots shrink to that many, or grow to it after the generated blocks (a
    prompt that ended on a block boundary reserved none; its final partial block was
    allocated after the generated ones, evicting if the cache was full).  Every anonymous
    slot is given back at the end.  ``cost_*`` hold at least ``B + E + 1`` entries.
    """
    cdef int64_t i, slot, bid, pos, victim, n_res, grow
    cdef Access acc
    cdef int64_t keep = min(n_anonymous_final, n_anonymous)
    if run.failed:
        return
    if keep < 0:
        keep = 0
    run.reserved -= n_anonymous - keep
    if run.reserved < 0:
        run.reserved = 0
    for i in range(E):
        bid = extra_ids[i]
        pos = B + i
        run.vtime += 1
        acc.block_id = bid
        acc.cost = cost_int[pos]
        acc.cost_exact = cost_exact[pos]
        acc.next_access = -1
        acc.vtime = run.vtime
        acc.req_vtime = run.vtime
        acc.position = pos
        slot = p.find(bid)
        if slot >= 0:
            n_res = p.n_resident
            _hit(p, slot, &acc)
        else:
            if p.n_resident + run.reserved >= p.capacity:
                # NOTE: every resident block held by running requests: none may go (vLLM's
                # free queue is empty), so the generated block is not cached.
                if p.n_resident - (p.n_pinned - p.n_hold_only) <= 0:
                    continue
                victim = _evict(p, &acc)
                if victim == 0:
                    continue
                run.n_eviction += 1
            n_res = p.n_resident + 1
            slot = _insert(p, &acc)
            if p.leaf != NULL:
                p._leaf_insert(slot, extra_ids[i - 1] if i > 0 else
                               (block_ids[B - 1] if B > 0 else 0), -2, -1)
        if p.n_resident < n_res:          # spilled (see _access)
            run.n_eviction += n_res - p.n_resident
    # NOTE: the final partial block beyond the admission's reservation is allocated after
    # the generated blocks (vLLM allocates a request's blocks in order); it takes a free slot
    # or evicts one block, like an insert of a block no request will ever look up.
    grow = n_anonymous_final - keep
    for i in range(grow):
        if p.n_resident + run.reserved >= p.capacity:
            if p.n_resident - (p.n_pinned - p.n_hold_only) <= 0:
                grow = i
                break
            pos = B + E
            run.vtime += 1
            acc.block_id = 0
            acc.cost = cost_int[pos]
            acc.cost_exact = cost_exact[pos]
            acc.next_access = -1
            acc.vtime = run.vtime
            acc.req_vtime = run.vtime
            acc.position = pos
            if _evict(p, &acc) == 0:
                grow = i
                break
            run.n_eviction += 1
        run.reserved += 1
    if grow < 0:
        grow = 0
    # NOTE: tail first, like vLLM's free_blocks(reversed(req_blocks)): the generated
    # blocks are the deepest, then the prompt from its last block to its root.
    if p.wants_release:
        for i in range(E - 1, -1, -1):
            slot = p.find(extra_ids[i])
            if slot >= 0:
                _on_release(p, slot)
    for i in range(B - 1, -1, -1):
        slot = p.find(block_ids[i])
        if slot >= 0:
            p._unpin(slot)
            if p.wants_release:
                _on_release(p, slot)
    run.reserved -= keep + grow
    if run.reserved < 0:
        run.reserved = 0


# ---- one call, one kind check: the request paths over a batch ----

cdef enum:
    CALL_RANGE = 0      # requests r0 .. r1-1 of a batch (offline; pins dropped after each)
    CALL_LIVE = 1       # live events 0 .. r1-1 (admissions held, releases): live/wire.pxd


cdef struct Call:
    int mode
    const int64_t* off            # entries of request/event r: off[r] .. off[r+1]-1
    const int64_t* ids
    const int64_t* nxt
    const double* ts              # per request/event
    const int64_t* info           # CALL_RANGE: info rows (live/wire.pxd) per request, NULL = none
    const double* cexact          # per position
    const int64_t* cint
    const int64_t* n_match        # CALL_RANGE: per request, NULL = every block
    const int64_t* n_anon         # CALL_RANGE: per request, NULL = none
    int64_t* out_ph               # CALL_RANGE: per request, its first-miss hit blocks (-1 not
                                  # served), NULL = not asked
    int64_t r0
    int64_t r1
    int64_t first_request         # index of request 0 (range) or of the first admission (live)
    const int64_t* ev             # CALL_LIVE: rows of ROW_WIDTH
    int64_t* out_i                # CALL_LIVE: (events, K, OUT_WIDTH), C order
    double* out_f
    int64_t k                     # CALL_LIVE: this cache's column
    int64_t K


cdef int64_t _serve_range(CacheRun run, AnyPolicy p, const Call* c) noexcept nogil:
    """Serve requests ``c.r0 .. c.r1-1``; how many were served."""
    cdef int64_t r, a, b, i, served = 0, pf_cur, pf_next = 0
    cdef const int64_t* off = c.off
    cdef const int64_t* ids = c.ids
    cdef const int64_t* info = NULL
    cdef int rc
    for r in range(c.r0, c.r1):
        a = off[r]
        b = off[r + 1]
        pf_cur = pf_next
        pf_next = 0
        if r + 1 < c.r1 and run.pf_table:
            pf_next = min(off[r + 2] - b, 64)
            # NOTE: start loading the next request's table entries now: one request's work
            # is enough time for them to arrive, where serve's own prefetch is too late for
            # the first probes.
            # NOTE: the resident table only: a ghost entry is read for a miss alone, so ARC's
            # and s3fifo's are prefetched by the match phase's misses (``pf_ghost``), one
            # eviction phase before the access reads them.
            for i in range(b, min(off[r + 2], b + 64)):
                p.prefetch(ids[i])
        run.n_prefetched = pf_cur
        if AnyPolicy is Policy:
            if c.info != NULL:
                info = &c.info[INFO_WIDTH * r]
        rc = _serve(run, p, &ids[a], b - a, &c.nxt[a], c.cexact, c.cint, c.ts[r], info,
                    c.first_request + r, b - a if c.n_match == NULL else c.n_match[r],
                    0 if c.n_anon == NULL else c.n_anon[r], False)
        if c.out_ph != NULL:
            c.out_ph[r] = run.last_prefix_hits if rc == 0 else -1
        if rc == 0:
            served += 1
        elif rc < 0:
            break
    return served


cdef int64_t _live_events(CacheRun run, AnyPolicy p, const Call* c) noexcept nogil:
    """Serve live events ``0 .. c.r1-1`` in order as cache ``c.k``; the admissions served."""
    cdef int64_t e, a0, L, nb, link, served = 0, req = c.first_request, o
    cdef const int64_t* row
    cdef int64_t* out_i = c.out_i
    cdef double* out_f = c.out_f
    cdef int rc
    for e in range(c.r1):
        row = &c.ev[ROW_WIDTH * e]
        a0 = c.off[e]
        L = c.off[e + 1] - a0
        o = (e * c.K + c.k) * OUT_WIDTH
        if row[ROW_KIND] == EV_ADMIT:
            rc = _serve(run, p, &c.ids[a0], L, &c.nxt[a0], c.cexact, c.cint, c.ts[e],
                        &row[ROW_INFO], req,
                        min(row[ROW_N_MATCH], L), row[ROW_N_ANONYMOUS], True)
            req += 1
            out_i[o + OUT_RC] = rc
            if rc == 0:
                served += 1
                out_i[o + OUT_HITS] = run.last_hits
                out_i[o + OUT_PREFIX_HITS] = run.last_prefix_hits
                out_f[o + OUT_COST] = run.last_cost
                out_f[o + OUT_SAVED] = run.last_saved
                out_f[o + OUT_PREFIX_SAVED] = run.last_prefix_saved
            else:
                out_i[o + OUT_HITS] = 0
                out_i[o + OUT_PREFIX_HITS] = 0
                out_f[o + OUT_COST] = 0.0
                out_f[o + OUT_SAVED] = 0.0
                out_f[o + OUT_PREFIX_SAVED] = 0.0
        else:
            link = row[ROW_LINK]
            rc = out_i[(link * c.K + c.k) * OUT_WIDTH + OUT_RC] if link >= 0 else out_i[o + OUT_RC]
            if rc == 0:
                nb = row[ROW_N_BLOCKS]
                _release(run, p, &c.ids[a0], nb, &c.ids[a0 + nb], L - nb, c.cexact, c.cint,
                         row[ROW_N_ANONYMOUS], row[ROW_N_ANONYMOUS_FINAL])
    return served


cdef inline int64_t _call(CacheRun run, AnyPolicy p, const Call* c) noexcept nogil:
    if c.mode == CALL_LIVE:
        return _live_events(run, p, c)
    return _serve_range(run, p, c)


# NOTE: to give a policy class an inlined path: its kind below, an entry in AnyPolicy, in
# _KINDS and in _dispatch (its ``fast_*`` methods in its .pxd: see shadow/sim/README.md).
cdef enum:
    K_GENERIC = 0
    K_LRU = 1
    K_FIFO = 2
    K_CLOCK = 3
    K_SIEVE = 4
    K_VLLM = 5
    K_S3FIFO = 6
    K_ARC = 7
    K_SGLANG = 8

#: the kind of each inlined class (by exact type: a subclass takes the generic path)
_KINDS = {LRU: K_LRU, FIFO: K_FIFO, Clock: K_CLOCK, Sieve: K_SIEVE, VLLM: K_VLLM,
          S3FIFO: K_S3FIFO, ARC: K_ARC, SGLang: K_SGLANG}


cdef int64_t _dispatch(CacheRun run, const Call* c) noexcept nogil:
    """Run ``c`` through the request path of ``run``'s policy kind: the one kind check per call."""
    cdef int kind = run.kind
    if kind == K_LRU:
        return _call(run, <LRU>run.policy, c)
    elif kind == K_FIFO:
        return _call(run, <FIFO>run.policy, c)
    elif kind == K_CLOCK:
        return _call(run, <Clock>run.policy, c)
    elif kind == K_SIEVE:
        return _call(run, <Sieve>run.policy, c)
    elif kind == K_VLLM:
        return _call(run, <VLLM>run.policy, c)
    elif kind == K_S3FIFO:
        return _call(run, <S3FIFO>run.policy, c)
    elif kind == K_ARC:
        return _call(run, <ARC>run.policy, c)
    elif kind == K_SGLANG:
        return _call(run, <SGLang>run.policy, c)
    return _call(run, run.policy, c)


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

    cdef int64_t n_prefetched      # leading ids of the next serve's request already prefetched
    cdef bint pf_table            # prefetch table entries ahead of the probes (large caches only)
    cdef bint pf_ghost            # prefetch a missed block's ghost entry at the match (ARC, s3fifo)
    cdef int64_t* slots
    cdef int64_t* hitidx          # positions the match phase pinned (its hits), in order
    cdef int64_t n_hitidx
    cdef int64_t* evbuf
    cdef bint overshoot           # the policy's evict_n may return more than asked (evbuf sized so)
    cdef int64_t scratch_cap
    cdef int64_t* skeys
    cdef uint32_t* sgen
    cdef uint8_t* smark
    cdef uint64_t smask
    cdef uint32_t gen
    cdef FILE* holes
    cdef str holes_path

    def __cinit__(self, Policy policy, bint pin=True, str replay_order="deepest-first", bint verify=True):
        if replay_order not in ("deepest-first", "prefix-order"):
            raise ValueError(f"bad replay order {replay_order!r}")
        self.policy = policy
        self.kind = _KINDS.get(type(policy), K_GENERIC)
        self.pin = pin
        policy.pin_enabled = pin
        # NOTE: from 32k slots (LR_RING_MIN) on, as the rings' prefetch-ahead: below, the table
        # sits in the L2 and the prefetches only cost (docs/performance.md, "Prefetches").
        self.pf_table = policy.capacity >= LR_RING_MIN
        self.pf_ghost = self.pf_table and self.kind in (K_ARC, K_S3FIFO)
        self.deepest_first = replay_order == "deepest-first"
        self.verify = verify
        self.first_skip_req = -1
        self.failed_req = -1
        self.busy_ns = 0
        self.scratch_cap = 0
        self.holes = NULL
        self.overshoot = bool(getattr(type(policy), "EVICT_N_OVERSHOOT", False))
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
        # NOTE: a policy whose evict_n frees whole groups (the session family) may return more
        # victims than asked, at most every resident block: its buffer has room for them all
        self.evbuf = <int64_t*>malloc(
            (max(n_blocks, self.policy.capacity + 1) if self.overshoot else n_blocks)
            * sizeof(int64_t))
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
        self.holes = holes_open(path)
        self.holes_path = path

    def close_holes(self) -> None:
        """Close the hole lines' file; OSError if any of its writes failed (a full disk)."""
        cdef FILE* f = self.holes
        if f != NULL:
            self.holes = NULL
            holes_close(f, self.holes_path)

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

    cdef inline void _fail(self, int kind, int64_t req_index, int64_t block) noexcept nogil:
        # NOTE: a policy out of memory may refuse or misplace blocks; that, not the symptom,
        # is the failure to report.
        self.failed = FAIL_NOMEM if self.policy.nomem else kind
        self.failed_req = req_index
        self.failed_block = block

    # ---- Python entry points ----

    def serve_batch(self, const int64_t[::1] offsets, const int64_t[::1] block_ids,
                    const int64_t[::1] next_access, const double[::1] timestamps,
                    const double[::1] cost_exact, const int64_t[::1] cost_int,
                    int64_t first_request, const int64_t[::1] n_match=None,
                    const int64_t[::1] n_anonymous=None,
                    const int64_t[:, ::1] info=None, int64_t[::1] prefix_hits=None) -> int:
        """Serve every request of a batch with the GIL released; returns how many were served.

        ``n_match[r]`` (optional) is how many leading blocks of request r are looked up;
        ``n_anonymous[r]`` (optional) how many anonymous slots it holds while it is served;
        ``info[r]`` (optional, ``(n, INFO_WIDTH)``) its info row (live/wire.pxd: category,
        session) for ``set_request_ctx``; without it category 0 and no session;
        ``prefix_hits[r]`` (optional) receives request r's first-miss hit blocks, -1 if it was
        not served (skipped, or the cache failed).
        """
        cdef int64_t n = offsets.shape[0] - 1, served
        cdef Call c
        if n <= 0:
            return 0
        _check_batch(offsets, block_ids, timestamps, cost_exact, cost_int, n_match, n_anonymous,
                     info)
        if next_access.shape[0] != block_ids.shape[0]:
            raise ValueError("next-access array of the wrong length")
        _range_call(&c, offsets, block_ids, timestamps, cost_exact, cost_int, n_match,
                    n_anonymous, first_request, info)
        c.out_ph = _prefix_out(prefix_hits, n)
        # NOTE: a batch of empty requests has no entries; any valid pointer will do then.
        c.nxt = &next_access[0] if next_access.shape[0] > 0 else c.off
        c.r0 = 0
        c.r1 = n
        with nogil:
            served = _dispatch(self, &c)
        return served

    def live_batch(self, int64_t k, const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                   const int64_t[::1] block_ids, const int64_t[::1] next_access,
                   const double[::1] timestamps, const double[::1] cost_exact,
                   const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                   double[:, :, ::1] out_f, int64_t req0) -> int:
        """Serve a sequence of live admissions and releases in order, as cache ``k`` of a group.

        One call per drained batch instead of one per request (the connector's worker; all
        caches at once: :func:`live_batch_all`): the GIL is released for the whole batch and
        this cache's tables stay hot while it serves it.  The rows of ``ev`` and the columns of
        ``out_i``/``out_f`` are the wire format of ``live/wire.pxd``; admission ``e`` gets request
        index ``req0`` + the admissions before it in the batch.  ``cost_*`` must hold ``longest
        event + 1`` values.  Returns the admissions served.
        """
        cdef int64_t max_len, served
        cdef Call c
        if ev.shape[0] == 0:
            return 0
        if k < 0 or k >= out_i.shape[1] or k >= out_f.shape[1]:
            raise ValueError("live_batch: cache index out of range")
        max_len = check_live_batch(ev, offsets, block_ids, next_access, timestamps, cost_exact,
                                   cost_int, out_i, out_f)
        self.reserve(max_len + 1)
        _live_call(&c, ev, offsets, block_ids, next_access, timestamps, cost_exact, cost_int,
                   out_i, out_f, req0)
        c.k = k
        with nogil:
            served = _dispatch(self, &c)
        return served


cdef void _range_call(Call* c, const int64_t[::1] offsets, const int64_t[::1] block_ids,
                      const double[::1] timestamps, const double[::1] cost_exact,
                      const int64_t[::1] cost_int, const int64_t[::1] n_match,
                      const int64_t[::1] n_anonymous, int64_t first_request,
                      const int64_t[:, ::1] info) noexcept:
    """Fill ``c`` for a range of a checked offline batch (all but ``nxt``, ``r0``, ``r1``)."""
    c.mode = CALL_RANGE
    c.info = &info[0, 0] if info is not None and info.shape[0] > 0 else NULL
    c.off = &offsets[0]
    c.ids = &block_ids[0] if block_ids.shape[0] > 0 else c.off
    c.ts = &timestamps[0]
    c.cexact = &cost_exact[0]
    c.cint = &cost_int[0]
    c.n_match = &n_match[0] if n_match is not None else NULL
    c.n_anon = &n_anonymous[0] if n_anonymous is not None else NULL
    c.out_ph = NULL
    c.first_request = first_request


cdef int64_t* _prefix_out(int64_t[::1] prefix_hits, int64_t n) except? NULL:
    """The per-request first-miss hit output of a range call (NULL: none asked), filled with
    -1 (not served) for the requests the call does not reach."""
    cdef int64_t r
    if prefix_hits is None:
        return NULL
    if prefix_hits.shape[0] < n:
        raise ValueError(f"one prefix-hit entry per request: {prefix_hits.shape[0]} for {n} "
                         f"requests")
    for r in range(n):
        prefix_hits[r] = -1
    return &prefix_hits[0]


cdef void _live_call(Call* c, const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                     const int64_t[::1] block_ids, const int64_t[::1] next_access,
                     const double[::1] timestamps, const double[::1] cost_exact,
                     const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                     double[:, :, ::1] out_f, int64_t req0) noexcept:
    """Fill ``c`` for a checked live batch (all but ``k``)."""
    c.mode = CALL_LIVE
    c.info = NULL                 # NOTE: a live admission's info row is the tail of its event row
    c.out_ph = NULL
    c.ev = &ev[0, 0]
    c.off = &offsets[0]
    c.ids = &block_ids[0] if block_ids.shape[0] > 0 else c.off
    c.nxt = &next_access[0] if next_access.shape[0] > 0 else c.off
    c.ts = &timestamps[0]
    c.cexact = &cost_exact[0]
    c.cint = &cost_int[0]
    c.out_i = &out_i[0, 0, 0]
    c.out_f = &out_f[0, 0, 0]
    c.K = out_i.shape[1]
    c.r0 = 0
    c.r1 = ev.shape[0]
    c.first_request = req0


cdef int _check_batch(const int64_t[::1] offsets, const int64_t[::1] block_ids,
                      const double[::1] timestamps, const double[::1] cost_exact,
                      const int64_t[::1] cost_int, const int64_t[::1] n_match,
                      const int64_t[::1] n_anonymous, const int64_t[:, ::1] info) except -1:
    """Check the shapes of a batch's arrays before the loop reads them without bounds checks.

    ``offsets`` (n + 1 non-decreasing entries from 0) must stay inside ``block_ids``; the
    per-request arrays (``timestamps``, ``n_match``, ``n_anonymous``, ``info``'s rows) need n entries and the
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
    if info is not None and (info.shape[0] < n or info.shape[1] != INFO_WIDTH):
        raise ValueError(f"one info row of {INFO_WIDTH} per request: {info.shape[0]} x "
                         f"{info.shape[1]} for {n} requests")
    if cost_exact.shape[0] < longest or cost_int.shape[0] < longest:
        raise ValueError(f"cost arrays of {min(cost_exact.shape[0], cost_int.shape[0])} "
                         f"positions for a request of {longest} blocks")
    return 0


def serve_chunks(list runs, list next_access, const int64_t[::1] offsets,
                 const int64_t[::1] block_ids, const double[::1] timestamps,
                 const double[::1] cost_exact, const int64_t[::1] cost_int, int64_t first_request,
                 const int64_t[::1] n_match=None, int64_t chunk_entries=16384,
                 const int64_t[::1] n_anonymous=None, const int64_t[:, ::1] info=None,
                 list prefix_hits=None) -> None:
    """Step every cache of ``runs`` over a batch, a chunk of requests at a time.

    ``next_access[k]`` is the next-access array cache ``k`` reads (the oracles may get their own);
    ``n_match``, ``n_anonymous`` and ``info`` as in :meth:`CacheRun.serve_batch`;
    ``prefix_hits[k]`` (optional, one int64 array of n entries per cache) receives cache ``k``'s
    first-miss hit blocks per request, -1 where it did not serve the request.
    NOTE: one chunk (about ``chunk_entries`` block entries, whole requests) is served in every
    cache before the next: the chunk's ids, next-access times and costs stay in the CPU cache
    while the caches take turns, instead of each cache streaming the whole batch from memory.
    The GIL is released while each cache serves a chunk, so groups of caches can run on threads.
    """
    cdef int64_t n = offsets.shape[0] - 1, r0 = 0, r1, k, n_runs = len(runs), t0
    cdef const int64_t* off
    cdef const int64_t[::1] mv
    cdef const int64_t** nxps
    cdef int64_t** phps = NULL
    cdef int64_t[::1] ph
    cdef CacheRun run
    cdef Call c
    if n <= 0 or n_runs == 0:
        return
    if len(next_access) != n_runs:
        raise ValueError("one next-access array per cache")
    if prefix_hits is not None and len(prefix_hits) != n_runs:
        raise ValueError("one prefix-hit array per cache")
    _check_batch(offsets, block_ids, timestamps, cost_exact, cost_int, n_match, n_anonymous, info)
    _range_call(&c, offsets, block_ids, timestamps, cost_exact, cost_int, n_match, n_anonymous,
                first_request, info)
    off = c.off
    if chunk_entries < 1:
        chunk_entries = 1
    nxps = <const int64_t**>malloc(n_runs * sizeof(int64_t*))
    if nxps == NULL:
        raise MemoryError()
    try:
        if prefix_hits is not None:
            phps = <int64_t**>malloc(n_runs * sizeof(int64_t*))
            if phps == NULL:
                raise MemoryError()
        for k in range(n_runs):
            # NOTE: the arrays stay alive in ``next_access`` for the whole call.
            mv = next_access[k]
            if mv.shape[0] != block_ids.shape[0]:
                raise ValueError("next-access array of the wrong length")
            nxps[k] = &mv[0] if mv.shape[0] > 0 else off
            if phps != NULL:
                ph = prefix_hits[k]
                phps[k] = _prefix_out(ph, n)
        while r0 < n:
            r1 = r0 + 1
            while r1 < n and off[r1 + 1] - off[r0] <= chunk_entries:
                r1 += 1
            c.r0 = r0
            c.r1 = r1
            for k in range(n_runs):
                run = <CacheRun>runs[k]
                c.nxt = nxps[k]
                c.out_ph = phps[k] if phps != NULL else NULL
                with nogil:
                    t0 = _thread_cpu_ns()
                    _dispatch(run, &c)
                    run.busy_ns += _thread_cpu_ns() - t0
            r0 = r1
    finally:
        free(nxps)
        free(phps)


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
    cdef Call c
    if n == 0 or K == 0:
        return
    if out_i.shape[1] != K:
        raise ValueError("live_batch_all: one output column per cache")
    max_len = check_live_batch(ev, offsets, block_ids, next_access, timestamps, cost_exact,
                               cost_int, out_i, out_f)
    for k in range(K):
        (<CacheRun?>runs[k]).reserve(max_len + 1)
    _live_call(&c, ev, offsets, block_ids, next_access, timestamps, cost_exact, cost_int,
               out_i, out_f, req0)
    for k in range(K):
        run = <CacheRun>runs[k]
        c.k = k
        with nogil:
            _dispatch(run, &c)
