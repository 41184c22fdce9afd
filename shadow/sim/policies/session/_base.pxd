# cython: language_level=3
"""Session-level eviction's shared machinery (``_base.pyx``), cimported by the five
``session_*`` policies: per-slot claim counts and insert costs, the orphan list, the session
records and their key map, the drop loop.  A subclass supplies ``_select`` (the victim session),
``_on_touch`` and ``_on_removed`` over session records, and may keep a dropped record as a ghost
by leaving it in one of its lists (``lst >= 0``); ``_forget`` frees a ghost record.
"""

from libc.stdint cimport int64_t, int32_t, int8_t, uint32_t, uint64_t

from shadow.sim.core.policy cimport Policy, Access, RequestCtx, ArrivalCtx
from shadow.sim.policies._shared.dlist cimport DList


cdef struct Sess:
    int64_t key          # session key (trace id + 1, or a synthetic key); 0: a free record
    int64_t* path        # the distinct ids of its latest request (NULL when not live)
    int64_t last         # session clock (``now``) of its latest request
    int64_t nexta        # its next request (1-based file order), INT64_MAX never
    int64_t cost_sum     # insert costs of its claimed resident blocks
    int32_t plen
    int32_t pcap
    int32_t freq         # requests recorded, at most 3 (session_s3fifo lowers it)
    int32_t prev         # selector list links (free list: ``next``)
    int32_t next
    int32_t pos          # selector's own index (session_random_compute's pool position)
    int8_t lst           # selector list the record is in, -1 none
    int8_t live          # 1 a live session, 0 a ghost record (key kept, no path)


cdef struct SList:
    int32_t head
    int32_t tail
    int64_t n


cdef inline void sl_init(SList* l) noexcept nogil:
    l.head = -1
    l.tail = -1
    l.n = 0


cdef inline void sl_push_tail(Sess* S, SList* l, int32_t s, int8_t tag) noexcept nogil:
    S[s].prev = l.tail
    S[s].next = -1
    if l.tail >= 0:
        S[l.tail].next = s
    else:
        l.head = s
    l.tail = s
    l.n += 1
    S[s].lst = tag


cdef inline void sl_unlink(Sess* S, SList* l, int32_t s) noexcept nogil:
    cdef int32_t p = S[s].prev, q = S[s].next
    if p >= 0:
        S[p].next = q
    else:
        l.head = q
    if q >= 0:
        S[q].prev = p
    else:
        l.tail = p
    l.n -= 1
    S[s].lst = -1


cdef class SessionBase(Policy):
    cdef int32_t* claims          # per slot: sessions whose latest path holds the block (0: orphan)
    cdef int32_t* bcost           # per slot: the block's insert cost (>= 1, clipped to int32)
    cdef DList orphans            # resident blocks no session claims, oldest first
    cdef Sess* sess
    cdef int64_t sess_cap
    cdef int32_t sess_free        # free records, linked through ``next``
    cdef readonly int64_t n_live  # live sessions
    cdef readonly int64_t n_records   # live + ghost records
    cdef int64_t* mkeys           # session key -> record (open addressing, 0 empty)
    cdef int32_t* mvals
    cdef uint64_t mmask
    cdef int64_t mcount
    cdef int64_t* tmp             # the arriving request's distinct ids
    cdef int64_t tmp_cap
    cdef int64_t* dkeys           # dedupe scratch (generation-stamped)
    cdef uint32_t* dgen
    cdef uint64_t dmask
    cdef uint32_t dcur
    cdef int64_t cur_key          # set_request_ctx's session key, 0 none yet
    cdef int64_t cur_next
    cdef int32_t pending_owner    # the session whose missing blocks the access phase inserts
    cdef int64_t n_pending
    cdef readonly int64_t now
    cdef readonly int64_t n_synthetic

    cdef int32_t _select(self) noexcept nogil
    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil
    cdef void _on_removed(self, int32_t s) noexcept nogil
    cdef void _forget(self, int32_t s) noexcept nogil
    cdef void _chain_free(self, int64_t start) noexcept nogil
    cdef int32_t _map_get(self, int64_t key) noexcept nogil
    cdef int _map_put(self, int64_t key, int32_t val) noexcept nogil
    cdef void _map_del(self, int64_t key) noexcept nogil
    cdef int32_t _new_record(self, int64_t key) noexcept nogil
    cdef int64_t _distinct(self, const int64_t* ids, int64_t n) noexcept nogil
    cdef int64_t _unclaimed(self, int64_t slot, int64_t* out, int64_t k, int64_t limit) noexcept nogil
    cdef int64_t _drop(self, int32_t s, int64_t* out, int64_t k, int64_t limit) noexcept nogil
