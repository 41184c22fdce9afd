"""Pure-Python reference of ``shadow.sim.engine.pool``: vLLM's block pool, the obvious way.

The Cython :class:`shadow.sim.engine.pool.VllmBlockPool` is tested against this module event by
event (tests/sim/test_vllm_pool.py); its docstring repeats the model below.

An exact model of vLLM's block pool for one full-attention KV cache group (vLLM 0.27-0.33).

The serve loop's ``vllm`` policy keeps one slot per block id.  vLLM does not: its
``BlockPool`` (``vllm/v1/core/block_pool.py``) keeps *physical* blocks, and one block hash may
be cached in several of them (``BlockHashToBlockMap`` never de-duplicates, so that block tables
stay append-only).  :class:`VllmBlockPool` mirrors that pool step by step, driven by the same
allocation events as vLLM's ``KVCacheManager`` (``kv_cache_manager.py``,
``single_type_kv_cache_manager.py``):

* **Blocks**: physical blocks ``1..capacity``, each with a reference count and, once full and
  cached, the block id it holds (0: none).  vLLM's block 0 is its null block and is never
  allocated, so with ``capacity = num_gpu_blocks - 1`` the physical ids equal the engine's.
* **Free queue**: a block is in it iff its reference count is 0.  Allocation pops from the head;
  a popped block that holds an id loses it there (eviction is lazy: a free cached block stays
  hittable until reused).  ``free`` releases a request's blocks tail first; blocks reaching 0
  go to the head if they hold no id (reused first) and to the tail if they do, each group in
  freeing order (``free_blocks``: ``prepend_n`` then ``append_n``).  Initially the queue holds
  ``1..capacity`` in order.
* **Cached map**: block id -> its physical copies in insertion order; a lookup takes the oldest
  copy (``get_one_block``).  A block id is resident while at least one copy holds it.
* **Admission** (``allocate_slots`` of a waiting or preempted request): look up the first
  ``(num_tokens - 1) // B`` ids and stop at the first miss; touch the hit blocks (out of the
  free queue, count + 1); then allocate blocks up to ``ceil(end / B)`` and cache the full
  blocks up to ``min(end, num_tokens) // B``.  A block computed again although its id is
  cached elsewhere (the last block of a fully cached block-aligned prompt, blocks after a first
  miss, generated blocks equal to cached ones, identical prompts admitted in one step) becomes
  a second copy: this is where vLLM's pool holds less than a de-duplicating cache.
* **Growth** (``allocate_slots`` of a running request: a prefill chunk or a decode step):
  allocate up to ``ceil(end / B)`` blocks, cache the full blocks up to ``end // B``.
* **Free** (a finished, aborted or preempted request): as above.

The pool never refuses what the engine did: a request that does not fit (a capacity below
the engine's) is skipped at admission, or dropped when it cannot grow (its blocks freed as a
preemption would); both are counted.  Statistics are taken at admission, from the lookup
(like the serve loop's match phase), and only for first admissions (vLLM leaves preempted
re-admissions out of its prefix-cache stats too).

Not modelled: speculative lookahead slots, sliding-window and hybrid groups, partial-block
prefix entries (``hash_block_size`` < block size), the scheduler's deferred frees under async
scheduling.  The engine is the oracle for both (tests/connector/test_lockstep.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

#: Result of one admission: (blocks looked up, gap-spanning hits, first-miss hits), or None
#: when it was skipped.
AdmitResult = tuple[int, int, int]


class _Req:
    __slots__ = ("blocks", "n_cached", "ids")

    def __init__(self, ids: list[int]) -> None:
        self.blocks: list[int] = []
        self.n_cached = 0
        self.ids = ids


class VllmBlockPool:
    """vLLM's block pool and one full-attention group's request tables, at ``capacity`` blocks.

    Counter attributes have the serve loop's names (``n_req``, ``n_hits``, ...), so live code
    reads a pool and a :class:`shadow.sim.core.simulator.CacheRun` alike.
    """

    def __init__(self, capacity: int, block_size: int,
                 cost: Callable[[int], float] | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity} < 1")
        if block_size < 1:
            raise ValueError(f"block size {block_size} < 1")
        self.capacity = int(capacity)
        self.block_size = int(block_size)
        self._cost = cost or (lambda p: 1.0)
        self._costs: list[float] = []
        n = self.capacity
        self.ref = [0] * (n + 2)
        self.bid = [0] * (n + 2)
        # NOTE: the free queue is a doubly linked list over 0..n+1; 0 is the head sentinel and
        # n + 1 the tail sentinel, as vLLM's FreeKVCacheBlockQueue uses fake head/tail blocks.
        self.nxt = list(range(1, n + 3))
        self.prv = list(range(-1, n + 1))
        self.num_free = n
        self.cached: dict[int, list[int]] = {}
        self.reqs: dict[str, _Req] = {}
        # counters (the serve loop's names)
        self.n_req = self.n_req_skipped = self.n_blocks = self.n_hits = self.n_prefix_hits = 0
        self.total_cost = self.saved_cost = self.prefix_saved_cost = 0.0
        self.n_eviction = self.n_self_eviction = 0
        self.n_dropped = 0
        self.failed = False

    # -- free queue ---------------------------------------------------------------------------
    def _unlink(self, b: int) -> None:
        p, q = self.prv[b], self.nxt[b]
        self.nxt[p] = q
        self.prv[q] = p
        self.num_free -= 1

    def _popleft_n(self, k: int) -> list[int]:
        nxt, bid, cached = self.nxt, self.bid, self.cached
        out = []
        b = nxt[0]
        for _ in range(k):
            out.append(b)
            h = bid[b]
            if h:
                # NOTE: lazy eviction: the block leaves the cached map only now, when reused
                copies = cached[h]
                copies.remove(b)
                if not copies:
                    del cached[h]
                bid[b] = 0
                self.n_eviction += 1
            self.ref[b] = 1
            b = nxt[b]
        nxt[0] = b
        self.prv[b] = 0
        self.num_free -= k
        return out

    def _link_after(self, blocks: list[int], left: int) -> None:
        """Link ``blocks`` in order right after node ``left`` (0, the head sentinel: vLLM's
        ``prepend_n``; the last block: its ``append_n``)."""
        nxt, prv = self.nxt, self.prv
        right = nxt[left]
        for b in blocks:
            prv[b] = left
            nxt[left] = b
            left = b
        nxt[left] = right
        prv[right] = left
        self.num_free += len(blocks)

    def _free_blocks(self, ordered: Sequence[int]) -> None:
        first: list[int] = []
        last: list[int] = []
        ref, bid = self.ref, self.bid
        for b in ordered:
            ref[b] -= 1
            if ref[b] == 0:
                (last if bid[b] else first).append(b)
        self._link_after(first, 0)                               # prepend_n
        self._link_after(last, self.prv[self.capacity + 1])      # append_n

    # -- request operations -------------------------------------------------------------------
    def _cost_of(self, p: int) -> float:
        c = self._costs
        while len(c) <= p:
            c.append(float(self._cost(len(c))))
        return c[p]

    def lookup(self, ids: Sequence[int], n_match: int) -> list[int]:
        """Physical blocks of the longest cached run of ``ids[:n_match]`` (first miss stops)."""
        cached = self.cached
        out = []
        for h in ids[:n_match]:
            copies = cached.get(h)
            if copies is None:
                break
            out.append(copies[0])
        return out

    def fits(self, ids: Sequence[int], num_tokens: int, end_tokens: int) -> bool:
        """Whether a request admitted now could hold ``end_tokens`` tokens without waiting: its
        blocks beyond the hit, plus the hit blocks taken out of the free queue, are free."""
        B = self.block_size
        hit = self.lookup(ids, min(len(ids), max(num_tokens - 1, 0) // B))
        need = max(-(-max(end_tokens, len(hit) * B) // B) - len(hit), 0)
        return need + sum(1 for b in hit if self.ref[b] == 0) <= self.num_free

    def blocks_needed(self, req_id: str, end_tokens: int) -> int:
        """New blocks a running request needs to hold ``end_tokens`` tokens (0 if unknown)."""
        r = self.reqs.get(req_id)
        if r is None:
            return 0
        return max(-(-end_tokens // self.block_size) - len(r.blocks), 0)

    def _cache(self, r: _Req, n_full: int) -> None:
        ids, blocks, bid, cached = r.ids, r.blocks, self.bid, self.cached
        k = r.n_cached
        n_full = min(n_full, len(ids), len(blocks))
        while k < n_full:
            b = blocks[k]
            h = ids[k]
            if bid[b] != h:
                bid[b] = h
                copies = cached.get(h)
                if copies is None:
                    cached[h] = [b]
                else:
                    copies.append(b)
            k += 1
        if n_full > r.n_cached:
            r.n_cached = n_full

    def admit(self, req_id: str, ids: list[int], num_tokens: int, end_tokens: int,
              count: bool = True) -> AdmitResult | None:
        """A waiting (or preempted) request is scheduled up to ``end_tokens`` tokens.

        ``ids`` are the block ids of its full blocks so far (kept by reference: a caller that
        learns more ids appends them before :meth:`grow`).  ``count`` False keeps the admission
        out of the statistics (a re-admission after preemption).  Returns None, and changes
        nothing but the skip counter, when the request does not fit.
        """
        B = self.block_size
        if req_id in self.reqs:
            self.free(req_id)  # NOTE: a re-admission whose free was not seen
        n_match = min(len(ids), max(num_tokens - 1, 0) // B)
        hit = self.lookup(ids, n_match)
        n_hit = len(hit)
        end = max(end_tokens, n_hit * B)
        n_new = max(-(-end // B) - n_hit, 0)
        evictable = 0
        for b in hit:
            if self.ref[b] == 0:
                evictable += 1
        if n_new + evictable > self.num_free:
            if count:
                self.n_req_skipped += 1
            return None
        gap = n_hit
        if count:
            cached = self.cached
            for h in ids[n_hit:n_match]:
                if h in cached:
                    gap += 1
            self.n_req += 1
            self.n_blocks += n_match
            self.n_hits += gap
            self.n_prefix_hits += n_hit
            for p in range(n_match):
                c = self._cost_of(p)
                self.total_cost += c
                if ids[p] in self.cached:
                    self.saved_cost += c
                    if p < n_hit:
                        self.prefix_saved_cost += c
        r = _Req(ids)
        ref = self.ref
        for b in hit:
            if ref[b] == 0:
                self._unlink(b)
            ref[b] += 1
        r.blocks = hit
        r.n_cached = n_hit
        if n_new:
            r.blocks = hit + self._popleft_n(n_new)
        self.reqs[req_id] = r
        self._cache(r, min(end, num_tokens) // B)
        return n_match, gap, n_hit

    def grow(self, req_id: str, end_tokens: int) -> bool:
        """A running request is scheduled up to ``end_tokens`` tokens (a chunk or a decode step).

        False when it does not fit: the request is dropped from this pool (freed as a
        preemption would) and ignored until it is admitted again.
        """
        r = self.reqs.get(req_id)
        if r is None:
            return False
        B = self.block_size
        n_new = -(-end_tokens // B) - len(r.blocks)
        if n_new > 0:
            if n_new > self.num_free:
                self.n_dropped += 1
                self.free(req_id)
                return False
            r.blocks.extend(self._popleft_n(n_new))
        self._cache(r, end_tokens // B)
        return True

    def free(self, req_id: str) -> None:
        """Free a request's blocks, tail first (finished, aborted or preempted)."""
        r = self.reqs.pop(req_id, None)
        if r is not None and r.blocks:
            self._free_blocks(reversed(r.blocks))

    def keep_free_order(self, old: "VllmBlockPool") -> None:
        """Start from ``old``'s free-queue order, with nothing cached (a prefix-cache reset).

        NOTE: vLLM's ``reset_prefix_cache`` succeeds only when every block is free; it drops
        every hash but leaves the free queue as it is, so later allocations pop the blocks in
        the old order.  Does nothing unless ``old`` has the same capacity and no request.
        """
        if old.capacity != self.capacity or old.reqs or self.reqs:
            return
        self.nxt = list(old.nxt)
        self.prv = list(old.prv)
        self.num_free = old.num_free

    # -- views (tests, the connector's state checks) -------------------------------------------
    def resident_ids(self) -> list[int]:
        """Block ids with at least one cached copy."""
        return list(self.cached)

    def copies(self) -> dict[int, int]:
        """Block id -> number of physical copies holding it."""
        return {h: len(c) for h, c in self.cached.items()}

    def free_queue(self) -> list[int]:
        """Ids of the cached blocks in the free queue, from the next victim on."""
        out = []
        tail = self.capacity + 1
        b = self.nxt[0]
        while b != tail:
            if self.bid[b]:
                out.append(self.bid[b])
            b = self.nxt[b]
        return out

    def free_blocks(self) -> list[int]:
        """Every free physical block, from the next one allocated on (vLLM's
        ``free_block_queue.get_all_free_blocks()`` order)."""
        out = []
        tail = self.capacity + 1
        b = self.nxt[0]
        while b != tail:
            out.append(b)
            b = self.nxt[b]
        return out

    def cached_blocks(self) -> dict[int, list[int]]:
        """Block id -> the physical blocks holding it, oldest copy first."""
        return {h: list(c) for h, c in self.cached.items()}

    def block_table(self, req_id: str) -> list[int]:
        """The physical blocks a request holds, in order (empty if unknown)."""
        r = self.reqs.get(req_id)
        return list(r.blocks) if r is not None else []

    def holds(self, block_id: int) -> bool:
        return block_id in self.cached

    def check(self) -> None:
        """Assert the invariants (tests): queue membership, counts and the cached map agree."""
        n = self.capacity
        seen = set()
        b = self.nxt[0]
        while b != n + 1:
            assert self.ref[b] == 0, (b, self.ref[b])
            assert b not in seen
            seen.add(b)
            b = self.nxt[b]
        assert len(seen) == self.num_free
        held: dict[int, int] = {}
        for r in self.reqs.values():
            for b in r.blocks:
                held[b] = held.get(b, 0) + 1
        for b in range(1, n + 1):
            assert (b in seen) == (self.ref[b] == 0), b
            assert self.ref[b] == held.get(b, 0), (b, self.ref[b], held.get(b, 0))
        for h, cs in self.cached.items():
            for b in cs:
                assert self.bid[b] == h
        assert sum(len(c) for c in self.cached.values()) == sum(1 for b in range(1, n + 1)
                                                                 if self.bid[b])
