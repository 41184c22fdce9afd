"""Hot loops of the trace layer: lcp parse/pack, (parent, raw) interning, next-access annotation.

Everything works on flat numpy arrays through typed memoryviews and releases the GIL, so the
reader's decompression thread and the parser overlap.  Host byte order is assumed little-endian
(x86-64, aarch64), which is lcp's byte order: records and entries are copied with ``memcpy``.
"""

from libc.stdint cimport int64_t, uint64_t, uint32_t, uint8_t
from libc.string cimport memcpy, memset
from libc.stdlib cimport malloc, calloc, free

import numpy as np

cdef enum:
    RECORD_SIZE = 68
    ENTRY_SIZE = 16
    N_BLOCKS_OFFSET = 52

# parse_requests status codes
cdef enum:
    S_NEED_INPUT = 0     # stopped at an incomplete request: feed more bytes
    S_BATCH_FULL = 1     # the next request does not fit the batch arrays
    S_TOO_BIG = 2        # the next request alone is larger than the batch arrays
    S_BAD_ID = 3         # a block id of 0 (or above max_id), or an implausible n_blocks
PARSE_NEED_INPUT = S_NEED_INPUT
PARSE_BATCH_FULL = S_BATCH_FULL
PARSE_TOO_BIG = S_TOO_BIG
PARSE_BAD_ID = S_BAD_ID


def parse_requests(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
                   uint8_t[::1] rec_out, int64_t[::1] offsets, int64_t[::1] ids,
                   int64_t[::1] nxt, Py_ssize_t n_req, Py_ssize_t n_ent,
                   bint has_next, int64_t max_id, Py_ssize_t max_req_blocks):
    """Parse whole requests from ``buf[pos:end]`` into the batch arrays after their first
    ``n_req`` requests / ``n_ent`` entries.

    ``offsets[n_req]`` must already equal ``n_ent``.  Returns ``(n_req, n_ent, pos, status,
    detail)``: the new fill levels, the byte position after the last whole request parsed, a
    ``PARSE_*`` status, and for PARSE_TOO_BIG / PARSE_BAD_ID the request's block count / the bad
    id.  ``next_access`` values are the running sum of the deltas (absolute vtimes), or -1 when
    ``has_next`` is false.  ``max_id > 0`` bounds valid ids; ``max_req_blocks > 0`` bounds a
    request's block count (a larger one is reported as PARSE_BAD_ID with detail -n_blocks).
    """
    cdef Py_ssize_t cap_req = offsets.shape[0] - 1
    cdef Py_ssize_t cap_ent = ids.shape[0]
    cdef uint32_t nb = 0
    cdef Py_ssize_t j, k
    cdef int64_t run, delta, bid = 0
    cdef uint64_t ubid
    cdef int status = S_NEED_INPUT
    cdef int64_t detail = 0
    with nogil:
        while True:
            if end - pos < RECORD_SIZE:
                status = S_NEED_INPUT
                break
            memcpy(&nb, &buf[pos + N_BLOCKS_OFFSET], 4)
            if max_req_blocks > 0 and nb > max_req_blocks:
                status = S_BAD_ID
                detail = -<int64_t>nb
                break
            if n_req >= cap_req or n_ent + nb > cap_ent:
                status = S_TOO_BIG if n_req == 0 else S_BATCH_FULL
                detail = nb
                break
            if end - pos < RECORD_SIZE + <Py_ssize_t>nb * ENTRY_SIZE:
                status = S_NEED_INPUT
                break
            memcpy(&rec_out[n_req * RECORD_SIZE], &buf[pos], RECORD_SIZE)
            k = pos + RECORD_SIZE
            run = 0
            for j in range(n_ent, n_ent + nb):
                memcpy(&ubid, &buf[k], 8)
                bid = <int64_t>ubid
                if bid <= 0 or (max_id > 0 and bid > max_id):
                    status = S_BAD_ID
                    break
                ids[j] = bid
                if has_next:
                    memcpy(&delta, &buf[k + 8], 8)
                    run += delta
                    nxt[j] = run
                else:
                    nxt[j] = -1
                k += ENTRY_SIZE
            if status == S_BAD_ID:
                detail = bid
                break
            n_ent += nb
            n_req += 1
            offsets[n_req] = n_ent
            pos = k
    return n_req, n_ent, pos, status, detail


def pack_requests(const uint8_t[::1] rec, const int64_t[::1] offsets, const int64_t[::1] ids,
                  const int64_t[::1] nxt, bint has_next, uint8_t[::1] out):
    """Write requests as lcp bytes (record, then entries with running-difference next access)
    into ``out`` (``68 * n + 16 * m`` bytes).  Returns the number of bytes written."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t i, j, pos = 0
    cdef int64_t prev, d, bid
    cdef uint32_t nb
    with nogil:
        for i in range(n):
            memcpy(&out[pos], &rec[i * RECORD_SIZE], RECORD_SIZE)
            nb = <uint32_t>(offsets[i + 1] - offsets[i])
            memcpy(&out[pos + N_BLOCKS_OFFSET], &nb, 4)
            pos += RECORD_SIZE
            prev = 0
            for j in range(offsets[i], offsets[i + 1]):
                bid = ids[j]
                memcpy(&out[pos], &bid, 8)
                if has_next:
                    d = nxt[j] - prev
                    prev = nxt[j]
                else:
                    d = 0
                memcpy(&out[pos + 8], &d, 8)
                pos += ENTRY_SIZE
    return pos


cdef inline uint64_t _mix(uint64_t a, uint64_t b) noexcept nogil:
    # NOTE: splitmix64 finalizer over both words; sequential raw ids (Mooncake) and chained
    # parents must spread over the table, which a plain xor/multiply does not guarantee.
    cdef uint64_t z = a * <uint64_t>0x9E3779B97F4A7C15 + b
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef class InternTable:
    """Exact interning of (parent id, raw id) pairs to dense ids 1, 2, 3, ... in first-seen order.

    Open addressing with linear probing.  The table holds only ids (8 bytes per slot, load at most
    1/2); the keys live in two arrays indexed by id (16 bytes per id), so the table costs 32-48
    bytes per unique pair (64 while it doubles).  Invariant: ``slots[s] == 0`` or
    ``(parent[slots[s]], raw[slots[s]])`` hashes to a probe chain that reaches ``s``.
    """

    cdef int64_t *slots
    cdef uint64_t mask
    cdef int64_t *kparent
    cdef uint64_t *kraw
    cdef int64_t *first_parent      # raw mode: the first parent each id was seen under
    cdef uint8_t *multi             # raw mode: seen under more than one parent
    cdef public int64_t n            # ids handed out so far
    cdef int64_t cap_keys
    cdef public int64_t n_multi_parent
    cdef bint track_parents

    def __cinit__(self, int64_t expected=1024, bint track_parents=False):
        cdef uint64_t size = 1024
        while size < <uint64_t>(2 * expected):
            size <<= 1
        self.slots = <int64_t *>calloc(size, 8)
        self.mask = size - 1
        self.cap_keys = max(expected, 1024)
        self.kparent = <int64_t *>malloc(8 * (self.cap_keys + 1))
        self.kraw = <uint64_t *>malloc(8 * (self.cap_keys + 1))
        self.track_parents = track_parents
        self.first_parent = NULL
        self.multi = NULL
        if track_parents:
            self.first_parent = <int64_t *>malloc(8 * (self.cap_keys + 1))
            self.multi = <uint8_t *>calloc(self.cap_keys + 1, 1)
        if self.slots == NULL or self.kparent == NULL or self.kraw == NULL or (
                track_parents and (self.first_parent == NULL or self.multi == NULL)):
            raise MemoryError()
        self.n = 0
        self.n_multi_parent = 0

    def __dealloc__(self):
        free(self.slots)
        free(self.kparent)
        free(self.kraw)
        free(self.first_parent)
        free(self.multi)

    cdef int _grow_keys(self) noexcept nogil:
        cdef int64_t cap = self.cap_keys * 2
        cdef void *p
        p = _realloc(self.kparent, 8 * (cap + 1))
        if p == NULL:
            return -1
        self.kparent = <int64_t *>p
        p = _realloc(self.kraw, 8 * (cap + 1))
        if p == NULL:
            return -1
        self.kraw = <uint64_t *>p
        if self.track_parents:
            p = _realloc(self.first_parent, 8 * (cap + 1))
            if p == NULL:
                return -1
            self.first_parent = <int64_t *>p
            p = _realloc(self.multi, cap + 1)
            if p == NULL:
                return -1
            self.multi = <uint8_t *>p
            memset(&self.multi[self.cap_keys + 1], 0, cap - self.cap_keys)
        self.cap_keys = cap
        return 0

    cdef int _grow_table(self) noexcept nogil:
        cdef uint64_t size = (self.mask + 1) * 2
        cdef uint64_t m = size - 1
        cdef int64_t *t = <int64_t *>calloc(size, 8)
        cdef int64_t i
        cdef uint64_t s
        if t == NULL:
            return -1
        for i in range(1, self.n + 1):
            s = _mix(<uint64_t>self.kparent[i], self.kraw[i]) & m
            while t[s] != 0:
                s = (s + 1) & m
            t[s] = i
        free(self.slots)
        self.slots = t
        self.mask = m
        return 0

    cdef int64_t _intern(self, int64_t parent, uint64_t raw) noexcept nogil:
        cdef uint64_t s = _mix(<uint64_t>parent, raw) & self.mask
        cdef int64_t v
        while True:
            v = self.slots[s]
            if v == 0:
                break
            if self.kraw[v] == raw and self.kparent[v] == parent:
                return v
            s = (s + 1) & self.mask
        if self.n + 1 > self.cap_keys:
            if self._grow_keys() < 0:
                return -1
        self.n += 1
        v = self.n
        self.kparent[v] = parent
        self.kraw[v] = raw
        if self.track_parents:
            self.first_parent[v] = -1
        self.slots[s] = v
        if <uint64_t>(2 * self.n) > self.mask:
            if self._grow_table() < 0:
                return -1
        return v

    def intern_requests(self, const uint64_t[::1] raw, const int64_t[::1] offsets,
                        int64_t[::1] out, bint prefix=True):
        """Replace each request's raw ids by dense ids; ``out`` may share memory with ``raw``.

        prefix=True interns (parent id, raw id) with parent 0 for a request's root block.
        prefix=False interns raw ids alone and counts ids seen under more than one parent.
        """
        cdef Py_ssize_t n = offsets.shape[0] - 1
        cdef Py_ssize_t i, j
        cdef int64_t parent, v
        cdef uint64_t r
        with nogil:
            for i in range(n):
                parent = 0
                for j in range(offsets[i], offsets[i + 1]):
                    r = raw[j]
                    if prefix:
                        v = self._intern(parent, r)
                    else:
                        v = self._intern(0, r)
                        if v > 0 and self.track_parents:
                            if self.first_parent[v] < 0:
                                self.first_parent[v] = parent
                            elif self.first_parent[v] != parent and not self.multi[v]:
                                self.multi[v] = 1
                                self.n_multi_parent += 1
                    if v < 0:
                        with gil:
                            raise MemoryError()
                    out[j] = v
                    parent = v

    def release(self):
        """Free the table and keys early (the converter needs the memory for the next phase)."""
        free(self.slots)
        free(self.kparent)
        free(self.kraw)
        free(self.first_parent)
        free(self.multi)
        self.slots = NULL
        self.kparent = NULL
        self.kraw = NULL
        self.first_parent = NULL
        self.multi = NULL


cdef extern from "stdlib.h" nogil:
    void *_realloc "realloc"(void *p, size_t size)


def annotate_next_access(const int64_t[::1] ids, int64_t[::1] nxt, int64_t max_id):
    """One backward pass: ``nxt[j]`` = 1-based position of the next access to ``ids[j]``, -1 never.

    Uses one int64 per id (``max_id + 1`` of them).  ``nxt`` must not share memory with ``ids``.
    """
    cdef Py_ssize_t m = ids.shape[0]
    cdef Py_ssize_t j
    cdef int64_t b
    cdef int64_t *last = <int64_t *>malloc(8 * (max_id + 1))
    if last == NULL:
        raise MemoryError()
    with nogil:
        memset(last, 0xFF, 8 * (max_id + 1))
        for j in range(m - 1, -1, -1):
            b = ids[j]
            nxt[j] = last[b]
            last[b] = j + 1
    free(last)


def renumber_first_appearance(int64_t[::1] ids, int64_t max_id):
    """Renumber ids in place so they are dense from 1 in first-appearance order.

    Returns ``(n_unique, changed)``.  Ids must be in ``1..max_id``.
    """
    cdef Py_ssize_t m = ids.shape[0]
    cdef Py_ssize_t j
    cdef int64_t b, n = 0
    cdef bint changed = False
    cdef int64_t *remap = <int64_t *>calloc(max_id + 1, 8)
    if remap == NULL:
        raise MemoryError()
    with nogil:
        for j in range(m):
            b = ids[j]
            if remap[b] == 0:
                n += 1
                remap[b] = n
            if remap[b] != b:
                changed = True
            ids[j] = remap[b]
    free(remap)
    return n, changed


cdef enum:
    EXACT = 128
    SUB_BITS = 6

def reuse_histogram(const int64_t[::1] nxt, int64_t first_vtime, int64_t[::1] hist):
    """Add the forward reuse distances ``nxt[j] - vtime(j)`` (entries with a next access) to a
    log-linear histogram: exact below 128, then 64 buckets per power of two (error < 1.6%).
    ``hist`` needs :func:`hist_size` buckets.  Returns the sum of the distances added."""
    cdef Py_ssize_t m = nxt.shape[0]
    cdef Py_ssize_t j
    cdef int64_t d, total = 0
    cdef int e
    with nogil:
        for j in range(m):
            if nxt[j] <= 0:
                continue
            d = nxt[j] - (first_vtime + j)
            total += d
            hist[_bucket(d)] += 1
    return total


cdef inline Py_ssize_t _bucket(int64_t d) noexcept nogil:
    cdef int e
    if d < EXACT:
        return d if d > 0 else 0
    e = 63 - __builtin_clzll(<unsigned long long>d)
    return EXACT + (e - 7) * (1 << SUB_BITS) + ((d >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1))


def hist_size():
    return EXACT + (64 - 7) * (1 << SUB_BITS)


def bucket_value(Py_ssize_t b):
    """Midpoint of a histogram bucket (the exact value below 128)."""
    cdef int e
    cdef int64_t lo, width
    if b < EXACT:
        return b
    e = 7 + (b - EXACT) // (1 << SUB_BITS)
    lo = (<int64_t>1 << e) + ((b - EXACT) % (1 << SUB_BITS)) * ((<int64_t>1 << e) >> SUB_BITS)
    width = (<int64_t>1 << e) >> SUB_BITS
    return lo + (width - 1) // 2


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


def gather_requests(const int64_t[::1] ids, const int64_t[::1] offsets, const int64_t[::1] order,
                    int64_t[::1] out_ids, int64_t[::1] out_offsets):
    """Reorder whole requests: request ``i`` of the output is request ``order[i]`` of the input."""
    cdef Py_ssize_t n = order.shape[0]
    cdef Py_ssize_t i, j, k = 0
    cdef int64_t r
    with nogil:
        out_offsets[0] = 0
        for i in range(n):
            r = order[i]
            for j in range(offsets[r], offsets[r + 1]):
                out_ids[k] = ids[j]
                k += 1
            out_offsets[i + 1] = k
