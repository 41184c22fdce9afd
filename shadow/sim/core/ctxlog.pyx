# cython: language_level=3
"""``CtxLog``: LRU that records the request hooks it receives (tests of the loop, debugging).

What :meth:`records` returns is, per call, in call order, one tuple

    (hook, timestamp_s, category, session_id, session_next_req, n_blocks, vtime, n_resident,
     n_pinned)

with ``hook`` ``"set_request_ctx"`` (its :c:type:`ArrivalCtx`) or ``"on_request"`` (its
:c:type:`RequestCtx`: category, session and next request -1 there), and the policy's
``n_resident``/``n_pinned`` at the call: before the match no block of the request is pinned yet
and nothing has been evicted for it.  It is not registered (no ``SPEC``): a subclass of LRU, so the
loop serves it through the generic (virtual) path, as every policy that sets
``wants_request_ctx``.  At most ``max_records`` calls are kept (the rest are counted in
``n_dropped``), so recording never allocates in the loop.
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free

from shadow.sim.core.policy cimport ArrivalCtx, RequestCtx
from shadow.sim.policies.recency.lru cimport LRU


cdef struct CtxRecord:
    int hook                    # 0 set_request_ctx, 1 on_request
    double timestamp_s
    int64_t category
    int64_t session_id
    int64_t session_next_req
    int64_t n_blocks
    int64_t vtime
    int64_t n_resident
    int64_t n_pinned


_HOOKS = ("set_request_ctx", "on_request")


cdef class CtxLog(LRU):
    cdef CtxRecord* log
    cdef int64_t cap_log
    cdef int64_t n_log
    cdef readonly int64_t n_dropped

    def __cinit__(self, int64_t capacity, int64_t max_records=4096, bint wants_request_ctx=True,
                  *args, **kwargs):
        self.log = <CtxRecord*>malloc(max(max_records, 1) * sizeof(CtxRecord))
        if self.log == NULL:
            raise MemoryError()
        self.cap_log = max(max_records, 1)
        self.n_log = 0
        self.n_dropped = 0
        self.wants_request_ctx = wants_request_ctx

    def __dealloc__(self):
        free(self.log)

    cdef void _put(self, int hook, double timestamp_s, int64_t category, int64_t session_id,
                   int64_t session_next_req, int64_t n_blocks, int64_t vtime) noexcept nogil:
        cdef CtxRecord* r
        if self.n_log >= self.cap_log:
            self.n_dropped += 1
            return
        r = &self.log[self.n_log]
        self.n_log += 1
        r.hook = hook
        r.timestamp_s = timestamp_s
        r.category = category
        r.session_id = session_id
        r.session_next_req = session_next_req
        r.n_blocks = n_blocks
        r.vtime = vtime
        r.n_resident = self.n_resident
        r.n_pinned = self.n_pinned

    cdef void set_request_ctx(self, const ArrivalCtx* rctx) noexcept nogil:
        self._put(0, rctx.timestamp_s, rctx.category, rctx.session_id, rctx.session_next_req,
                  rctx.n_blocks, rctx.vtime)

    cdef void on_request(self, const RequestCtx* ctx) noexcept nogil:
        self._put(1, ctx.timestamp_s, -1, -1, -1, ctx.n_blocks, ctx.vtime)

    def records(self) -> list[tuple]:
        """The calls recorded so far, oldest first (see the module docstring)."""
        cdef int64_t i
        out = []
        for i in range(self.n_log):
            r = self.log[i]
            out.append((_HOOKS[r.hook], r.timestamp_s, r.category, r.session_id,
                        r.session_next_req, r.n_blocks, r.vtime, r.n_resident, r.n_pinned))
        return out

    def clear(self) -> None:
        """Forget the records (and the dropped count)."""
        self.n_log = 0
        self.n_dropped = 0
