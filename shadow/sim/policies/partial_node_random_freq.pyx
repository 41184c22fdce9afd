# cython: language_level=3
"""partial_node_random_freq: partial_node_random_compute with a frequency term in the score.

The fork's ``_freq`` variant (the notes: "freq is (freq+1)·cost/recency, which matches
RandomFreeBlockManager").  Nodes, splitting, stamping, sampling, trimming, pins and the
``micro``/``drain`` modes are exactly partial_node_random_compute's (see that module; this file
repeats its node machinery because that module has no ``.pxd`` to inherit from).  The only
differences:

* every node has a **freq**: 0 when a request's inserts create it; +1 each time an arriving
  request's path runs through it (:meth:`on_request`, where the node is also stamped); a branch
  split off below the deepest touched block keeps the old freq, as it keeps the old stamp;
* eviction picks the lowest ``(freq + 1) * cost(tail) / max(1, now - stamp)`` among the drawn
  nodes (ties: first drawn), so a node that many requests went through outlives an equally old
  node that only one request built.

Memory: partial_node_random_compute's 96 B/slot + the per-node freq 8 = 104 B/slot.
"""

from libc.stdint cimport int64_t, int32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free

from shadow.errors import ShadowError
from shadow.sim.policy cimport Policy, Access, RequestCtx
from shadow.sim.policies.random_compute cimport (Dense, dense_init, dense_free, dense_add, dense_del,
                                                 rng_below)

DEFAULTS = "n-sample=128,eviction-mode=micro,micro-batch=64,seed=1"
HONOURS_PINS = True
NEEDS_NEXT_ACCESS = False
DESCRIPTION = "sample prefix-tree nodes by (freq+1) * cost / age, evict from the winner's deep end (micro|drain)"


cdef class PartialNodeRandomFreq(Policy):
    """See the module docstring.  Invariants: every resident slot belongs to exactly one live
    node; a live node's chain runs from a slot with ``up == -1`` to ``tail`` (``down == -1``) through
    increasing positions; ``nodes.items[0 .. nodes.n)`` are the live nodes, the rest are free."""
    cdef readonly int64_t n_sample
    cdef readonly int64_t micro_batch
    cdef readonly bint drain
    cdef uint64_t rng
    cdef int32_t* s_node
    cdef int32_t* s_up
    cdef int32_t* s_down
    cdef int32_t* s_pos
    cdef int64_t* s_cost
    cdef int32_t* n_tail
    cdef int64_t* n_stamp
    cdef int64_t* n_freq
    cdef int64_t* n_mark
    cdef int32_t* n_deep
    cdef Dense nodes
    cdef int64_t mark              # +1 per on_request
    cdef int32_t* touched          # scratch: nodes touched by the arriving request
    cdef int64_t touched_cap
    cdef int64_t last_slot, last_id, last_pos, last_mark   # the previous insert
    cdef int32_t* cand
    cdef double* cand_score
    cdef bint forced               # the last sample had only pinned tails (best effort)

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
        self.s_down = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.s_pos = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.s_cost = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.n_tail = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.n_stamp = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.n_freq = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.n_mark = <int64_t*>malloc(capacity * sizeof(int64_t))
        self.n_deep = <int32_t*>malloc(capacity * sizeof(int32_t))
        self.cand = <int32_t*>malloc(n_sample * sizeof(int32_t))
        self.cand_score = <double*>malloc(n_sample * sizeof(double))
        self.touched = NULL
        self.touched_cap = 0
        if (self.s_node == NULL or self.s_up == NULL or self.s_down == NULL or self.s_pos == NULL
                or self.s_cost == NULL or self.n_tail == NULL or self.n_stamp == NULL or self.n_freq == NULL
                or self.n_mark == NULL or self.n_deep == NULL or self.cand == NULL
                or self.cand_score == NULL):
            raise MemoryError(f"cannot allocate a cache of {capacity} slots")
        dense_init(&self.nodes, capacity, True)
        cdef int64_t i
        for i in range(capacity):
            self.n_mark[i] = 0
        self.mark = 0
        self.last_slot = -1
        self.last_id = 0
        self.last_pos = -2
        self.last_mark = -1

    def __dealloc__(self):
        free(self.s_node)
        free(self.s_up)
        free(self.s_down)
        free(self.s_pos)
        free(self.s_cost)
        free(self.n_tail)
        free(self.n_stamp)
        free(self.n_freq)
        free(self.n_mark)
        free(self.n_deep)
        free(self.cand)
        free(self.cand_score)
        free(self.touched)
        dense_free(&self.nodes)

    # ---- nodes ----

    cdef int32_t _new_node(self, int32_t tail, int64_t stamp, int64_t freq) noexcept nogil:
        cdef int32_t nd = self.nodes.items[self.nodes.n]
        dense_add(&self.nodes, nd)
        self.n_tail[nd] = tail
        self.n_stamp[nd] = stamp
        self.n_freq[nd] = freq
        self.n_mark[nd] = 0
        return nd

    cdef inline double _score(self, int32_t nd, int64_t now) noexcept nogil:
        cdef int64_t r = now - self.n_stamp[nd]
        if r < 1:
            r = 1
        return <double>(self.n_freq[nd] + 1) * <double>self.s_cost[self.n_tail[nd]] / <double>r

    # ---- the interface ----

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        cdef int64_t i, m = 0, s, nd, d, first, x, nd2
        cdef int32_t* grown
        self.mark += 1
        if ctx.n_blocks > self.touched_cap:
            grown = <int32_t*>realloc(self.touched, ctx.n_blocks * sizeof(int32_t))
            if grown == NULL:
                return      # NOTE: out of memory: no split, no stamp (only recency is lost)
            self.touched = grown
            self.touched_cap = ctx.n_blocks
        for i in range(ctx.n_blocks):
            s = self.find(ctx.block_ids[i])
            if s < 0:
                continue
            nd = self.s_node[s]
            if self.n_mark[nd] != self.mark:
                self.n_mark[nd] = self.mark
                self.n_deep[nd] = <int32_t>s
                self.touched[m] = <int32_t>nd
                m += 1
            elif self.s_pos[s] > self.s_pos[self.n_deep[nd]]:
                self.n_deep[nd] = <int32_t>s
        for i in range(m):
            nd = self.touched[i]
            d = self.n_deep[nd]
            first = self.s_down[d]
            if first >= 0:
                # NOTE: the part below the deepest touched block is another branch: split it off
                # with the node's old stamp and freq, like a radix tree splitting an edge.
                nd2 = self._new_node(self.n_tail[nd], self.n_stamp[nd], self.n_freq[nd])
                self.s_down[d] = -1
                self.s_up[first] = -1
                self.n_tail[nd] = <int32_t>d
                x = first
                while x >= 0:
                    self.s_node[x] = <int32_t>nd2
                    x = self.s_down[x]
            self.n_stamp[nd] = ctx.req_vtime
            self.n_freq[nd] += 1

    cdef void hit(self, int64_t slot, const Access* acc) noexcept nogil:
        self.s_cost[slot] = acc.cost

    cdef int64_t insert(self, const Access* acc) noexcept nogil:
        cdef int64_t slot = self._take_slot(acc.block_id)
        cdef int64_t prev = self.last_slot
        cdef int32_t nd
        cdef bint joined = False
        self.s_pos[slot] = <int32_t>acc.position
        self.s_cost[slot] = acc.cost
        if (self.last_mark == self.mark and prev >= 0 and self.slot_ids[prev] == self.last_id):
            if acc.position == self.last_pos - 1 and self.s_up[prev] < 0:
                # deepest-first replay: the new block goes above the previous insert
                nd = self.s_node[prev]
                self.s_up[prev] = <int32_t>slot
                self.s_down[slot] = <int32_t>prev
                self.s_up[slot] = -1
                self.s_node[slot] = nd
                joined = True
            elif acc.position == self.last_pos + 1 and self.s_down[prev] < 0:
                # prefix-order replay: the new block goes below the previous insert
                nd = self.s_node[prev]
                self.s_down[prev] = <int32_t>slot
                self.s_up[slot] = <int32_t>prev
                self.s_down[slot] = -1
                self.s_node[slot] = nd
                self.n_tail[nd] = <int32_t>slot
                joined = True
        if not joined:
            self.s_up[slot] = -1
            self.s_down[slot] = -1
            self.s_node[slot] = self._new_node(<int32_t>slot, acc.req_vtime, 0)
        self.last_slot = slot
        self.last_id = acc.block_id
        self.last_pos = acc.position
        self.last_mark = self.mark
        return slot

    cdef int64_t _draw(self, int64_t now) noexcept nogil:
        cdef int64_t nc = 0, attempts = 0, limit = 4 * self.n_sample, i
        cdef int32_t nd
        cdef Dense* d = &self.nodes
        self.forced = False
        if d.n == 0:
            return 0
        while nc < self.n_sample and attempts < limit:
            attempts += 1
            nd = d.items[rng_below(&self.rng, d.n)]
            if self.pins[self.n_tail[nd]] > 0:
                continue
            self.cand[nc] = nd
            self.cand_score[nc] = self._score(nd, now)
            nc += 1
        if nc == 0:
            for i in range(d.n):
                nd = d.items[i]
                if self.pins[self.n_tail[nd]] == 0:
                    self.cand[nc] = nd
                    self.cand_score[nc] = self._score(nd, now)
                    nc += 1
                    if nc == self.n_sample:
                        break
        if nc == 0:
            self.forced = True
            for i in range(min(d.n, self.n_sample)):
                nd = d.items[i]
                self.cand[nc] = nd
                self.cand_score[nc] = self._score(nd, now)
                nc += 1
        return nc

    cdef int64_t _trim(self, int32_t nd, int64_t take, bint force, int64_t* out) noexcept nogil:
        """Evict up to ``take`` blocks from the deep end of node ``nd``; stop at a pinned block
        (unless ``force`` and nothing was taken yet); return how many."""
        cdef int64_t got = 0
        cdef int32_t s, up
        while got < take:
            s = self.n_tail[nd]
            if self.pins[s] > 0 and not (force and got == 0):
                break
            up = self.s_up[s]
            out[got] = self._drop_slot(s)
            got += 1
            if up < 0:
                dense_del(&self.nodes, nd, True)
                break
            self.s_down[up] = -1
            self.n_tail[nd] = up
        return got

    cdef int64_t evict_n(self, const Access* acc, int64_t n, int64_t* out) noexcept nogil:
        cdef int64_t k = 0, nc, i, got, take
        cdef int32_t win
        cdef double ws
        while k < n and self.nodes.n > 0:
            nc = self._draw(acc.vtime)
            win = self.cand[0]
            ws = self.cand_score[0]
            for i in range(1, nc):
                if self.cand_score[i] < ws:
                    ws = self.cand_score[i]
                    win = self.cand[i]
            take = n - k
            if not self.drain and take > self.micro_batch:
                take = self.micro_batch
            got = self._trim(win, take, self.forced, out + k)
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
        cdef int32_t nd = self.s_node[slot], up = self.s_up[slot], down = self.s_down[slot]
        if up >= 0:
            self.s_down[up] = down
        if down >= 0:
            self.s_up[down] = up
        if self.n_tail[nd] == slot:
            if up >= 0:
                self.n_tail[nd] = up
            else:
                dense_del(&self.nodes, nd, True)
        if self.last_slot == slot:
            self.last_slot = -1
        self._drop_slot(slot)

    # ---- tests ----

    def node_paths(self) -> list[tuple[int, list[int]]]:
        """(stamp, ids head to tail) of every live node, in sampling order (tests)."""
        cdef int64_t i
        cdef int32_t nd, s
        out = []
        for i in range(self.nodes.n):
            nd = self.nodes.items[i]
            ids = []
            s = self.n_tail[nd]
            while s >= 0:
                ids.append(self.slot_ids[s])
                s = self.s_up[s]
            ids.reverse()
            out.append((self.n_stamp[nd], ids))
        return out

    def node_freqs(self) -> dict[tuple[int, ...], int]:
        """freq of every live node, keyed by its ids head to tail (tests)."""
        cdef int64_t i
        cdef int32_t nd, s
        out = {}
        for i in range(self.nodes.n):
            nd = self.nodes.items[i]
            ids = []
            s = self.n_tail[nd]
            while s >= 0:
                ids.append(self.slot_ids[s])
                s = self.s_up[s]
            ids.reverse()
            out[tuple(ids)] = self.n_freq[nd]
        return out


def make(capacity: int, params: dict) -> PartialNodeRandomFreq:
    mode = params["eviction-mode"]
    if mode not in ("micro", "drain"):
        raise ShadowError(f"policy partial_node_random_freq: eviction-mode must be 'micro' or 'drain', got {mode!r}")
    if not 1 <= int(params["n-sample"]) <= (1 << 30):
        raise ShadowError(f"policy partial_node_random_freq: n-sample must be in 1..2**30, got {params['n-sample']}")
    if int(params["micro-batch"]) < 1:
        raise ShadowError(f"policy partial_node_random_freq: micro-batch must be positive, got {params['micro-batch']}")
    if not 0 <= int(params["seed"]) < (1 << 64):
        raise ShadowError(f"policy partial_node_random_freq: seed must be in 0..2**64-1, got {params['seed']}")
    return PartialNodeRandomFreq(capacity, int(params["n-sample"]), mode == "drain",
                                int(params["micro-batch"]), int(params["seed"]))
