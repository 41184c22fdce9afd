# cython: language_level=3
"""session_arc: ARC over sessions (the PrefixSim fork's SessionARC).

T1 (sessions recorded once since they came), T2 (again), ghosts B1 and B2 of dropped T1 and T2
sessions; the target ``p`` is in sessions and ``c = |T1| + |T2| + 1`` follows the live sessions.
A recorded live session moves to T2's back; a new one in B1 sets ``p = min(c, p + max(1, |B2| /
|B1|))`` and goes to T2, in B2 ``p = max(0, p - max(1, |B1| / |B2|))`` and goes to T2, else to T1
(``c``, ``|B1|``, ``|B2|`` counted before it moves).  The victim is T1's front if ``|T1| > p`` (or T2
is empty), else T2's front; a dropped session goes to the back of B1 (from T1) or B2, and the
ghosts are trimmed (B1's front first) to ``|B1| + |B2| <= c`` after every touch and drop.
Memory: _base's; a ghost is a session record without a path (about 88 B with its key).
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policies.session._base cimport (SessionBase, Sess, SList, sl_init, sl_push_tail,
                                               sl_unlink)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="session-level ARC: T1/T2 of sessions with ghosts B1/B2 "
                "(PrefixSim fork sessionCache.cpp)",
    family="session",
    strict_pins=True,
    weight=2.0,
)

cdef enum:
    T1 = 0
    T2 = 1
    B1 = 2
    B2 = 3


cdef class SessionARC(SessionBase):
    cdef SList t1, t2, b1, b2
    cdef readonly double p

    def __cinit__(self, *args, **kwargs):
        sl_init(&self.t1)
        sl_init(&self.t2)
        sl_init(&self.b1)
        sl_init(&self.b2)
        self.p = 0.0

    cdef SList* _list(self, int k) noexcept nogil:
        if k == T1:
            return &self.t1
        if k == T2:
            return &self.t2
        if k == B1:
            return &self.b1
        return &self.b2

    cdef void _trim(self) noexcept nogil:
        cdef int64_t c = self.t1.n + self.t2.n + 1
        cdef int32_t g
        while self.b1.n + self.b2.n > c:
            if self.b1.n > 0:
                g = self.b1.head
                sl_unlink(self.sess, &self.b1, g)
            else:
                g = self.b2.head
                sl_unlink(self.sess, &self.b2, g)
            self._forget(g)

    cdef int32_t _select(self) noexcept nogil:
        if self.t1.n == 0 and self.t2.n == 0:
            return -1
        if self.t1.n > 0 and (self.t2.n == 0 or <double>self.t1.n > self.p):
            return self.t1.head
        return self.t2.head

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        cdef int k = self.sess[s].lst
        cdef double n1 = <double>self.b1.n, n2 = <double>self.b2.n
        cdef double c = <double>(self.t1.n + self.t2.n + 1)
        if k == T1 or k == T2:
            sl_unlink(self.sess, self._list(k), s)
        elif k == B1:
            self.p = min(c, self.p + max(1.0, n2 / max(1.0, n1)))
            sl_unlink(self.sess, &self.b1, s)
        elif k == B2:
            self.p = max(0.0, self.p - max(1.0, n1 / max(1.0, n2)))
            sl_unlink(self.sess, &self.b2, s)
        else:
            sl_push_tail(self.sess, &self.t1, s, T1)
            self._trim()
            return
        sl_push_tail(self.sess, &self.t2, s, T2)
        self._trim()

    cdef void _on_removed(self, int32_t s) noexcept nogil:
        cdef int k = self.sess[s].lst
        if k == T1:
            sl_unlink(self.sess, &self.t1, s)
            sl_push_tail(self.sess, &self.b1, s, B1)
        elif k == T2:
            sl_unlink(self.sess, &self.t2, s)
            sl_push_tail(self.sess, &self.b2, s, B2)
        self._trim()


def make(capacity: int, params: dict) -> SessionARC:
    return SessionARC(capacity)
