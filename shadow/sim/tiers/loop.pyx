# cython: language_level=3
"""The offload tier of shadow/sim/tiers/model.py, compiled: the same decisions (vLLM 0.32's
OffloadingConnector scheduler and CPUOffloadingManager with its ``lru`` and ``arc`` policies;
see tiers/model.py's docstring, which is the reference this module is tested against request by
request), at C speed.

Layout: resident chunks in slots ``0 .. n-1`` (an :c:type:`IdMap` id -> slot, a free-slot
stack); ``lru``: one :c:type:`DList` (head newest); ``arc``: T1 and T2 as two DLists over the
slots, the ghosts B1 and B2 as two DLists over ``2n + 1`` ghost slots with their own IdMap (each
pair of lists shares its link arrays); the
store-threshold tracker: a DList over ``tracker`` slots with offer counts.  Invariant: a chunk
id is in at most one of T1, T2 (resident) and B1, B2 (ghosts); every list's tail is its oldest.

:class:`ChunkChain` is tiers/model.py's TierChain (a host tier with a disk tier behind it) over two
ChunkTiers, with one request's flags kept by chunk position.
"""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc

from shadow.sim.core.idtable cimport IdMap, idmap_del, idmap_free, idmap_get, idmap_init, idmap_put
from shadow.sim.policies._shared.dlist cimport (DList, dl_free, dl_init, dl_move_head, dl_push_head,
                                         dl_unlink)

# flags of a request's recorded chunk
cdef enum:
    F_INSERTED = 1
    F_REUSED = 2

cdef enum:
    P_LRU = 0
    P_ARC = 1


cdef class ChunkTier:
    """One tier of ``n_chunks`` chunks under ``policy`` (``"lru"`` or ``"arc"``)."""

    cdef readonly int64_t n_chunks
    cdef readonly int policy
    cdef readonly int64_t store_threshold, max_tracker_size
    cdef readonly int64_t n_stored, n_evicted, n_store_failed, n_store_skipped
    cdef readonly double p
    cdef IdMap slots
    cdef int64_t* slot_id
    cdef int32_t* free_slots
    cdef int64_t n_free
    cdef uint8_t* in_t2
    cdef uint8_t* prot
    cdef DList t1          # lru: the one list
    cdef DList t2
    cdef IdMap gmap
    cdef int64_t* gslot_id
    cdef uint8_t* in_b2
    cdef int32_t* gfree
    cdef int64_t n_gfree
    cdef DList b1
    cdef DList b2
    cdef IdMap tmap
    cdef int64_t* tslot_id
    cdef int64_t* tcount
    cdef uint8_t* tprot
    cdef int32_t* tfree
    cdef int64_t n_tfree
    cdef DList tlist
    # one request's scratch: its chunk keys, recorded keys and their flags
    cdef int64_t* acc_keys
    cdef uint8_t* acc_flags
    cdef int64_t n_acc
    cdef int64_t cap_acc

    def __cinit__(self, int64_t n_chunks, str policy="lru", int64_t store_threshold=0,
                  int64_t max_tracker_size=64000):
        cdef int64_t i
        if n_chunks < 1 or n_chunks > 2**30:
            raise ValueError(f"n_chunks {n_chunks} is not 1 .. 2**30")
        if policy not in ("lru", "arc"):
            raise ValueError(f"unknown tier policy {policy!r}")
        self.n_chunks = n_chunks
        self.policy = P_LRU if policy == "lru" else P_ARC
        self.store_threshold = store_threshold
        self.max_tracker_size = max_tracker_size
        idmap_init(&self.slots, n_chunks)
        dl_init(&self.t1, n_chunks)
        _share(&self.t2, &self.t1)
        self.slot_id = <int64_t*>calloc(n_chunks, sizeof(int64_t))
        self.free_slots = <int32_t*>malloc(n_chunks * sizeof(int32_t))
        self.in_t2 = <uint8_t*>calloc(n_chunks, 1)
        self.prot = <uint8_t*>calloc(n_chunks, 1)
        if not (self.slot_id and self.free_slots and self.in_t2 and self.prot):
            raise MemoryError("cannot allocate a tier")
        for i in range(n_chunks):
            self.free_slots[i] = <int32_t>(n_chunks - 1 - i)
        self.n_free = n_chunks
        if self.policy == P_ARC:
            # NOTE: B1 and B2 hold at most n ids each (a push past n drops that list's oldest
            # at once: vLLM trims after the whole eviction, to the same ids): 2n + 1 ghost slots
            idmap_init(&self.gmap, 2 * n_chunks + 1)
            dl_init(&self.b1, 2 * n_chunks + 1)
            _share(&self.b2, &self.b1)
            self.gslot_id = <int64_t*>calloc(2 * n_chunks + 1, sizeof(int64_t))
            self.in_b2 = <uint8_t*>calloc(2 * n_chunks + 1, 1)
            self.gfree = <int32_t*>malloc((2 * n_chunks + 1) * sizeof(int32_t))
            if not (self.gslot_id and self.in_b2 and self.gfree):
                raise MemoryError("cannot allocate a tier's ghosts")
            for i in range(2 * n_chunks + 1):
                self.gfree[i] = <int32_t>(2 * n_chunks - i)
            self.n_gfree = 2 * n_chunks + 1
        if store_threshold >= 2:
            if max_tracker_size < 1:
                raise ValueError("max_tracker_size must be at least 1")
            idmap_init(&self.tmap, max_tracker_size)
            dl_init(&self.tlist, max_tracker_size)
            self.tslot_id = <int64_t*>calloc(max_tracker_size, sizeof(int64_t))
            self.tcount = <int64_t*>calloc(max_tracker_size, sizeof(int64_t))
            self.tprot = <uint8_t*>calloc(max_tracker_size, 1)
            self.tfree = <int32_t*>malloc(max_tracker_size * sizeof(int32_t))
            if not (self.tslot_id and self.tcount and self.tprot and self.tfree):
                raise MemoryError("cannot allocate a tier's store tracker")
            for i in range(max_tracker_size):
                self.tfree[i] = <int32_t>(max_tracker_size - 1 - i)
            self.n_tfree = max_tracker_size

    def __dealloc__(self):
        idmap_free(&self.slots)
        dl_free(&self.t1)
        free(self.slot_id)
        free(self.free_slots)
        free(self.in_t2)
        free(self.prot)
        if self.policy == P_ARC:
            idmap_free(&self.gmap)
            dl_free(&self.b1)
            free(self.gslot_id)
            free(self.in_b2)
            free(self.gfree)
        if self.store_threshold >= 2:
            idmap_free(&self.tmap)
            dl_free(&self.tlist)
            free(self.tslot_id)
            free(self.tcount)
            free(self.tprot)
            free(self.tfree)
        free(self.acc_keys)
        free(self.acc_flags)

    def __len__(self) -> int:
        return self.n_chunks - self.n_free

    def allocated_bytes(self) -> int:
        """Bytes of every array this tier allocated (the request scratch aside)."""
        cdef int64_t n = self.n_chunks, g = 2 * n + 1, t = self.max_tracker_size
        # per slot: table 2 entries x (8 + 4), id 8, free stack 4, two flags, list links 8
        cdef int64_t total = self.slots.size * 12 + n * (8 + 4 + 2 + 8)
        if self.policy == P_ARC:
            total += self.gmap.size * 12 + g * (8 + 1 + 4 + 8)
        if self.store_threshold >= 2:
            total += self.tmap.size * 12 + t * (8 + 8 + 1 + 4 + 8)
        return total

    def holds(self, int64_t key) -> bool:
        return idmap_get(&self.slots, key) >= 0

    cdef int _reserve(self, int64_t n) except -1:
        """Room for ``n`` recorded keys in the request scratch."""
        if n <= self.cap_acc:
            return 0
        free(self.acc_keys)
        free(self.acc_flags)
        self.cap_acc = max(n, 2 * self.cap_acc, 64)
        self.acc_keys = <int64_t*>malloc(self.cap_acc * sizeof(int64_t))
        self.acc_flags = <uint8_t*>malloc(self.cap_acc)
        if not (self.acc_keys and self.acc_flags):
            raise MemoryError("cannot allocate a tier's request scratch")
        return 0

    # --- the ghosts (arc) ---------------------------------------------------------------------

    cdef void _ghost_push(self, int64_t key, bint to_b2) noexcept nogil:
        cdef int32_t g = self.gfree[self.n_gfree - 1]
        self.n_gfree -= 1
        self.gslot_id[g] = key
        self.in_b2[g] = to_b2
        idmap_put(&self.gmap, key, g)
        dl_push_head(&self.b2 if to_b2 else &self.b1, g)

    cdef void _ghost_drop(self, int32_t g) noexcept nogil:
        dl_unlink(&self.b2 if self.in_b2[g] else &self.b1, g)
        idmap_del(&self.gmap, self.gslot_id[g])
        self.gfree[self.n_gfree] = g
        self.n_gfree += 1

    cdef void _ghost_hit(self, int64_t key) noexcept nogil:
        cdef int32_t g = idmap_get(&self.gmap, key)
        cdef double d
        if g < 0:
            return
        if not self.in_b2[g]:
            d = max(1.0, <double>self.b2.n / <double>self.b1.n)
            self.p = min(self.p + d, <double>self.n_chunks)
            dl_move_head(&self.b1, g)
        else:
            d = max(1.0, <double>self.b1.n / <double>self.b2.n)
            self.p = max(self.p - d, 0.0)
            dl_move_head(&self.b2, g)

    # --- residency ----------------------------------------------------------------------------

    cdef void _insert(self, int64_t key) noexcept nogil:
        cdef int32_t s = self.free_slots[self.n_free - 1]
        cdef int32_t g
        self.n_free -= 1
        self.slot_id[s] = key
        self.in_t2[s] = 0
        idmap_put(&self.slots, key, s)
        dl_push_head(&self.t1, s)
        if self.policy == P_ARC:
            g = idmap_get(&self.gmap, key)
            if g >= 0:
                self._ghost_drop(g)

    cdef void _drop(self, int32_t s) noexcept nogil:
        """Evict slot ``s`` (arc: into the ghost of its list)."""
        cdef int64_t key = self.slot_id[s]
        cdef bint t2 = self.in_t2[s]
        dl_unlink(&self.t2 if t2 else &self.t1, s)
        idmap_del(&self.slots, key)
        self.free_slots[self.n_free] = s
        self.n_free += 1
        if self.policy == P_ARC:
            self._ghost_push(key, t2)
            if t2 and self.b2.n > self.n_chunks:
                self._ghost_drop(self.b2.tail)
            elif not t2 and self.b1.n > self.n_chunks:
                self._ghost_drop(self.b1.tail)

    cdef int32_t _next_free(self, int32_t s) noexcept nogil:
        """``s`` or the first slot towards the head from it that is not protected (-1 none)."""
        while s >= 0 and self.prot[s]:
            s = self.t2.prev[s] if self.in_t2[s] else self.t1.prev[s]
        return s

    cdef bint _evict(self, int64_t need, int64_t n_prot) noexcept nogil:
        """Evict ``need`` chunks outside the protected ones (``prot`` set), all or nothing."""
        cdef int32_t s1, s2, s, nxt
        cdef int64_t size1, i
        if self.n_chunks - self.n_free - n_prot < need:
            return False
        if self.policy == P_LRU:
            s = self.t1.tail
            for i in range(need):
                s = self._next_free(s)
                nxt = self.t1.prev[s]
                self._drop(s)
                s = nxt
            return True
        s1 = self.t1.tail
        s2 = self.t2.tail
        size1 = self.t1.n
        for i in range(need):
            s = -1
            if size1 >= <int64_t>self.p:
                s1 = self._next_free(s1)
                if s1 >= 0:
                    s = s1
                    s1 = self.t1.prev[s1]
                    size1 -= 1
            if s < 0:
                s2 = self._next_free(s2)
                if s2 >= 0:
                    s = s2
                    s2 = self.t2.prev[s2]
            if s < 0:
                s1 = self._next_free(s1)
                s = s1
                s1 = self.t1.prev[s1]
                size1 -= 1
            self._drop(s)
        return True

    # --- the store-threshold tracker ----------------------------------------------------------

    cdef void _count_offers(self, const int64_t* keys, int64_t n) noexcept nogil:
        cdef int64_t i, n_unprot
        cdef int32_t t
        cdef int64_t n_prot = 0
        for i in range(n):
            t = idmap_get(&self.tmap, keys[i])
            if t >= 0:
                dl_move_head(&self.tlist, t)
                self.tcount[t] += 1
                if not self.tprot[t]:
                    self.tprot[t] = 1
                    n_prot += 1
        n_unprot = self.tlist.n - n_prot
        for i in range(n):
            if idmap_get(&self.tmap, keys[i]) >= 0:
                continue
            if self.tlist.n >= self.max_tracker_size:
                if n_unprot == 0:
                    continue
                t = self.tlist.tail
                dl_unlink(&self.tlist, t)
                idmap_del(&self.tmap, self.tslot_id[t])
                self.tfree[self.n_tfree] = t
                self.n_tfree += 1
                n_unprot -= 1
            t = self.tfree[self.n_tfree - 1]
            self.n_tfree -= 1
            self.tslot_id[t] = keys[i]
            self.tcount[t] = 1
            self.tprot[t] = 0
            idmap_put(&self.tmap, keys[i], t)
            dl_push_head(&self.tlist, t)
        for i in range(n):
            t = idmap_get(&self.tmap, keys[i])
            if t >= 0:
                self.tprot[t] = 0

    # --- one request --------------------------------------------------------------------------

    cdef int64_t _store(self, const int64_t* keys, int64_t n, int64_t n_extra_prot=0,
                        bint ghosts=True) noexcept nogil:
        """prepare_store + complete_store of ``keys``; the number stored (-1: eviction failed).
        Records the offer's kept keys in the scratch.  ``n_extra_prot``: slots the caller has
        marked protected (transfers in flight); ``ghosts``: arc's on_store_miss here (a chain
        does it itself, once per key and request)."""
        cdef int64_t i, n_new = 0, n_prot = n_extra_prot, stored = 0, need
        cdef int64_t store_start = self.n_acc
        cdef int32_t s
        cdef int32_t t
        cdef bint held, keep
        if self.store_threshold >= 2:
            self._count_offers(keys, n)
        # record (in key order) the held keys and the new ones that pass the threshold
        for i in range(n):
            held = idmap_get(&self.slots, keys[i]) >= 0
            keep = held
            if not held:
                if self.store_threshold >= 2:
                    t = idmap_get(&self.tmap, keys[i])
                    keep = t >= 0 and self.tcount[t] >= self.store_threshold
                    if not keep:
                        self.n_store_skipped += 1
                else:
                    keep = True
                if keep:
                    n_new += 1
            if keep:
                self.acc_keys[self.n_acc] = keys[i]
                self.acc_flags[self.n_acc] = F_REUSED if held else 0
                self.n_acc += 1
        if self.policy == P_ARC and n_new and ghosts:
            # NOTE: on_store_miss: the offer's new keys, deepest first, before any insert
            for i in range(self.n_acc - 1, store_start - 1, -1):
                if self.acc_flags[i] == 0:
                    self._ghost_hit(self.acc_keys[i])
        if n_new == 0:
            return 0
        need = n_new - self.n_free
        if need > 0:
            for i in range(n):
                s = idmap_get(&self.slots, keys[i])
                if s >= 0 and not self.prot[s]:
                    self.prot[s] = 1
                    n_prot += 1
            if not self._evict(need, n_prot):
                stored = -1
            for i in range(n):
                s = idmap_get(&self.slots, keys[i])
                if s >= 0:
                    self.prot[s] = 0
            if stored < 0:
                self.n_store_failed += 1
                return -1
            self.n_evicted += need
        for i in range(store_start, self.n_acc):
            if self.acc_flags[i] == 0:
                self._insert(self.acc_keys[i])
                self.acc_flags[i] = F_INSERTED
                stored += 1
        self.n_stored += stored
        return stored

    cdef void _finish(self) noexcept nogil:
        """on_request_finished over the recorded keys, deepest first."""
        cdef int64_t i
        cdef int32_t s
        cdef uint8_t f
        for i in range(self.n_acc - 1, -1, -1):
            s = idmap_get(&self.slots, self.acc_keys[i])
            if s < 0:
                continue
            f = self.acc_flags[i]
            if self.policy == P_LRU:
                dl_move_head(&self.t1, s)
            elif f & F_INSERTED and not f & F_REUSED:
                dl_move_head(&self.t2 if self.in_t2[s] else &self.t1, s)
            elif f & F_REUSED:
                if self.in_t2[s]:
                    dl_move_head(&self.t2, s)
                else:
                    dl_unlink(&self.t1, s)
                    self.in_t2[s] = 1
                    dl_push_head(&self.t2, s)

    cdef int64_t _serve(self, const int64_t* ids, int64_t n_ids, int64_t prompt_tokens,
                        int64_t gpu_hit_blocks, int64_t B, int64_t k, int64_t* out) noexcept nogil:
        """One request (tier.serve_request); ``out``: hit tokens, loaded chunks, stored
        chunks."""
        cdef int64_t C = B * k
        cdef int64_t n_full = min(prompt_tokens // B, n_ids)
        cdef int64_t n_keys = n_full // k
        cdef int64_t local = gpu_hit_blocks * B, hit = 0, max_hit, start, end, n, top, i
        cdef int64_t first, last, next_stored = 0, loaded = 0, stored = 0, got
        self.n_acc = 0
        max_hit = min(prompt_tokens, n_keys * C)
        if max_hit - local >= C:
            start = local // C
            end = min((max_hit + C - 1) // C, n_keys)
            n = 0
            i = start
            while i < end and idmap_get(&self.slots, ids[(i + 1) * k - 1]) >= 0:
                n += 1
                i += 1
            top = min(max_hit, C * (start + n))
            if top - local >= C:
                hit = top - local
        if hit:
            first = gpu_hit_blocks // k
            last = (local + hit + C - 1) // C
            for i in range(first, last):
                self.acc_keys[self.n_acc] = ids[(i + 1) * k - 1]
                self.acc_flags[self.n_acc] = F_REUSED
                self.n_acc += 1
            loaded = last - first
            next_stored = last
        if n_keys > next_stored:
            # NOTE: the offer's keys, gathered after the loaded ones in the scratch's tail room
            for i in range(next_stored, n_keys):
                self.acc_keys[self.n_acc + n_keys + (i - next_stored)] = ids[(i + 1) * k - 1]
            got = self._store(&self.acc_keys[self.n_acc + n_keys], n_keys - next_stored)
            stored = got if got > 0 else 0
        self._finish()
        out[0] = hit
        out[1] = loaded
        out[2] = stored
        return 0

    def serve(self, ids, int64_t prompt_tokens, int64_t gpu_hit_blocks, int64_t B,
              int64_t k) -> tuple:
        """One request: (hit tokens, loaded chunks, stored chunks), as tier.serve_request."""
        cdef int64_t[::1] a = _as_int64(ids)
        cdef int64_t out[3]
        self._reserve(3 * (a.shape[0] // k + 1) + 8)
        self._serve(&a[0] if a.shape[0] else NULL, a.shape[0], prompt_tokens, gpu_hit_blocks,
                    B, k, out)
        return out[0], out[1], out[2]

    def serve_all(self, ids, off, prompt_tokens, gpu_hits, order, int64_t B, int64_t k,
                  pos_cost) -> tuple:
        """Every request ``order`` names (skipping gpu_hits < 0): totals (hit tokens, loaded
        chunks, stored chunks, the summed ``pos_cost`` of the loaded blocks)."""
        cdef int64_t[::1] I = _as_int64(ids)
        cdef int64_t[::1] O = _as_int64(off)
        cdef int64_t[::1] P = _as_int64(prompt_tokens)
        cdef int64_t[::1] H = _as_int64(gpu_hits)
        cdef int64_t[::1] R = _as_int64(order)
        cdef double[::1] PC = _as_double(pos_cost)
        cdef int64_t j, r, h, hi, b, n_pc = PC.shape[0]
        cdef int64_t out[3]
        cdef int64_t tot_hit = 0, tot_loaded = 0, tot_stored = 0
        cdef double saved = 0.0
        cdef int64_t max_len = 0
        for j in range(O.shape[0] - 1):
            max_len = max(max_len, O[j + 1] - O[j])
        self._reserve(3 * (max_len // k + 1) + 8)
        with nogil:
            for j in range(R.shape[0]):
                r = R[j]
                h = H[r]
                if h < 0:
                    continue
                self._serve(&I[O[r]] if O[r + 1] > O[r] else NULL, O[r + 1] - O[r], P[r], h, B,
                            k, out)
                tot_hit += out[0]
                tot_loaded += out[1]
                tot_stored += out[2]
                if out[0]:
                    hi = min(h + (out[0] + B - 1) // B, n_pc)
                    for b in range(h, hi):
                        saved += PC[b]
        return tot_hit, tot_loaded, tot_stored, saved


# flags of a chain request's chunk, by position (F_INSERTED, F_REUSED as above)
cdef enum:
    C_REC = 4           # recorded by the tier (seen by its on_request_finished)
    C_MISSED = 8        # arc's on_store_miss has seen it in this request
    C_PROBED = 16       # the disk tier's probe has landed
    C_PROMOTED = 32     # promoted for this request (its tokens are the disk tier's)
    C_PENDING = 64      # promotion in flight (this scan)


cdef class ChunkChain:
    """tiers/model.py's TierChain compiled: the host tier ``cpu`` with the disk tier ``disk`` behind
    it (two :class:`ChunkTier`), one request at a time with the lookup retried until nothing
    is pending.  Chunk keys of a request are distinct (block ids of one prefix); the host tier
    has no store threshold (vLLM's tiering refuses one)."""

    cdef readonly ChunkTier cpu, disk
    cdef readonly int64_t n_promoted, n_promote_failed, n_cascaded, n_gave_up
    cdef int64_t* keys
    cdef int64_t* casc
    cdef int64_t* casc_pos
    cdef uint8_t* cflag
    cdef uint8_t* dflag
    cdef int64_t cap

    def __cinit__(self, ChunkTier cpu, ChunkTier disk):
        if cpu.store_threshold >= 2 or disk.store_threshold >= 2:
            raise ValueError("a chain's tiers take no store threshold")
        self.cpu = cpu
        self.disk = disk

    def __dealloc__(self):
        free(self.keys)
        free(self.casc)
        free(self.casc_pos)
        free(self.cflag)
        free(self.dflag)

    def __len__(self) -> int:
        return len(self.cpu)

    cdef int _reserve(self, int64_t n) except -1:
        """Room for a request of ``n`` chunks."""
        self.cpu._reserve(3 * n + 8)
        self.disk._reserve(3 * n + 8)
        if n <= self.cap:
            return 0
        free(self.keys)
        free(self.casc)
        free(self.casc_pos)
        free(self.cflag)
        free(self.dflag)
        self.cap = max(n, 2 * self.cap, 64)
        self.keys = <int64_t*>malloc(self.cap * sizeof(int64_t))
        self.casc = <int64_t*>malloc(self.cap * sizeof(int64_t))
        self.casc_pos = <int64_t*>malloc(self.cap * sizeof(int64_t))
        self.cflag = <uint8_t*>malloc(self.cap)
        self.dflag = <uint8_t*>malloc(self.cap)
        if not (self.keys and self.casc and self.casc_pos and self.cflag and self.dflag):
            raise MemoryError("cannot allocate a chain's request scratch")
        return 0

    cdef bint _promote(self, int64_t i, int64_t n_pending) noexcept nogil:
        """The host tier's prepare_store of chunk ``i`` (a promotion), its pending slots
        protected; False if it found no room."""
        cdef int64_t key = self.keys[i], got
        cdef int64_t pos = i
        if self.cpu.policy == P_ARC and not self.cflag[i] & C_MISSED:
            self.cpu._ghost_hit(key)
            self.cflag[i] |= C_MISSED
        self.cpu.n_acc = 0
        got = self.cpu._store(&self.keys[i], 1, n_pending, False)
        _merge(self.cpu, self.cflag, self.keys, &pos)
        if got < 0:
            self.cpu.n_store_failed -= 1
            self.n_promote_failed += 1
            return False
        self.cpu.n_stored -= got
        self.cpu.prot[idmap_get(&self.cpu.slots, key)] = 1
        self.cflag[i] |= C_PENDING | C_PROMOTED
        self.n_promoted += 1
        self.dflag[i] |= C_REC
        if not self.dflag[i] & F_INSERTED:
            self.dflag[i] |= F_REUSED
        return True

    cdef void _serve(self, const int64_t* ids, int64_t n_ids, int64_t prompt_tokens,
                     int64_t gpu_hit_blocks, int64_t B, int64_t k, int64_t* out) noexcept nogil:
        """One request (tier.serve_chain); ``out``: hit tokens, disk hit tokens, loaded
        chunks, promoted loaded chunks, stored chunks, cascaded chunks."""
        cdef int64_t C = B * k
        cdef int64_t n_keys = min(prompt_tokens // B, n_ids) // k
        cdef int64_t local = gpu_hit_blocks * B, hit = 0, max_hit, start, end, n, top, i
        cdef int64_t scan, limit, n_pending, first, last, next_stored = 0, got, m, n_cached
        cdef int64_t loaded = 0, promoted_loaded = 0, disk_hit = 0, stored = 0, cascaded = 0
        cdef bint deferred
        cdef int32_t sl
        for i in range(n_keys):
            self.keys[i] = ids[(i + 1) * k - 1]
            self.cflag[i] = 0
            self.dflag[i] = 0
        max_hit = min(prompt_tokens, n_keys * C)
        if max_hit - local >= C:
            start = local // C
            end = min((max_hit + C - 1) // C, n_keys)
            limit = 3 * (end - start) + self.cpu.store_threshold + 4
            n = 0
            for scan in range(limit + 1):
                if scan == limit:
                    self.n_gave_up += 1
                    n = 0
                    break
                n = 0
                n_pending = 0
                deferred = False
                for i in range(start, end):
                    if idmap_get(&self.cpu.slots, self.keys[i]) >= 0:
                        if self.cflag[i] & C_PENDING:
                            deferred = True
                        n += 1
                        continue
                    if not self.cflag[i] & C_PROBED:
                        self.cflag[i] |= C_PROBED
                        deferred = True
                        continue
                    if idmap_get(&self.disk.slots, self.keys[i]) < 0:
                        break
                    if not self._promote(i, n_pending):
                        break
                    n_pending += 1
                    deferred = True
                    n += 1
                # the step's end: the promotions land
                for i in range(start, end):
                    if self.cflag[i] & C_PENDING:
                        self.cflag[i] &= ~C_PENDING
                        sl = idmap_get(&self.cpu.slots, self.keys[i])
                        self.cpu.prot[sl] = 0
                if not deferred:
                    break
            top = min(max_hit, C * (start + n))
            if top - local >= C:
                hit = top - local
        if hit:
            n_cached = local + hit
            first = gpu_hit_blocks // k
            last = (n_cached + C - 1) // C
            for i in range(first, last):
                self.cflag[i] |= C_REC
                if not self.cflag[i] & F_INSERTED:
                    self.cflag[i] |= F_REUSED
                if self.cflag[i] & C_PROMOTED:
                    promoted_loaded += 1
                    disk_hit += min(n_cached, (i + 1) * C) - max(local, i * C)
            loaded = last - first
            next_stored = last
        if n_keys > next_stored:
            if self.cpu.policy == P_ARC:
                for i in range(n_keys - 1, next_stored - 1, -1):
                    if idmap_get(&self.cpu.slots, self.keys[i]) < 0 and \
                            not self.cflag[i] & C_MISSED:
                        self.cpu._ghost_hit(self.keys[i])
                        self.cflag[i] |= C_MISSED
            for i in range(next_stored, n_keys):
                self.casc_pos[i - next_stored] = i
            self.cpu.n_acc = 0
            got = self.cpu._store(&self.keys[next_stored], n_keys - next_stored, 0, False)
            # the cascade: the chunks this store inserted, in offer order
            m = 0
            for i in range(self.cpu.n_acc):
                if self.cpu.acc_flags[i] & F_INSERTED:
                    self.casc[m] = self.cpu.acc_keys[i]
                    m += 1
            _merge(self.cpu, self.cflag, self.keys, self.casc_pos)
            if got > 0:
                stored = got
                m = 0
                for i in range(next_stored, n_keys):
                    if self.cflag[i] & F_INSERTED and self.keys[i] == self.casc[m]:
                        self.casc_pos[m] = i
                        m += 1
                        if m == got:
                            break
                self.disk.n_acc = 0
                got = self.disk._store(self.casc, m)
                _merge(self.disk, self.dflag, self.keys, self.casc_pos)
                if got > 0:
                    cascaded = got
                    self.n_cascaded += got
        _finish_tier(self.cpu, self.cflag, self.keys, n_keys)
        _finish_tier(self.disk, self.dflag, self.keys, n_keys)
        out[0] = hit
        out[1] = disk_hit
        out[2] = loaded
        out[3] = promoted_loaded
        out[4] = stored
        out[5] = cascaded

    def serve(self, ids, int64_t prompt_tokens, int64_t gpu_hit_blocks, int64_t B,
              int64_t k) -> tuple:
        """One request: (hit tokens, disk hit tokens, loaded chunks, promoted loaded chunks,
        stored chunks, cascaded chunks), as tier.serve_chain."""
        cdef int64_t[::1] a = _as_int64(ids)
        cdef int64_t out[6]
        self._reserve(a.shape[0] // k + 1)
        self._serve(&a[0] if a.shape[0] else NULL, a.shape[0], prompt_tokens, gpu_hit_blocks,
                    B, k, out)
        return out[0], out[1], out[2], out[3], out[4], out[5]

    def serve_all(self, ids, off, prompt_tokens, gpu_hits, order, int64_t B, int64_t k,
                  pos_cost) -> tuple:
        """Every request ``order`` names (skipping gpu_hits < 0): totals (hit tokens, disk
        hit tokens, loaded chunks, promoted loaded chunks, stored chunks, cascaded chunks,
        the summed ``pos_cost`` of the loaded blocks from host chunks, from promoted ones)."""
        cdef int64_t[::1] I, O, P, H, R
        I, O, P, H, R = [_as_int64(a) for a in (ids, off, prompt_tokens, gpu_hits, order)]
        cdef double[::1] PC = _as_double(pos_cost)
        cdef int64_t j, r, h, hi, b, q, n_pc = PC.shape[0]
        cdef int64_t out[6]
        cdef int64_t tot[6]
        cdef double saved_cpu = 0.0, saved_disk = 0.0
        cdef int64_t max_len = 0
        for j in range(6):
            tot[j] = 0
        for j in range(O.shape[0] - 1):
            max_len = max(max_len, O[j + 1] - O[j])
        self._reserve(max_len // k + 1)
        with nogil:
            for j in range(R.shape[0]):
                r = R[j]
                h = H[r]
                if h < 0:
                    continue
                self._serve(&I[O[r]] if O[r + 1] > O[r] else NULL, O[r + 1] - O[r], P[r], h,
                            B, k, out)
                for q in range(6):
                    tot[q] += out[q]
                if out[0]:
                    hi = min(h + (out[0] + B - 1) // B, n_pc)
                    for b in range(h, hi):
                        if self.cflag[b // k] & C_PROMOTED:
                            saved_disk += PC[b]
                        else:
                            saved_cpu += PC[b]
        return tot[0], tot[1], tot[2], tot[3], tot[4], tot[5], saved_cpu, saved_disk


cdef void _merge(ChunkTier t, uint8_t* flag, const int64_t* keys,
                 const int64_t* pos) noexcept nogil:
    """Fold what ``t``'s last store recorded (its scratch, in offer order) into a chain
    request's ``flag`` at the offer's positions ``pos`` (a reuse only of a chunk the request
    did not insert)."""
    cdef int64_t j, p = 0
    cdef uint8_t f
    for j in range(t.n_acc):
        while keys[pos[p]] != t.acc_keys[j]:
            p += 1
        f = t.acc_flags[j]
        flag[pos[p]] |= C_REC | (f & F_INSERTED)
        if f & F_REUSED and not flag[pos[p]] & F_INSERTED:
            flag[pos[p]] |= F_REUSED
        p += 1
    t.n_acc = 0


cdef void _finish_tier(ChunkTier t, const uint8_t* flag, const int64_t* keys,
                       int64_t n) noexcept nogil:
    """``t``'s on_request_finished over a chain request's recorded chunks, in prefix order."""
    cdef int64_t i
    t.n_acc = 0
    for i in range(n):
        if flag[i] & C_REC:
            t.acc_keys[t.n_acc] = keys[i]
            t.acc_flags[t.n_acc] = flag[i] & (F_INSERTED | F_REUSED)
            t.n_acc += 1
    t._finish()


cdef inline void _share(DList* d, const DList* arrays) noexcept nogil:
    """An empty list on ``arrays``' link arrays: two lists whose slots never overlap (T1 and T2,
    B1 and B2) share one pair of arrays (freed once, with ``arrays``)."""
    d.prev = arrays.prev
    d.next = arrays.next
    d.head = -1
    d.tail = -1
    d.n = 0


def _as_int64(a):
    import numpy as np
    return np.ascontiguousarray(a, dtype=np.int64)


def _as_double(a):
    import numpy as np
    return np.ascontiguousarray(a, dtype=np.float64)
