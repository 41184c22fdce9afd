"""Hot loops of the trace layer: lcp parse/pack, (parent, raw) interning, next-access annotation.

Everything works on flat numpy arrays through typed memoryviews and releases the GIL, so the
reader's decompression thread and the parser overlap.  Host byte order is assumed little-endian
(x86-64, aarch64), which is lcp's byte order: records and entries are copied with ``memcpy``.
"""

from libc.stdint cimport int64_t, uint64_t, uint32_t, uint16_t, uint8_t
from libc.string cimport memcpy, memset
from libc.stdlib cimport malloc, calloc, free

import numpy as np

cdef enum:
    RECORD_SIZE = 68         # a v1 file's record
    RECORD_SIZE_V2 = 80      # a v2 file's record, and every record in memory (RECORD_DTYPE)
    ENTRY_SIZE = 16
    N_BLOCKS_OFFSET = 52
    ARRIVAL_OFFSET = 68      # v2: arrival_time_us (i64)
    REPLICA_OFFSET = 76      # v2: replica_id (u32)

# RequestParser.parse status codes
cdef enum:
    S_NEED_INPUT = 0     # stopped at an incomplete request: feed more bytes
    S_BATCH_FULL = 1     # the next request does not fit the batch arrays
    S_TOO_BIG = 2        # the next request alone is larger than the batch arrays
    S_CORRUPT = 3        # the next request breaks a rule of the format: see RequestParser.fault
PARSE_NEED_INPUT = S_NEED_INPUT
PARSE_BATCH_FULL = S_BATCH_FULL
PARSE_TOO_BIG = S_TOO_BIG
PARSE_CORRUPT = S_CORRUPT

# RequestParser.fault: which rule a corrupt request breaks
cdef enum:
    F_NONE = 0
    F_N_BLOCKS = 1        # n_blocks above the header's max_blocks_per_request (or implausible)
    F_TYPE_ID = 2         # type_id beyond the header's type table
    F_USER_ID = 3         # user_id above the header's n_users
    F_START_TIME = 4      # start_time_us below -1
    F_COMPLETE_TIME = 5   # complete_time_us below -1
    F_TIME_RANGE = 6      # complete_time_us outside the header's first..last
    F_UNSORTED = 7        # complete_time_us before the previous request's, under SORTED
    F_SESSION_NEXT = 8    # session_next_req neither -1 nor a later request of the file
    F_BLOCK_ID = 9        # a block id of 0 or above the id limit
    F_NEXT_ACCESS = 10    # a next access neither -1 nor after its own entry, within the trace
    F_DELTA = 11          # a nonzero next-access delta without HAS_NEXT_ACCESS
    F_ARRIVAL_TIME = 12   # v2: arrival_time_us below -1
    F_REPLICA_ID = 13     # v2: replica_id beyond the header's replica table
    F_BLOCK_KEY = 14      # v2 BLOCK_KEYS: a block key of 0 or above 2**63 - 1
FAULT_N_BLOCKS = F_N_BLOCKS
FAULT_TYPE_ID = F_TYPE_ID
FAULT_USER_ID = F_USER_ID
FAULT_START_TIME = F_START_TIME
FAULT_COMPLETE_TIME = F_COMPLETE_TIME
FAULT_TIME_RANGE = F_TIME_RANGE
FAULT_UNSORTED = F_UNSORTED
FAULT_SESSION_NEXT = F_SESSION_NEXT
FAULT_BLOCK_ID = F_BLOCK_ID
FAULT_NEXT_ACCESS = F_NEXT_ACCESS
FAULT_DELTA = F_DELTA
FAULT_ARRIVAL_TIME = F_ARRIVAL_TIME
FAULT_REPLICA_ID = F_REPLICA_ID
FAULT_BLOCK_KEY = F_BLOCK_KEY

cdef int64_t I64_MAX = 0x7FFFFFFFFFFFFFFF


cdef class RequestParser:
    """Parse whole requests of an lcp stream into batch arrays, checking every rule of the format
    a damaged plain file can break (a ``.lcp.zst`` has zstd checksums; a ``.lcp`` only these).

    Records are ``record_size`` bytes in the file (68: v1, 80: v2) and 80 in ``rec_out`` (a v1
    record gets ``arrival_time_us`` -1 and ``replica_id`` 0).
    Per request: ``n_blocks <= max_blocks``; ``type_id <= n_types``; ``user_id <= max_user``;
    all times ``>= -1``; ``replica_id <= n_replicas`` (v2); with ``check_times`` a known complete time lies in ``t_first..t_last``;
    with ``sorted`` complete times never decrease (across calls: :attr:`last_time`); with
    ``has_session_next`` ``session_next_req`` is -1 or a later request, at most ``max_requests``.
    Per entry: the block id is in ``1..max_id`` (``max_id <= 0``: ``1..2**63 - 1``); with
    ``has_next`` the next access is -1 or after the entry's own vtime and at most ``max_vtime``;
    with ``block_keys`` (v2) the second field is the block's key, in ``1..2**63 - 1``, stored
    in ``keys`` (and the next access is -1); otherwise every delta is 0.

    Requests consumed so far leave their largest block id, user id and block count and their
    smallest and largest complete time in the ``*_seen`` attributes, for the checks against the
    header's counts at the end of the file.

    Invariant: a request is consumed (copied into the arrays, :attr:`last_time` and the
    ``*_seen`` figures advanced) only when it passes every check; a failing one stops the parse with ``PARSE_CORRUPT`` at its first
    byte and leaves :attr:`fault` (a ``FAULT_*`` code), :attr:`value` (the offending value),
    :attr:`entry` (its entry index in the request, -1 for a record field) and :attr:`previous`
    (for ``FAULT_UNSORTED``: the previous complete time).  NOTE: the per-entry checks are folded
    into one flag without a branch; only a request that fails is scanned again to say which
    entry and rule.
    """

    cdef bint has_next, has_session_next, sorted, check_times, block_keys
    cdef uint64_t id_limit
    cdef int64_t max_blocks, n_types, max_user, t_first, t_last, max_vtime, max_requests
    cdef Py_ssize_t record_size
    cdef uint32_t n_replicas
    cdef public int64_t last_time
    cdef public uint64_t max_id_seen
    cdef public uint32_t max_user_seen, max_blocks_seen
    cdef public int64_t min_time_seen, max_time_seen
    cdef public int fault
    cdef public object value
    cdef public Py_ssize_t entry
    cdef public int64_t previous

    def __init__(self, *, bint has_next, int64_t max_id, int64_t max_blocks,
                 int64_t n_types, int64_t max_user=0xFFFFFFFF, bint sorted=False,
                 bint check_times=False, int64_t t_first=0, int64_t t_last=0,
                 bint has_session_next=False, int64_t max_vtime=I64_MAX,
                 int64_t max_requests=I64_MAX, Py_ssize_t record_size=RECORD_SIZE,
                 uint32_t n_replicas=0, bint block_keys=False):
        if record_size != RECORD_SIZE and record_size != RECORD_SIZE_V2:
            raise ValueError(f"record size {record_size} (lcp records are 68 or 80 bytes)")
        if block_keys and (has_next or record_size != RECORD_SIZE_V2):
            raise ValueError("block keys need lcp v2 and no next accesses")
        self.record_size = record_size
        self.n_replicas = n_replicas
        self.block_keys = block_keys
        self.has_next = has_next
        self.id_limit = <uint64_t>max_id if max_id > 0 else <uint64_t>I64_MAX
        self.max_blocks = max_blocks
        self.n_types = n_types
        self.max_user = max_user
        self.sorted = sorted
        self.check_times = check_times
        self.t_first = t_first
        self.t_last = t_last
        self.has_session_next = has_session_next
        self.max_vtime = max_vtime
        self.max_requests = max_requests
        self.last_time = -1 << 62   # below every valid time (-1 included)
        self.max_id_seen = 0
        self.max_user_seen = 0
        self.max_blocks_seen = 0
        self.min_time_seen = I64_MAX
        self.max_time_seen = -1 << 62
        self.fault = F_NONE
        self.value = None
        self.entry = -1
        self.previous = 0

    def parse(self, const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end,
              uint8_t[::1] rec_out, int64_t[::1] offsets, int64_t[::1] ids, int64_t[::1] nxt,
              Py_ssize_t n_req, Py_ssize_t n_ent, int64_t req0, int64_t vtime0,
              int64_t[::1] keys=None):
        """Parse whole requests from ``buf[pos:end]`` into the batch arrays after their first
        ``n_req`` requests / ``n_ent`` entries.

        ``offsets[n_req]`` must already equal ``n_ent``; ``req0`` is the 0-based file index of
        the batch's request 0 and ``vtime0`` the vtime of ``ids[0]``.  Returns ``(n_req, n_ent,
        pos, status, detail)``: the new fill levels, the byte position after the last whole
        request parsed, a ``PARSE_*`` status, and for PARSE_TOO_BIG the request's block count.
        ``next_access`` values are the running sum of the deltas (absolute vtimes), or -1
        without ``has_next``; with ``block_keys``, ``keys`` (as long as ``ids``) gets each
        entry's key.
        """
        cdef Py_ssize_t cap_req = offsets.shape[0] - 1
        cdef Py_ssize_t cap_ent = ids.shape[0]
        cdef uint32_t nb = 0, user = 0
        cdef uint16_t tid = 0
        cdef Py_ssize_t j, k
        cdef int64_t t_start, t_done, snext, run, v
        cdef uint64_t ubid = 0, udelta = 0, urun
        cdef uint64_t hi_id = self.max_id_seen, req_hi
        cdef uint32_t hi_user = self.max_user_seen, hi_nb = self.max_blocks_seen
        cdef int64_t lo_t = self.min_time_seen, hi_t = self.max_time_seen
        cdef int status = S_NEED_INPUT
        cdef int fault = F_NONE
        cdef int bad
        cdef int64_t fval = 0
        cdef uint64_t ufval = 0
        cdef Py_ssize_t fentry = -1
        cdef uint64_t id_limit = self.id_limit
        cdef int64_t max_vtime = self.max_vtime
        cdef int64_t last = self.last_time
        cdef Py_ssize_t rsize = self.record_size
        cdef bint v2 = rsize == RECORD_SIZE_V2
        cdef bint with_keys = self.block_keys
        cdef int64_t t_arrival = -1
        cdef uint32_t replica = 0
        if with_keys and (keys is None or keys.shape[0] < ids.shape[0]):
            raise ValueError("a parser of block keys needs a keys array as long as the ids")
        with nogil:
            while True:
                if end - pos < rsize:
                    status = S_NEED_INPUT
                    break
                memcpy(&nb, &buf[pos + N_BLOCKS_OFFSET], 4)
                if nb > self.max_blocks:
                    fault = F_N_BLOCKS
                    ufval = nb
                    break
                if n_req >= cap_req or n_ent + nb > cap_ent:
                    status = S_TOO_BIG if n_req == 0 else S_BATCH_FULL
                    fval = nb
                    break
                if end - pos < rsize + <Py_ssize_t>nb * ENTRY_SIZE:
                    status = S_NEED_INPUT
                    break
                # -- the record's fields ----------------------------------------------------
                memcpy(&t_start, &buf[pos], 8)
                memcpy(&t_done, &buf[pos + 8], 8)
                memcpy(&snext, &buf[pos + 40], 8)
                memcpy(&user, &buf[pos + 48], 4)
                memcpy(&tid, &buf[pos + 66], 2)
                if v2:
                    memcpy(&t_arrival, &buf[pos + ARRIVAL_OFFSET], 8)
                    memcpy(&replica, &buf[pos + REPLICA_OFFSET], 4)
                if tid > self.n_types:
                    fault = F_TYPE_ID
                    ufval = tid
                elif user > self.max_user:
                    fault = F_USER_ID
                    ufval = user
                elif t_start < -1:
                    fault = F_START_TIME
                    fval = t_start
                elif t_done < -1:
                    fault = F_COMPLETE_TIME
                    fval = t_done
                elif v2 and t_arrival < -1:
                    fault = F_ARRIVAL_TIME
                    fval = t_arrival
                elif v2 and replica > self.n_replicas:
                    fault = F_REPLICA_ID
                    ufval = replica
                elif self.check_times and t_done != -1 and (t_done < self.t_first
                                                            or t_done > self.t_last):
                    fault = F_TIME_RANGE
                    fval = t_done
                elif self.sorted and t_done < last:
                    fault = F_UNSORTED
                    fval = t_done
                elif self.has_session_next and snext != -1 and (
                        snext <= req0 + n_req + 1 or snext > self.max_requests):
                    fault = F_SESSION_NEXT
                    fval = snext
                if fault != F_NONE:
                    break
                # -- the entries ------------------------------------------------------------
                k = pos + rsize
                urun = 0
                bad = 0
                req_hi = 0
                if self.has_next:
                    for j in range(n_ent, n_ent + nb):
                        memcpy(&ubid, &buf[k], 8)
                        memcpy(&udelta, &buf[k + 8], 8)
                        urun += udelta     # NOTE: unsigned: garbage wraps, it cannot overflow
                        run = <int64_t>urun
                        ids[j] = <int64_t>ubid
                        req_hi = ubid if ubid > req_hi else req_hi
                        nxt[j] = run
                        bad |= ((ubid - 1 >= id_limit) | (run > max_vtime)
                                | ((run <= vtime0 + j) & (run != -1)))
                        k += ENTRY_SIZE
                else:
                    # NOTE: the second field is a key (BLOCK_KEYS) or a delta that must be 0; the
                    # test is loop-invariant, so the compiler keeps two loops
                    for j in range(n_ent, n_ent + nb):
                        memcpy(&ubid, &buf[k], 8)
                        memcpy(&udelta, &buf[k + 8], 8)
                        ids[j] = <int64_t>ubid
                        req_hi = ubid if ubid > req_hi else req_hi
                        nxt[j] = -1
                        if with_keys:
                            keys[j] = <int64_t>udelta
                            bad |= (ubid - 1 >= id_limit) | (udelta - 1 >= <uint64_t>I64_MAX)
                        else:
                            bad |= (ubid - 1 >= id_limit) | (udelta != 0)
                        k += ENTRY_SIZE
                if bad:
                    # find the first entry at fault (a damaged request only)
                    for j in range(n_ent, n_ent + nb):
                        if <uint64_t>ids[j] - 1 >= id_limit:
                            fault = F_BLOCK_ID
                            ufval = <uint64_t>ids[j]
                        elif self.has_next:
                            v = vtime0 + j
                            if nxt[j] > max_vtime or (nxt[j] <= v and nxt[j] != -1):
                                fault = F_NEXT_ACCESS
                                fval = nxt[j]
                        elif with_keys:
                            if <uint64_t>keys[j] - 1 >= <uint64_t>I64_MAX:
                                fault = F_BLOCK_KEY
                                ufval = <uint64_t>keys[j]
                        else:
                            memcpy(&fval, &buf[pos + rsize + (j - n_ent) * ENTRY_SIZE + 8], 8)
                            if fval != 0:
                                fault = F_DELTA
                        if fault != F_NONE:
                            fentry = j - n_ent
                            break
                    break
                memcpy(&rec_out[n_req * RECORD_SIZE_V2], &buf[pos], rsize)
                if not v2:
                    memcpy(&rec_out[n_req * RECORD_SIZE_V2 + ARRIVAL_OFFSET], &t_arrival, 8)
                    memcpy(&rec_out[n_req * RECORD_SIZE_V2 + REPLICA_OFFSET], &replica, 4)
                last = t_done
                if req_hi > hi_id:
                    hi_id = req_hi
                if user > hi_user:
                    hi_user = user
                if nb > hi_nb:
                    hi_nb = nb
                if t_done < lo_t:
                    lo_t = t_done
                if t_done > hi_t:
                    hi_t = t_done
                n_ent += nb
                n_req += 1
                offsets[n_req] = n_ent
                pos = k
        self.last_time = last
        self.max_id_seen = hi_id
        self.max_user_seen = hi_user
        self.max_blocks_seen = hi_nb
        self.min_time_seen = lo_t
        self.max_time_seen = hi_t
        if fault != F_NONE:
            status = S_CORRUPT
            self.fault = fault
            self.entry = fentry
            self.previous = last
            if fault in (F_N_BLOCKS, F_TYPE_ID, F_USER_ID, F_BLOCK_ID, F_REPLICA_ID,
                         F_BLOCK_KEY):
                self.value = ufval
            else:
                self.value = fval
        return n_req, n_ent, pos, status, fval


def pack_requests(const uint8_t[::1] rec, const int64_t[::1] offsets, const int64_t[::1] ids,
                  const int64_t[::1] nxt, bint has_next, uint8_t[::1] out,
                  Py_ssize_t record_size=RECORD_SIZE, const int64_t[::1] keys=None):
    """Write requests as lcp bytes (record, then entries with running-difference next access,
    or with ``keys`` each entry's block key) into ``out`` (``record_size * n + 16 * m``
    bytes).  ``rec`` holds 80-byte in-memory records; a v1 file (``record_size`` 68) takes the
    first 68 bytes of each.  Returns the number of bytes written."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t i, j, pos = 0
    cdef int64_t prev, d, bid
    cdef uint32_t nb
    cdef bint with_keys = keys is not None
    if record_size != RECORD_SIZE and record_size != RECORD_SIZE_V2:
        raise ValueError(f"record size {record_size} (lcp records are 68 or 80 bytes)")
    with nogil:
        for i in range(n):
            memcpy(&out[pos], &rec[i * RECORD_SIZE_V2], record_size)
            nb = <uint32_t>(offsets[i + 1] - offsets[i])
            memcpy(&out[pos + N_BLOCKS_OFFSET], &nb, 4)
            pos += record_size
            prev = 0
            for j in range(offsets[i], offsets[i + 1]):
                bid = ids[j]
                memcpy(&out[pos], &bid, 8)
                if has_next:
                    d = nxt[j] - prev
                    prev = nxt[j]
                elif with_keys:
                    d = keys[j]
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


cdef struct Slot:
    uint64_t raw
    uint32_t parent
    uint32_t id          # 0: empty

cdef extern from *:
    void __builtin_prefetch(const void *p) nogil

cdef extern from *:
    """
    #include <sys/mman.h>
    #ifndef MADV_HUGEPAGE  /* not Linux: plain pages (0 is MADV_NORMAL) */
    #define MADV_HUGEPAGE 0
    #endif
    """

cdef extern from "sys/mman.h" nogil:
    void *mmap(void *addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void *addr, size_t length)
    int madvise(void *addr, size_t length, int advice)
    int PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MADV_HUGEPAGE
    void *MAP_FAILED

cdef enum:
    HUGE = 1 << 21


cdef inline uint64_t _max_entries(uint64_t size) noexcept nogil:
    # ids a table of `size` slots holds before it grows (load 5/8), plus id 0 and the one
    # insert that triggers the growth
    return size * 5 // 8 + 2


cdef void *_zalloc_huge(size_t size) noexcept nogil:
    """Zeroed memory for a large randomly accessed array, backed by transparent huge pages where
    the kernel allows (madvise mode).  NOTE: with 4 KiB pages every lookup in a table of a few
    hundred MiB is a TLB miss whose page walk itself misses the cache, which costs more than
    the lookup's own cache miss and cannot be prefetched.  Free with :func:`_free_huge`."""
    cdef size_t n = (size + HUGE - 1) & ~(<size_t>HUGE - 1)
    cdef void *p
    if n == 0:
        n = HUGE
    p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    if p == MAP_FAILED:
        return NULL
    madvise(p, n, MADV_HUGEPAGE)  # NOTE: advice only; failing it just means small pages
    return p


cdef inline size_t _huge_len(size_t size) noexcept nogil:
    # bytes mapped by _zalloc_huge(size)
    return ((size + HUGE - 1) & ~(<size_t>HUGE - 1)) or HUGE


cdef void _free_huge(void *p, size_t size) noexcept nogil:
    if p != NULL:
        munmap(p, _huge_len(size))

# NOTE: ids and parents are stored in 32 bits (16-byte slots); 2**32 - 1 unique blocks would
# need a 100+ GiB table, far beyond the converter's memory budget on any machine we target.
cdef enum:
    PREFETCH_AHEAD = 12
cdef int64_t MAX_IDS = 0xFFFFFFFF
MAX_INTERN_IDS = MAX_IDS


cdef class InternTable:
    """Exact interning of (parent id, raw id) pairs to dense ids 1, 2, 3, ... in first-seen order.

    Open addressing with linear probing over 16-byte slots that hold the key itself (raw id,
    parent id) and its dense id, so a lookup reads one slot (one cache line).  A slot's home is
    the *path hash* of the block, ``h = mix(h(parent's path), raw)`` (``mix(0, raw)`` for a root
    block and in raw mode): it is a function of the raw ids alone, so :meth:`intern_requests`
    hashes a whole chunk first and prefetches the slots ``PREFETCH_AHEAD`` lookups ahead, although
    each lookup needs the previous one's result (the parent id) for its key.  Equal paths have
    equal (parent id, raw id) keys and equal hashes, so the exact key compare is all it takes.

    Invariant: an entry with key (p, r) and path hash h sits on the probe chain from ``h & mask``
    with no empty slot between, and ``hashes[id] == h``; load stays at most 5/8.  Memory per
    unique pair: 26-51 bytes of table plus 8 of path hash (``hashes``, kept for rehashing); while
    the table doubles, the old one is unmapped as the rehash passes it, so the peak is about the
    new table's 51 bytes plus the path hashes.
    """

    cdef Slot *slots
    cdef uint64_t mask
    cdef uint64_t *hashes           # path hash of each id (for rehashing)
    cdef int64_t *first_parent      # raw mode: the first parent each id was seen under
    cdef uint8_t *multi             # raw mode: seen under more than one parent
    cdef public int64_t n            # ids handed out so far
    cdef int64_t cap_keys
    cdef public int64_t n_multi_parent
    cdef bint track_parents

    def __cinit__(self, int64_t expected=1024, bint track_parents=False):
        cdef uint64_t size = 1024
        while size * 5 < <uint64_t>(8 * expected):
            size <<= 1
        self.slots = <Slot *>_zalloc_huge(size * sizeof(Slot))
        self.mask = size - 1
        self.hashes = <uint64_t *>malloc(8 * _max_entries(size))
        self.track_parents = track_parents
        self.first_parent = NULL
        self.multi = NULL
        self.cap_keys = 0
        if track_parents:
            self.cap_keys = max(expected, 1024)
            self.first_parent = <int64_t *>malloc(8 * (self.cap_keys + 1))
            self.multi = <uint8_t *>calloc(self.cap_keys + 1, 1)
        if self.slots == NULL or self.hashes == NULL or (
                track_parents and (self.first_parent == NULL or self.multi == NULL)):
            raise MemoryError()
        self.n = 0
        self.n_multi_parent = 0

    def __dealloc__(self):
        _free_huge(self.slots, (self.mask + 1) * sizeof(Slot))
        free(self.hashes)
        free(self.first_parent)
        free(self.multi)

    cdef int _grow_keys(self) noexcept nogil:
        cdef int64_t cap = self.cap_keys * 2
        cdef void *p
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
        # NOTE: old slots are read in order and each entry's path hash (hashes[id], prefetched)
        # sends it to its home in the new table, which is near the old home: the writes go out
        # as two almost sequential streams instead of one cache miss each.
        cdef uint64_t size = (self.mask + 1) * 2
        cdef uint64_t m = size - 1
        cdef uint64_t old_size = self.mask + 1
        cdef Slot *t = <Slot *>_zalloc_huge(size * sizeof(Slot))
        cdef Slot *old = self.slots
        cdef uint64_t s, p
        cdef uint32_t i
        cdef void *q
        cdef uint64_t per_huge = HUGE // sizeof(Slot)
        cdef size_t mapped = _huge_len(old_size * sizeof(Slot))
        cdef size_t freed = 0
        if t == NULL:
            return -1
        for s in range(old_size):
            if s + PREFETCH_AHEAD < old_size:
                __builtin_prefetch(&self.hashes[old[s + PREFETCH_AHEAD].id])
            i = old[s].id
            if i:
                p = self.hashes[i] & m
                while t[p].id != 0:
                    p = (p + 1) & m
                t[p] = old[s]
            if (s + 1) % per_huge == 0:
                # NOTE: old slots are never read again once passed: unmap them as we go, so the
                # peak is about the new table alone rather than old and new side by side (the
                # new table's pages are touched as progressively, near s and s + old_size).
                munmap(<char *>old + freed, HUGE)
                freed += HUGE
        if mapped > freed:
            munmap(<char *>old + freed, mapped - freed)
        self.slots = t
        self.mask = m
        q = _realloc(self.hashes, 8 * _max_entries(size))
        if q == NULL:
            return -1
        self.hashes = <uint64_t *>q
        return 0

    cdef int64_t _intern(self, uint64_t h, uint32_t parent, uint64_t raw) noexcept nogil:
        # the id of (parent, raw) whose path hash is h, inserted if new; -1: out of memory,
        # -2: more than MAX_IDS ids
        cdef uint64_t s = h & self.mask
        cdef Slot *sl
        while True:
            sl = &self.slots[s]
            if sl.id == 0:
                break
            if sl.raw == raw and sl.parent == parent:
                return sl.id
            s = (s + 1) & self.mask
        if self.n >= MAX_IDS:
            return -2
        if self.track_parents and self.n + 1 > self.cap_keys:
            if self._grow_keys() < 0:
                return -1
        self.n += 1
        sl.raw = raw
        sl.parent = parent
        sl.id = <uint32_t>self.n
        self.hashes[self.n] = h
        if self.track_parents:
            self.first_parent[self.n] = -1
        if <uint64_t>(8 * self.n) > 5 * (self.mask + 1):
            if self._grow_table() < 0:
                return -1
        return self.n

    def intern_requests(self, const uint64_t[::1] raw, const int64_t[::1] offsets,
                        int64_t[::1] out, bint prefix=True):
        """Replace each request's raw ids by dense ids, written to ``out`` (which must not share
        memory with ``raw``: it holds the path hashes in between).

        prefix=True interns (parent id, raw id) with parent 0 for a request's root block.
        prefix=False interns raw ids alone and counts ids seen under more than one parent.
        """
        cdef Py_ssize_t n = offsets.shape[0] - 1
        cdef Py_ssize_t m = raw.shape[0]
        cdef Py_ssize_t i, j, lo, hi
        cdef int64_t parent, v
        cdef uint64_t hv
        cdef int err = 0
        if out.shape[0] < m or (m and offsets[n] > m):
            raise ValueError("out / offsets do not fit raw")
        with nogil:
            # 1. path hashes (no table access)
            for i in range(n):
                hv = 0
                for j in range(offsets[i], offsets[i + 1]):
                    hv = _mix(hv if prefix else 0, raw[j])
                    out[j] = <int64_t>hv
            # 2. lookups in order, each slot prefetched PREFETCH_AHEAD lookups before
            for j in range(min(<Py_ssize_t>PREFETCH_AHEAD, m)):
                __builtin_prefetch(&self.slots[<uint64_t>out[j] & self.mask])
            for i in range(n):
                parent = 0
                lo = offsets[i]
                hi = offsets[i + 1]
                for j in range(lo, hi):
                    if j + PREFETCH_AHEAD < m:
                        __builtin_prefetch(
                            &self.slots[<uint64_t>out[j + PREFETCH_AHEAD] & self.mask])
                    if prefix:
                        v = self._intern(<uint64_t>out[j], <uint32_t>parent, raw[j])
                    else:
                        v = self._intern(<uint64_t>out[j], 0, raw[j])
                        if v > 0 and self.track_parents:
                            if self.first_parent[v] < 0:
                                self.first_parent[v] = parent
                            elif self.first_parent[v] != parent and not self.multi[v]:
                                self.multi[v] = 1
                                self.n_multi_parent += 1
                    if v < 0:
                        err = <int>v
                        break
                    out[j] = v
                    parent = v
                if err:
                    break
        if err == -2:
            raise OverflowError(f"more than {MAX_INTERN_IDS} unique blocks")
        if err:
            raise MemoryError()

    def release(self):
        """Free the table early (the converter needs the memory for the next phase)."""
        _free_huge(self.slots, (self.mask + 1) * sizeof(Slot))
        free(self.hashes)
        free(self.first_parent)
        free(self.multi)
        self.slots = NULL
        self.hashes = NULL
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
    cdef int64_t *last = <int64_t *>_zalloc_huge(8 * (max_id + 1))
    if last == NULL:
        raise MemoryError()
    with nogil:
        memset(last, 0xFF, 8 * (max_id + 1))
        for j in range(m - 1, -1, -1):
            b = ids[j]
            nxt[j] = last[b]
            last[b] = j + 1
    _free_huge(last, 8 * (max_id + 1))


def renumber_first_appearance(int64_t[::1] ids, int64_t max_id):
    """Renumber ids in place so they are dense from 1 in first-appearance order.

    Returns ``(n_unique, changed)``.  Ids must be in ``1..max_id``.
    """
    cdef Py_ssize_t m = ids.shape[0]
    cdef Py_ssize_t j
    cdef int64_t b, n = 0
    cdef bint changed = False
    cdef int64_t *remap = <int64_t *>_zalloc_huge(8 * (max_id + 1))
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
    _free_huge(remap, 8 * (max_id + 1))
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
