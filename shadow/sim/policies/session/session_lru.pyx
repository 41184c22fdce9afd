# cython: language_level=3
"""session_lru: evict the least recently recorded session (the PrefixSim fork's SessionLRU).

Sessions in one list, recorded order (``_base.pyx``'s clock ``now``: one tick per request):
a new session goes to the back, a recorded one moves to the back, the victim is the front.
Memory: _base's, the list links inside the session record.
"""

from libc.stdint cimport int32_t

from shadow.sim.policies.session._base cimport SessionBase, SList, sl_init, sl_push_tail, sl_unlink
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="session-level LRU: evicts the least recently served session's unshared blocks "
                "(PrefixSim fork sessionCache.cpp)",
    family="session",
    strict_pins=True,
    weight=2.0,
)


cdef class SessionLRU(SessionBase):
    cdef SList order

    def __cinit__(self, *args, **kwargs):
        sl_init(&self.order)

    cdef int32_t _select(self) noexcept nogil:
        return self.order.head

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        if not is_new:
            sl_unlink(self.sess, &self.order, s)
        sl_push_tail(self.sess, &self.order, s, 0)

    cdef void _on_removed(self, int32_t s) noexcept nogil:
        sl_unlink(self.sess, &self.order, s)


def make(capacity: int, params: dict) -> SessionLRU:
    return SessionLRU(capacity)
