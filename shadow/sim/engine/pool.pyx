# cython: language_level=3
"""vLLM's block pool for one full-attention KV cache group (vLLM 0.27-0.33), in C arrays.

The live ``vllm`` caches of the connector (docs/connector.md).  The model, and the reference
this module is tested against event by event, is :mod:`shadow.sim.reference.vllm_pool`:

* physical blocks ``1..capacity`` (vLLM's block 0 is its null block), each with a reference
  count and the block id it caches (0: none);
* the free queue, a doubly linked list over ``0..capacity+1`` (0 and ``capacity + 1`` are
  sentinels, as vLLM's fake head and tail): a block is in it iff its count is 0; allocation pops
  the head and evicts the popped block's id there (lazy eviction); a free puts unhashed blocks
  at the head and hashed ones at the tail, each group in freeing order;
* the cached map: block id -> its physical copies in insertion order (an ``IdTable`` from id to
  the oldest copy, and per-block ``cnext``/``cprev`` links; the oldest copy's ``cprev`` is the
  newest, so appending is O(1)); a lookup takes the oldest copy.

Per-request state (the physical blocks, the cached count, the ids learned so far) is a small
Python object; the block arrays and the map are C.  Memory: 4 x 4 + 8 B per block + the map's
24 B per block = 48 B per block, plus 8 B per block a request holds.
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport calloc, free

from shadow.sim.core.idtable cimport IdTable


cdef class _Req:
    cdef public list blocks
    cdef public Py_ssize_t n_cached
    cdef public list ids

    def __init__(self, list ids):
        self.blocks = []
        self.n_cached = 0
        self.ids = ids


cdef class VllmBlockPool:
    """vLLM's block pool and one full-attention group's request tables, at ``capacity`` blocks.

    Same methods and counter attributes as the reference (``n_req``, ``n_hits``, ...).
    """

    cdef readonly int64_t capacity
    cdef readonly int64_t block_size
    cdef public int64_t num_free
    cdef int32_t* nxt
    cdef int32_t* prv
    cdef int32_t* ref
    cdef int32_t* cnext
    cdef int32_t* cprev
    cdef int64_t* bid
    cdef IdTable head              # block id -> oldest physical copy
    cdef public dict reqs
    cdef object _cost
    cdef list _costs
    cdef public int64_t n_req, n_req_skipped, n_blocks, n_hits, n_prefix_hits
    cdef public int64_t n_eviction, n_self_eviction, n_dropped
    cdef public double total_cost, saved_cost, prefix_saved_cost
    cdef public bint failed

    def __cinit__(self, int64_t capacity, int64_t block_size, cost=None):
        cdef int64_t i, n = capacity
        if capacity < 1:
            raise ValueError(f"capacity {capacity} < 1")
        if capacity >= (1 << 31) - 2:
            raise ValueError(f"capacity {capacity} >= 2**31 - 2")
        if block_size < 1:
            raise ValueError(f"block size {block_size} < 1")
        self.capacity = capacity
        self.block_size = block_size
        self.nxt = <int32_t*>calloc(n + 2, sizeof(int32_t))
        self.prv = <int32_t*>calloc(n + 2, sizeof(int32_t))
        self.ref = <int32_t*>calloc(n + 2, sizeof(int32_t))
        self.cnext = <int32_t*>calloc(n + 2, sizeof(int32_t))
        self.cprev = <int32_t*>calloc(n + 2, sizeof(int32_t))
        self.bid = <int64_t*>calloc(n + 2, sizeof(int64_t))
        if (self.nxt == NULL or self.prv == NULL or self.ref == NULL or self.cnext == NULL
                or self.cprev == NULL or self.bid == NULL):
            raise MemoryError()
        for i in range(n + 2):
            self.nxt[i] = <int32_t>(i + 1)
            self.prv[i] = <int32_t>(i - 1)
        self.num_free = n
        self.head = IdTable(capacity)
        self.reqs = {}
        self._cost = cost
        self._costs = []

    def __dealloc__(self):
        free(self.nxt)
        free(self.prv)
        free(self.ref)
        free(self.cnext)
        free(self.cprev)
        free(self.bid)

    # -- the cached map -----------------------------------------------------------------------
    cdef inline void _cache_copy(self, int64_t h, int32_t b) noexcept:
        cdef int32_t first = self.head.get(h)
        cdef int32_t last
        self.bid[b] = h
        self.cnext[b] = 0
        if first < 0:
            self.head.put(h, b)
            self.cprev[b] = b
        else:
            last = self.cprev[first]
            self.cnext[last] = b
            self.cprev[b] = last
            self.cprev[first] = b

    cdef inline void _uncache(self, int32_t b) noexcept:
        cdef int64_t h = self.bid[b]
        cdef int32_t first = self.head.get(h)
        cdef int32_t p, q
        if first == b:
            q = self.cnext[b]
            if q:
                self.cprev[q] = self.cprev[b]
                self.head.put(h, q)
            else:
                self.head.delete(h)
        else:
            p = self.cprev[b]
            q = self.cnext[b]
            self.cnext[p] = q
            if q:
                self.cprev[q] = p
            else:
                self.cprev[first] = p
        self.bid[b] = 0
        self.cnext[b] = 0
        self.cprev[b] = 0

    cdef inline bint _holds(self, int64_t h) noexcept:
        return self.head.get(h) >= 0

    # -- free queue ---------------------------------------------------------------------------
    cdef inline void _unlink(self, int32_t b) noexcept:
        cdef int32_t p = self.prv[b], q = self.nxt[b]
        self.nxt[p] = q
        self.prv[q] = p
        self.num_free -= 1

    cdef list _popleft_n(self, int64_t k):
        cdef list out = []
        cdef int32_t b = self.nxt[0]
        cdef int64_t i
        for i in range(k):
            out.append(b)
            if self.bid[b]:
                # NOTE: lazy eviction: the block leaves the cached map only now, when reused
                self._uncache(b)
                self.n_eviction += 1
            self.ref[b] = 1
            b = self.nxt[b]
        self.nxt[0] = b
        self.prv[b] = 0
        self.num_free -= k
        return out

    cdef void _free_blocks(self, list blocks):
        cdef Py_ssize_t i
        cdef int32_t b
        cdef int32_t tail = <int32_t>(self.capacity + 1)
        cdef list firsts = [], lasts = []
        # NOTE: tail first (vLLM's free_blocks(reversed(blocks))); blocks reaching 0 without
        # an id go to the head (prepend_n), those with one to the tail (append_n), each group
        # in freeing order
        for i in range(len(blocks) - 1, -1, -1):
            b = blocks[i]
            self.ref[b] -= 1
            if self.ref[b] == 0:
                if self.bid[b]:
                    lasts.append(b)
                else:
                    firsts.append(b)
        self._link_after(firsts, 0)                    # prepend_n
        self._link_after(lasts, self.prv[tail])        # append_n
        self.num_free += len(firsts) + len(lasts)

    cdef void _link_after(self, list blocks, int32_t left):
        """Link ``blocks`` into the free queue, in order, right after node ``left`` (the head
        sentinel 0 for vLLM's ``prepend_n``, the last block for its ``append_n``)."""
        cdef int32_t right = self.nxt[left]
        cdef int32_t b
        for b in blocks:
            self.prv[b] = left
            self.nxt[left] = b
            left = b
        self.nxt[left] = right
        self.prv[right] = left

    # -- request operations -------------------------------------------------------------------
    cdef double _cost_of(self, Py_ssize_t p):
        cdef list c = self._costs
        if self._cost is None:
            return 1.0
        while len(c) <= p:
            c.append(float(self._cost(len(c))))
        return c[p]

    def lookup(self, ids, Py_ssize_t n_match) -> list:
        """Physical blocks of the longest cached run of ``ids[:n_match]`` (first miss stops)."""
        cdef list out = []
        cdef int32_t b
        cdef Py_ssize_t i
        n_match = min(n_match, len(ids))
        for i in range(n_match):
            b = self.head.get(ids[i])
            if b < 0:
                break
            out.append(b)
        return out

    def fits(self, ids, int64_t num_tokens, int64_t end_tokens) -> bool:
        """Whether a request admitted now could hold ``end_tokens`` tokens without waiting: its
        blocks beyond the hit, plus the hit blocks taken out of the free queue, are free."""
        cdef int64_t B = self.block_size
        cdef list hit = self.lookup(ids, min(len(ids), max(num_tokens - 1, 0) // B))
        cdef int64_t n_hit = len(hit), end = max(end_tokens, n_hit * B), need
        cdef int32_t b
        need = max((end + B - 1) // B - n_hit, 0)
        for b in hit:
            if self.ref[b] == 0:
                need += 1
        return need <= self.num_free

    def blocks_needed(self, req_id, int64_t end_tokens) -> int:
        """New blocks a running request needs to hold ``end_tokens`` tokens (0 if unknown)."""
        cdef _Req r = self.reqs.get(req_id)
        if r is None:
            return 0
        return max((end_tokens + self.block_size - 1) // self.block_size - len(r.blocks), 0)

    cdef void _cache(self, _Req r, Py_ssize_t n_full):
        cdef list ids = r.ids, blocks = r.blocks
        cdef Py_ssize_t k = r.n_cached
        cdef int32_t b
        cdef int64_t h
        n_full = min(n_full, len(ids), len(blocks))
        while k < n_full:
            b = blocks[k]
            h = ids[k]
            if self.bid[b] != h:
                self._cache_copy(h, b)
            k += 1
        if n_full > r.n_cached:
            r.n_cached = n_full

    def admit(self, req_id, list ids, int64_t num_tokens, int64_t end_tokens, bint count=True):
        """A waiting (or preempted) request is scheduled up to ``end_tokens`` tokens.

        Returns ``(blocks looked up, gap-spanning hits, first-miss hits)``, or None (and nothing
        changed but the skip counter) when the request does not fit.
        """
        cdef int64_t B = self.block_size
        cdef Py_ssize_t n_match, n_hit, p, gap
        cdef int64_t end, n_new, evictable = 0
        cdef int32_t b
        cdef list hit
        cdef _Req r
        cdef double c
        if req_id in self.reqs:
            self.free(req_id)  # NOTE: a re-admission whose free was not seen
        n_match = min(len(ids), max(num_tokens - 1, 0) // B)
        hit = self.lookup(ids, n_match)
        n_hit = len(hit)
        end = max(end_tokens, n_hit * B)
        n_new = max((end + B - 1) // B - n_hit, 0)
        for b in hit:
            if self.ref[b] == 0:
                evictable += 1
        if n_new + evictable > self.num_free:
            if count:
                self.n_req_skipped += 1
            return None
        gap = n_hit
        if count:
            self.n_req += 1
            self.n_blocks += n_match
            self.n_prefix_hits += n_hit
            for p in range(n_match):
                c = self._cost_of(p)
                self.total_cost += c
                if p < n_hit:
                    self.saved_cost += c
                    self.prefix_saved_cost += c
                elif self._holds(ids[p]):
                    gap += 1
                    self.saved_cost += c
            self.n_hits += gap
        r = _Req(ids)
        for b in hit:
            if self.ref[b] == 0:
                self._unlink(b)
            self.ref[b] += 1
        r.blocks = hit
        r.n_cached = n_hit
        if n_new:
            r.blocks = hit + self._popleft_n(n_new)
        self.reqs[req_id] = r
        self._cache(r, min(end, num_tokens) // B)
        return n_match, gap, n_hit

    def grow(self, req_id, int64_t end_tokens) -> bool:
        """A running request is scheduled up to ``end_tokens`` tokens; False (and the request
        dropped from this pool, freed as a preemption would) when it does not fit."""
        cdef _Req r = self.reqs.get(req_id)
        cdef int64_t n_new
        if r is None:
            return False
        n_new = (end_tokens + self.block_size - 1) // self.block_size - len(r.blocks)
        if n_new > 0:
            if n_new > self.num_free:
                self.n_dropped += 1
                self.free(req_id)
                return False
            r.blocks.extend(self._popleft_n(n_new))
        self._cache(r, end_tokens // self.block_size)
        return True

    def free(self, req_id) -> None:
        """Free a request's blocks, tail first (finished, aborted or preempted)."""
        cdef _Req r = self.reqs.pop(req_id, None)
        if r is not None and r.blocks:
            self._free_blocks(r.blocks)

    def keep_free_order(self, VllmBlockPool old) -> None:
        """Start from ``old``'s free-queue order, with nothing cached (a prefix-cache reset);
        does nothing unless ``old`` has the same capacity and no request."""
        cdef int64_t i
        if old.capacity != self.capacity or old.reqs or self.reqs:
            return
        for i in range(self.capacity + 2):
            self.nxt[i] = old.nxt[i]
            self.prv[i] = old.prv[i]
        self.num_free = old.num_free

    # -- views (tests, the connector's state checks) -------------------------------------------
    def holds(self, int64_t block_id) -> bool:
        return self._holds(block_id)

    def cached_blocks(self) -> dict:
        """Block id -> the physical blocks holding it, oldest copy first (insertion order of
        the ids is not kept: compare as dicts)."""
        cdef dict out = {}
        cdef int32_t b, first
        cdef int64_t h
        for b in range(1, self.capacity + 1):
            h = self.bid[b]
            if h and h not in out:
                first = self.head.get(h)
                chain = []
                while first:
                    chain.append(first)
                    first = self.cnext[first]
                out[h] = chain
        return out

    def resident_ids(self) -> list:
        return list(self.cached_blocks())

    def copies(self) -> dict:
        return {h: len(c) for h, c in self.cached_blocks().items()}

    def free_blocks(self) -> list:
        """Every free physical block, from the next one allocated on."""
        cdef list out = []
        cdef int32_t b = self.nxt[0]
        cdef int32_t tail = <int32_t>(self.capacity + 1)
        while b != tail:
            out.append(b)
            b = self.nxt[b]
        return out

    def free_queue(self) -> list:
        """Ids of the cached blocks in the free queue, from the next victim on."""
        return [self.bid[b] for b in self.free_blocks() if self.bid[b]]

    def block_table(self, req_id) -> list:
        cdef _Req r = self.reqs.get(req_id)
        return list(r.blocks) if r is not None else []

    def check(self) -> None:
        """Assert the invariants (tests): queue membership, counts and the cached map agree."""
        cdef int64_t n = self.capacity, b
        free = self.free_blocks()
        seen = set(free)
        assert len(seen) == len(free) == self.num_free
        held = {}
        for r in self.reqs.values():
            for x in (<_Req>r).blocks:
                held[x] = held.get(x, 0) + 1
        for b in range(1, n + 1):
            assert (b in seen) == (self.ref[b] == 0), b
            assert self.ref[b] == held.get(b, 0), (b, self.ref[b], held.get(b, 0))
        cached = self.cached_blocks()
        for h, cs in cached.items():
            for x in cs:
                assert self.bid[x] == h
        assert sum(len(c) for c in cached.values()) == sum(1 for b in range(1, n + 1)
                                                           if self.bid[b])
        assert len(self.head) == len(cached)
