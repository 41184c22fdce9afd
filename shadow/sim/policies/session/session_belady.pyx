# cython: language_level=3
"""session_belady: evict the session whose next request is farthest (the PrefixSim fork's
SessionBelady), a session-granular oracle on the trace's ``session_next_req``.

A max-heap of (next request, session clock of the turn, record) pushed at each recorded request;
an entry whose record is no longer live or has been recorded since is dropped when it reaches the
top.  Ties (sessions that never return, INT64_MAX) go to the session recorded longest ago.  The heap
is rebuilt from the live sessions once it holds more than twice them plus 64 entries.
Memory: _base's + 24 B a heap entry (at most 2 per live session + 64).
"""

from libc.stdint cimport int64_t, int32_t
from libc.stdlib cimport malloc, realloc, free

from shadow.sim.policies.session._base cimport SessionBase, Sess
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="session-level Belady: evicts the session whose next request is farthest "
                "(oracle on session_next_req; PrefixSim fork sessionCache.cpp)",
    family="session",
    strict_pins=True,
    needs_future=True,
    weight=2.0,
)


cdef struct HEntry:
    int64_t nexta
    int64_t last
    int64_t s


cdef inline bint _before(const HEntry* a, const HEntry* b) noexcept nogil:
    """Whether ``a`` is evicted before ``b``: farther next request, then older turn."""
    return a.nexta > b.nexta or (a.nexta == b.nexta and a.last < b.last)


cdef class SessionBelady(SessionBase):
    cdef HEntry* heap
    cdef int64_t hn
    cdef int64_t hcap

    def __cinit__(self, *args, **kwargs):
        self.hcap = 64
        self.heap = <HEntry*>malloc(self.hcap * sizeof(HEntry))
        if self.heap == NULL:
            raise MemoryError()
        self.hn = 0

    def __dealloc__(self):
        free(self.heap)

    cdef void _up(self, int64_t i) noexcept nogil:
        cdef HEntry e = self.heap[i]
        cdef int64_t p
        while i > 0:
            p = (i - 1) >> 1
            if not _before(&e, &self.heap[p]):
                break
            self.heap[i] = self.heap[p]
            i = p
        self.heap[i] = e

    cdef void _down(self, int64_t i) noexcept nogil:
        cdef HEntry e = self.heap[i]
        cdef int64_t c
        while True:
            c = 2 * i + 1
            if c >= self.hn:
                break
            if c + 1 < self.hn and _before(&self.heap[c + 1], &self.heap[c]):
                c += 1
            if not _before(&self.heap[c], &e):
                break
            self.heap[i] = self.heap[c]
            i = c
        self.heap[i] = e

    cdef inline bint _valid(self, const HEntry* e) noexcept nogil:
        cdef Sess* S = &self.sess[e.s]
        return S.key != 0 and S.live and S.last == e.last

    cdef int32_t _select(self) noexcept nogil:
        while self.hn > 0:
            if self._valid(&self.heap[0]):
                return <int32_t>self.heap[0].s
            self.hn -= 1
            if self.hn > 0:
                self.heap[0] = self.heap[self.hn]
                self._down(0)
        return -1

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        cdef int64_t i, m
        cdef HEntry* nh
        if self.hn > 2 * self.n_live + 64:
            # NOTE: compaction keeps the valid entries only; the order is total, so the top
            # stays the same
            m = 0
            for i in range(self.hn):
                if self._valid(&self.heap[i]):
                    self.heap[m] = self.heap[i]
                    m += 1
            self.hn = m
            for i in range(m // 2 - 1, -1, -1):
                self._down(i)
        if self.hn == self.hcap:
            nh = <HEntry*>realloc(self.heap, 2 * self.hcap * sizeof(HEntry))
            if nh == NULL:
                self.nomem = 1
                return
            self.heap = nh
            self.hcap *= 2
        self.heap[self.hn].nexta = self.sess[s].nexta
        self.heap[self.hn].last = self.sess[s].last
        self.heap[self.hn].s = s
        self.hn += 1
        self._up(self.hn - 1)


def make(capacity: int, params: dict) -> SessionBelady:
    return SessionBelady(capacity)
