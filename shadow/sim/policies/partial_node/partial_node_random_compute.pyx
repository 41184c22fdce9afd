# cython: language_level=3
"""partial_node_random_compute: sample prefix-tree nodes, trim the winner from its deep end.

The resident blocks are grouped into **nodes**: chains of blocks at consecutive positions of one
path, shallow (head) to deep (tail), as in a radix tree whose edges are runs of blocks.

* **Building** (access phase): the blocks a request inserts at consecutive positions form one new
  node (in either replay order), stamped with the request's ``req_vtime``.
* **Touching** (:meth:`on_request`, after allocation and before access): for every node holding
  blocks of the arriving path, the node is split after the deepest of them (the part below is
  another branch: it becomes its own node and keeps the old stamp), and the node is stamped with
  the request's ``req_vtime``.  So a node's stamp is the last request whose path ran through it.
* **Eviction**: draw ``n-sample`` live nodes uniformly with replacement (splitmix64, ``seed``) and
  pick the lowest ``cost(tail) / max(1, now - stamp)`` (compute saved per unit of age; ties: first
  drawn), where ``cost(tail)`` is the llround cost of the node's deepest resident block, the next
  one to go.  Then evict from the winner's tail: at most ``micro-batch`` blocks per sample in
  ``eviction-mode=micro`` (the default, as in the PrefixSim article), the whole remaining deficit in ``drain``
  (resampling only when the node runs out).  Trimming from the tail keeps every node a resident
  prefix of itself, so most requests see one hole at the end rather than holes in the middle.

Pins: honoured.  A node whose tail is pinned is not a candidate (draws on it are redrawn), and
trimming stops at a pinned block; best effort (one block from a pinned tail) only when every
node's tail is pinned.

Memory: base 22 B/slot (18 from 32k slots: the resident table at 3 entries a slot,
``TABLE_PER_SLOT``) + per slot (node, up link, cost) 12 + per node (tail, stamp, sampling-set
item) 12 = 42 B/slot from 32k slots, 46 below (measured: docs/performance.md, "Memory per
slot"); nodes are
allocated for ``capacity``, as every block may be its own node.  NOTE: what is not kept, each
without changing a decision: no down links (a node is walked from its tail up; ``remove`` of a
middle block walks to the block below it), no positions (a node's deepest touched block is the
first touched one up from its tail), no per-node scratch for ``on_request`` (its marks are sign
bits of ``s_node`` and ``n_tail``), no positions in the sampling set (a node is deleted at the index
its draw picked it from; ``remove`` searches for it), the stamp in 32 bits past ``stamp_epoch`` and
the cost in 32 bits (each moved to 64 bits for good when one does not fit: +4 B/node, +4 B/slot).
``remove`` is O(node length + live nodes) for it, but it is off the simulator's path.

The class is declared in ``partial_node_random_compute.pxd``; a variant subclasses it and
overrides only the hooks listed there (``_score_cands``, ``_new_node``, ``_touch``), as
``partial_node_random_freq`` does.
"""

from libc.stdint cimport (int64_t, int32_t, uint16_t, uint32_t, uint64_t, INT32_MIN, INT32_MAX,
                          UINT32_MAX)
from libc.stdlib cimport malloc, realloc, free

from shadow.errors import ShadowError
from shadow.sim.core.idtable cimport sids_addr
from shadow.sim.core.policy cimport Policy, Access, RequestCtx
from shadow.sim.core.idtable cimport shadow_big_malloc
from shadow.sim.policies.cost_aware.random_compute cimport Dense, dense_free, rng_next
from shadow.sim.registry import PolicySpec

cdef extern from *:
    void __builtin_prefetch(const void* addr) noexcept nogil

# NOTE: below this many live nodes the per-node arrays sit in L2 and the passes cost more than
# they hide; one draw at a time then (the same draws either way).  Lowered only by tests.
cdef int64_t _pass_min_nodes = 16384


def set_pass_min_nodes(n: int) -> int:
    """Set the live-node count from which draws are made in passes (tests); return the old one."""
    global _pass_min_nodes
    old = _pass_min_nodes
    _pass_min_nodes = max(0, int(n))
    return old

SPEC = PolicySpec(
    description="sample prefix-tree nodes by cost / age, evict from the winner's deep end (micro|drain)",
    family="partial-node",
    defaults="n-sample=128,eviction-mode=micro,micro-batch=64,seed=1",
    deterministic=False,
    weight=3.0,
    reference_params="micro-batch=1",
)


cdef class PartialNodeRandomCompute(Policy):
    """See the module docstring.  Invariants: every resident slot belongs to exactly one live
    node; a live node's chain runs from ``tail`` up through ``up`` links to its head (``up == -1``)
    through decreasing positions; ``nodes.items[0 .. nodes.n)`` are the live nodes, the rest are
    free."""
    TABLE_PER_SLOT = 3    # NOTE: resident table 12 B/slot from 32k slots (budget: see Memory)

    def __cinit__(self, int64_t capacity, int64_t n_sample=128, bint drain=False,
                  int64_t micro_batch=64, uint64_t seed=1, *args, **kwargs):
        if n_sample < 1 or n_sample > (1 << 30):
            raise ShadowError(f"n-sample must be in 1..2**30, got {n_sample}")
        if micro_batch < 1:
            raise ShadowError(f"micro-batch must be positive, got {micro_batch}")
        self.n_sample = n_sample
        self.micro_batch = micro_batch
        self.drain = drain
        self.rng = seed
        self.s_node = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.s_up = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.s_cost32 = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.s_cost64 = NULL
        self.n_tail = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.n_stamp32 = <uint32_t*>malloc(capacity * sizeof(uint32_t))
        self.n_stamp64 = NULL
        self.stamp_epoch = 0
        self.cand = <int32_t*>malloc(n_sample * sizeof(int32_t))
        self.cand_idx = <int32_t*>malloc(n_sample * sizeof(int32_t))
        self.cand_score = <double*>malloc(n_sample * sizeof(double))
        self.touched = NULL
        self.touched_cap = 0
        self.pf_node = NULL
        self.pf_node_stride = 0
        if (self.s_node == NULL or self.s_up == NULL or self.s_cost32 == NULL
                or self.n_tail == NULL or self.n_stamp32 == NULL or self.cand == NULL
                or self.cand_idx == NULL
                or self.cand_score == NULL):
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        # NOTE: huge pages for a large set (see core/idtable.pxd): a draw reads ``items`` at random.
        self.nodes.items = <int32_t*>shadow_big_malloc(capacity * sizeof(int32_t))
        self.nodes.pos = NULL
        self.nodes.n = 0
        self.nodes.cap = capacity
        if self.nodes.items == NULL:
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        cdef int64_t i
        for i in range(capacity):
            self.nodes.items[i] = <int32_t>i
        self.mark = 0
        self.last_slot = -1
        self.last_id = 0
        self.last_pos = -2
        self.last_mark = -1

    def __dealloc__(self):
        free(self.s_node)
        free(self.s_up)
        free(self.s_cost32)
        free(self.s_cost64)
        free(self.n_tail)
        free(self.n_stamp32)
        free(self.n_stamp64)
        free(self.cand)
        free(self.cand_idx)
        free(self.cand_score)
        free(self.touched)
        dense_free(&self.nodes)

    # ---- nodes (the hooks a variant overrides) ----

    cdef int32_t _new_node(self, int32_t tail, int64_t stamp, int32_t parent) noexcept nogil:
        """Take a free node id for the chain ending at ``tail``; ``parent`` is the node it was
        split from, -1 for a node built by inserts (unused here: only variants need it)."""
        cdef int32_t nd = self._node_add()
        self.n_tail[nd] = tail
        self._set_stamp(nd, stamp)
        return nd

    cdef int32_t _node_add(self) noexcept nogil:
        """Make the free node id ``items[n]`` live (dense_add of it in full-permutation mode:
        it is already in place) and return it."""
        cdef int32_t nd = self.nodes.items[self.nodes.n]
        self.nodes.n += 1
        return nd

    cdef void _node_del_at(self, int64_t i) noexcept nogil:
        """Free the live node at ``items[i]``: the last live node moves into its place and it is
        parked at index n, as dense_del with keep_absent does (the same order of live nodes and
        of free ids)."""
        cdef Dense* d = &self.nodes
        cdef int32_t x = d.items[i]
        d.n -= 1
        d.items[i] = d.items[d.n]
        d.items[d.n] = x

    cdef void _touch(self, int32_t nd, int64_t req_vtime) noexcept nogil:
        """The arriving request's path runs through ``nd`` (after any split): stamp it."""
        self._set_stamp(nd, req_vtime)

    cdef void _widen_cost(self, int64_t slot, int64_t c) noexcept nogil:
        """Move the costs to 64 bits (once) and store ``c``.  NOTE: if that allocation fails
        the cost saturates to int32 instead (nothing here may raise) and ``nomem`` fails the
        cache."""
        cdef int64_t i
        cdef int64_t* c64 = <int64_t*>malloc(max(self.capacity, 1) * sizeof(int64_t))
        if c64 == NULL:
            self.nomem = 1
            self.s_cost32[slot] = INT32_MAX if c > 0 else INT32_MIN
            return
        for i in range(self.capacity):
            c64[i] = self.s_cost32[i]
        free(self.s_cost32)
        self.s_cost32 = NULL
        self.s_cost64 = c64
        c64[slot] = c

    cdef void _rebase_stamp(self, int64_t nd, int64_t stamp) noexcept nogil:
        """Store ``stamp`` (outside ``stamp_epoch + [0, 2**32)``) as node ``nd``'s: move the epoch
        to the lowest stamp of the live nodes and ``stamp`` if they all lie within 2**31 of it,
        else move every stamp to 64 bits for good.

        NOTE: exact either way: every live node keeps its absolute stamp (``nd``'s old one is
        not kept: it is being replaced, or ``nd`` was just added).  The 2**31 of headroom means
        the epoch moves at most once per 2**31 of stamp advance, so the pass over the live nodes
        costs nothing per request; a node older than that keeps the stamps in 64 bits from then
        on (+4 B/node).  If that allocation fails the stamp is clamped into 32 bits instead
        (nothing here may raise) and ``nomem`` fails the cache."""
        cdef int64_t i, x, v, lo = stamp, hi = stamp, epoch = self.stamp_epoch
        cdef int32_t* items = self.nodes.items
        cdef uint32_t* s32 = self.n_stamp32
        cdef int64_t* s64
        for i in range(self.nodes.n):
            x = items[i]
            if x != nd:
                v = epoch + <int64_t>s32[x]
                lo = min(lo, v)
                hi = max(hi, v)
        if <uint64_t>hi - <uint64_t>lo < (<uint64_t>1 << 31):
            for i in range(self.nodes.n):
                x = items[i]
                if x != nd:
                    s32[x] = <uint32_t>(epoch + <int64_t>s32[x] - lo)
            self.stamp_epoch = lo
            s32[nd] = <uint32_t>(stamp - lo)
            return
        s64 = <int64_t*>malloc(max(self.capacity, 1) * sizeof(int64_t))
        if s64 == NULL:
            self.nomem = 1
            s32[nd] = 0 if stamp < epoch else UINT32_MAX
            return
        for i in range(self.nodes.n):
            x = items[i]
            if x != nd:
                s64[x] = epoch + <int64_t>s32[x]
        s64[nd] = stamp
        free(self.n_stamp32)
        self.n_stamp32 = NULL
        self.n_stamp64 = s64

    def stamp_bits(self) -> int:
        """32 or 64: the width the stamps are kept in (tests)."""
        return 64 if self.n_stamp64 != NULL else 32

    def cost_bits(self) -> int:
        """32 or 64: the width the costs are kept in (tests)."""
        return 64 if self.s_cost64 != NULL else 32

    cdef void _score_cands(self, int64_t nc, int64_t now) noexcept nogil:
        """``cand_score[i] = cost(tail) / age`` for the ``nc`` drawn nodes ``cand[i]``."""
        cdef int64_t i
        cdef int32_t nd
        for i in range(nc):
            nd = self.cand[i]
            self.cand_score[i] = (<double>self._cost(self.n_tail[nd])
                                  / <double>node_age(now, self._stamp(nd)))

    # ---- the interface ----

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        """Split every node the arriving path runs through below its deepest touched block, and
        stamp it (``_touch``), in the order the path first touches the nodes.

        NOTE: no per-node or per-slot scratch: a touched slot is marked by storing its node as
        ``~node`` in ``s_node`` and a listed node by storing its tail as ``~tail`` in ``n_tail``
        (both are >= 0 otherwise); the marks are cleared before this returns.  The deepest touched
        block of a node is found by walking up its chain from the tail to the first marked slot.
        That is the one of highest position (the order this compared positions in, with a
        position per slot): a chain's positions increase strictly from head to tail, as inserts
        join a node only at position ``last - 1`` above its head or ``last + 1`` below its tail,
        and splits, trims and removals keep a sub-chain.  The walk passes exactly the blocks the
        split then moves to the new node, so it relabels them on the way."""
        cdef int64_t i, m = 0, k = 0, s, nd, t, x, below = -1
        cdef int32_t nd2
        cdef int32_t* grown
        cdef int32_t* slots
        self.mark += 1
        if ctx.n_blocks > self.touched_cap:
            grown = <int32_t*>realloc(self.touched, 2 * ctx.n_blocks * sizeof(int32_t))
            if grown == NULL:
                self.nomem = 1
                return      # NOTE: out of memory: no split, no stamp (the cache fails)
            self.touched = grown
            self.touched_cap = ctx.n_blocks
        slots = self.touched + self.touched_cap
        for i in range(ctx.n_blocks):
            s = self.find(ctx.block_ids[i])
            if s < 0:
                continue
            nd = self.s_node[s]
            if nd < 0:
                continue        # a block the path holds twice: marked already
            self.s_node[s] = ~(<int32_t>nd)
            slots[k] = <int32_t>s
            k += 1
            if self.n_tail[nd] >= 0:
                self.n_tail[nd] = ~self.n_tail[nd]
                self.touched[m] = <int32_t>nd
                m += 1
        for i in range(m):
            nd = self.touched[i]
            t = ~self.n_tail[nd]
            self.n_tail[nd] = <int32_t>t
            if self.s_node[t] >= 0:
                # NOTE: the part below the deepest touched block is another branch: split it off
                # with the node's old stamp, like a radix tree splitting an edge.
                nd2 = self._new_node(<int32_t>t, self._stamp(nd), <int32_t>nd)
                x = t
                while self.s_node[x] >= 0:
                    self.s_node[x] = nd2
                    below = x
                    x = self.s_up[x]
                self.s_up[below] = -1
                self.n_tail[nd] = <int32_t>x
            self._touch(<int32_t>nd, ctx.req_vtime)
        for i in range(k):
            s = slots[i]
            self.s_node[s] = ~self.s_node[s]

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self._set_cost(slot, acc.cost)

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        cdef int64_t prev = self.last_slot
        cdef int32_t nd
        cdef bint joined = False
        self._set_cost(slot, acc.cost)
        if (self.last_mark == self.mark and prev >= 0 and self.slot_id(prev) == self.last_id):
            if acc.position == self.last_pos - 1 and self.s_up[prev] < 0:
                # deepest-first replay: the new block goes above the previous insert
                nd = self.s_node[prev]
                self.s_up[prev] = <int32_t>slot
                self.s_up[slot] = -1
                self.s_node[slot] = nd
                joined = True
            elif acc.position == self.last_pos + 1 and self.n_tail[self.s_node[prev]] == prev:
                # prefix-order replay: the new block goes below the previous insert
                nd = self.s_node[prev]
                self.s_up[slot] = <int32_t>prev
                self.s_node[slot] = nd
                self.n_tail[nd] = <int32_t>slot
                joined = True
        if not joined:
            self.s_up[slot] = -1
            self.s_node[slot] = self._new_node(<int32_t>slot, acc.req_vtime, -1)
        self.last_slot = slot
        self.last_id = acc.block_id
        self.last_pos = acc.position
        self.last_mark = self.mark
        return slot

    cdef int64_t _draw(self, int64_t now) noexcept nogil:
        cdef int64_t nc = 0, attempts = 0, n_sample = self.n_sample, limit = 4 * n_sample, i, x
        cdef int32_t nd, t
        cdef Dense* d = &self.nodes
        cdef int32_t* cand = self.cand
        cdef int32_t* cand_idx = self.cand_idx
        cdef const int32_t* n_tail = self.n_tail
        cdef const uint16_t* pins = self.pins
        cdef const char* pf_node = self.pf_node
        cdef const char* pf_stamp = <const char*>self.n_stamp32
        cdef int64_t pf_stamp_stride = sizeof(uint32_t)
        cdef int64_t pf_node_stride = self.pf_node_stride
        cdef uint64_t rng = self.rng
        self.forced = False
        if d.n == 0:
            return 0
        if self.n_stamp64 != NULL:
            pf_stamp = <const char*>self.n_stamp64
            pf_stamp_stride = sizeof(int64_t)
        # NOTE: the first n_sample draws are always made (limit >= n_sample) and are independent
        # of each other: make them in passes so that the random loads of a pass are all in flight
        # at once (index -> item; node -> tail, stamp and the variant's per-node array; tail ->
        # pin and cost), then keep the draws whose tail is unpinned, in draw order.  Same draws,
        # same order as one draw at a time.
        if d.n >= _pass_min_nodes:
            for i in range(n_sample):
                x = <int64_t>(((rng_next(&rng) >> 32) * <uint64_t>d.n) >> 32)
                cand_idx[i] = <int32_t>x
                __builtin_prefetch(&d.items[x])
            for i in range(n_sample):
                nd = d.items[cand_idx[i]]
                cand[i] = nd
                __builtin_prefetch(&n_tail[nd])
                __builtin_prefetch(pf_stamp + nd * pf_stamp_stride)
                if pf_node != NULL:
                    __builtin_prefetch(pf_node + nd * pf_node_stride)
            for i in range(n_sample):
                t = n_tail[cand[i]]
                __builtin_prefetch(&pins[t])
                if self.s_cost64 != NULL:
                    __builtin_prefetch(&self.s_cost64[t])
                else:
                    __builtin_prefetch(&self.s_cost32[t])
            for i in range(n_sample):
                nd = cand[i]
                if pins[n_tail[nd]] == 0:
                    cand[nc] = nd
                    cand_idx[nc] = cand_idx[i]
                    nc += 1
            attempts = n_sample
        while nc < n_sample and attempts < limit:
            attempts += 1
            x = <int64_t>(((rng_next(&rng) >> 32) * <uint64_t>d.n) >> 32)
            nd = d.items[x]
            if pins[n_tail[nd]] > 0:
                continue
            cand[nc] = nd
            cand_idx[nc] = <int32_t>x
            nc += 1
        self.rng = rng
        if nc == 0:
            for i in range(d.n):
                nd = d.items[i]
                if self.pins[self.n_tail[nd]] == 0:
                    cand[nc] = nd
                    cand_idx[nc] = <int32_t>i
                    nc += 1
                    if nc == self.n_sample:
                        break
        if nc == 0:
            self.forced = True
            for i in range(min(d.n, self.n_sample)):
                nd = d.items[i]
                cand[nc] = nd
                cand_idx[nc] = <int32_t>i
                nc += 1
        # NOTE: one (virtual) call scores the whole sample, so a variant's score stays a tight
        # inlined loop instead of an indirect call per candidate.
        self._score_cands(nc, now)
        return nc

    cdef int64_t _trim(self, int32_t nd, int64_t idx, int64_t take, bint force,
                       int64_t* out) noexcept nogil:
        """Evict up to ``take`` blocks from the deep end of node ``nd`` (at ``nodes.items[idx]``);
        stop at a pinned block (unless ``force`` and nothing was taken yet); return how many."""
        cdef int64_t got = 0
        cdef int32_t s, up
        while got < take:
            s = self.n_tail[nd]
            if self.pins[s] > 0 and not (force and got == 0):
                break
            up = self.s_up[s]
            if up >= 0:
                # NOTE: the chain's next block is the next victim: load it while this one goes.
                __builtin_prefetch(&self.pins[up])
                __builtin_prefetch(sids_addr(&self.slot_ids, up))
                __builtin_prefetch(&self.s_up[up])
            out[got] = self._drop_slot(s)
            got += 1
            if up < 0:
                self._node_del_at(idx)
                break
            self.n_tail[nd] = up
        return got

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, nc, i, got, take
        cdef int64_t w
        cdef double ws
        while k < n and self.nodes.n > 0:
            nc = self._draw(acc.vtime)
            w = 0
            ws = self.cand_score[0]
            for i in range(1, nc):
                if self.cand_score[i] < ws:
                    ws = self.cand_score[i]
                    w = i
            take = n - k
            if not self.drain and take > self.micro_batch:
                take = self.micro_batch
            got = self._trim(self.cand[w], self.cand_idx[w], take, self.forced, out + k)
            if got == 0:
                break
            k += got
        return k

    cdef int64_t evict(self, const Access* acc) noexcept nogil:
        cdef int64_t victim = 0
        if self.evict_n(acc, 1, &victim) == 1:
            return victim
        return 0

    cdef void remove(self, int64_t slot) noexcept nogil:
        cdef int32_t nd = self.s_node[slot], up = self.s_up[slot], x
        cdef int64_t i
        if self.n_tail[nd] == slot:
            if up >= 0:
                self.n_tail[nd] = up
            else:
                # NOTE: no positions in the node set: the node's index is searched for, O(live
                # nodes), but remove is off the simulator's path (py_remove only).
                i = 0
                while self.nodes.items[i] != nd:
                    i += 1
                self._node_del_at(i)
        else:
            # NOTE: the block below is found by walking up from the tail (no down links): this
            # is O(node length), but remove is off the simulator's path (py_remove only).
            x = self.n_tail[nd]
            while self.s_up[x] != slot:
                x = self.s_up[x]
            self.s_up[x] = up
        if self.last_slot == slot:
            self.last_slot = -1
        self._drop_slot(slot)

    # ---- tests ----

    cdef list _node_ids(self, int32_t nd):
        """The block ids of node ``nd``, head to tail."""
        cdef int32_t s = self.n_tail[nd]
        ids = []
        while s >= 0:
            ids.append(self.slot_id(s))
            s = self.s_up[s]
        ids.reverse()
        return ids

    def py_request(self, block_ids: list[int], req_vtime: int) -> None:
        """``on_request`` for an arriving request of ``block_ids`` stamped ``req_vtime`` (tests:
        the stamps need not follow the loop's)."""
        cdef RequestCtx ctx
        cdef int64_t i, n = len(block_ids)
        cdef int64_t* buf = <int64_t*>malloc(max(n, 1) * sizeof(int64_t))
        if buf == NULL:
            raise MemoryError("cannot allocate a request")
        try:
            for i in range(n):
                buf[i] = block_ids[i]
            ctx.block_ids = buf
            ctx.n_blocks = n
            ctx.timestamp_s = -1.0
            ctx.req_vtime = req_vtime
            ctx.vtime = req_vtime - n
            self.on_request(&ctx)
        finally:
            free(buf)

    def node_paths(self) -> list[tuple[int, list[int]]]:
        """(stamp, ids head to tail) of every live node, in sampling order (tests)."""
        cdef int64_t i
        cdef int32_t nd
        out = []
        for i in range(self.nodes.n):
            nd = self.nodes.items[i]
            out.append((self._stamp(nd), self._node_ids(nd)))
        return out


def make_node_policy(cls: type, name: str, capacity: int, params: dict) -> PartialNodeRandomCompute:
    """Check the parameters of a partial-node policy ``name`` and build ``cls`` (this class or a
    subclass) with them."""
    mode = params["eviction-mode"]
    if mode not in ("micro", "drain"):
        raise ShadowError(f"policy {name}: eviction-mode must be 'micro' or 'drain', got {mode!r}")
    if not 1 <= int(params["n-sample"]) <= (1 << 30):
        raise ShadowError(f"policy {name}: n-sample must be in 1..2**30, got {params['n-sample']}")
    if int(params["micro-batch"]) < 1:
        raise ShadowError(f"policy {name}: micro-batch must be positive, got {params['micro-batch']}")
    if not 0 <= int(params["seed"]) < (1 << 64):
        raise ShadowError(f"policy {name}: seed must be in 0..2**64-1, got {params['seed']}")
    return cls(capacity, int(params["n-sample"]), mode == "drain", int(params["micro-batch"]),
               int(params["seed"]))


def make(capacity: int, params: dict) -> PartialNodeRandomCompute:
    return make_node_policy(PartialNodeRandomCompute, "partial_node_random_compute", capacity, params)
