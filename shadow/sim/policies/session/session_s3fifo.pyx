# cython: language_level=3
"""session_s3fifo: S3-FIFO over sessions (the PrefixSim fork's SessionS3FIFO).

A small FIFO of new sessions, a main FIFO and a ghost FIFO of dropped small sessions, all counted
in sessions.  A new session enters main if it is in the ghost, else small; a recorded session
only raises its ``freq`` (at most 3, _base).  The victim search: small while it is not
empty and holds more than ``small-size-ratio`` of the live sessions (or main is empty), its head
promoted to main's tail when ``freq > move-to-main-threshold``, else the victim; otherwise main's
head, reinserted at the tail with ``freq - 1`` while ``freq > 0``, else the victim; at most
``2 * sessions + 9`` steps, then small's head, then main's.  A session dropped from small enters
the ghost, which keeps at most ``ghost-sessions`` (0: the live sessions + 1, counted at the push).
Memory: _base's; a ghost is a session record without a path (about 88 B with its key).
"""

from libc.stdint cimport int64_t, int32_t

from shadow.sim.policies.session._base cimport (SessionBase, Sess, SList, sl_init, sl_push_tail,
                                               sl_unlink)
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="session-level S3-FIFO: small/main FIFOs and a ghost of sessions "
                "(PrefixSim fork sessionCache.cpp)",
    family="session",
    defaults="small-size-ratio=0.1,move-to-main-threshold=1,ghost-sessions=0",
    strict_pins=True,
    weight=2.0,
)

cdef enum:
    Q_SMALL = 0
    Q_MAIN = 1
    Q_GHOST = 2


cdef class SessionS3FIFO(SessionBase):
    cdef SList small, main, ghost
    cdef double ratio
    cdef int32_t threshold
    cdef int64_t ghost_cap

    def __cinit__(self, int64_t capacity, double ratio=0.1, int32_t threshold=1,
                  int64_t ghost_cap=0):
        self.ratio = ratio
        self.threshold = threshold
        self.ghost_cap = ghost_cap
        sl_init(&self.small)
        sl_init(&self.main)
        sl_init(&self.ghost)

    cdef int32_t _select(self) noexcept nogil:
        cdef int64_t guard, limit = 2 * (self.small.n + self.main.n) + 9
        cdef int32_t s
        for guard in range(limit):
            if self.small.n > 0 and (self.main.n == 0 or <double>self.small.n >
                                     self.ratio * <double>(self.small.n + self.main.n)):
                s = self.small.head
                if self.sess[s].freq > self.threshold:
                    sl_unlink(self.sess, &self.small, s)
                    sl_push_tail(self.sess, &self.main, s, Q_MAIN)
                    continue
                return s
            if self.main.n == 0:
                return -1
            s = self.main.head
            if self.sess[s].freq > 0:
                self.sess[s].freq -= 1
                sl_unlink(self.sess, &self.main, s)
                sl_push_tail(self.sess, &self.main, s, Q_MAIN)
                continue
            return s
        if self.small.n > 0:
            return self.small.head
        return self.main.head

    cdef void _on_touch(self, int32_t s, bint is_new) noexcept nogil:
        if not is_new:
            return
        if self.sess[s].lst == Q_GHOST:
            sl_unlink(self.sess, &self.ghost, s)
            sl_push_tail(self.sess, &self.main, s, Q_MAIN)
        else:
            sl_push_tail(self.sess, &self.small, s, Q_SMALL)

    cdef void _on_removed(self, int32_t s) noexcept nogil:
        cdef int64_t cap
        cdef int32_t g
        if self.sess[s].lst == Q_SMALL:
            sl_unlink(self.sess, &self.small, s)
            sl_push_tail(self.sess, &self.ghost, s, Q_GHOST)
            cap = self.ghost_cap if self.ghost_cap > 0 else self.small.n + self.main.n + 1
            while self.ghost.n > cap:
                g = self.ghost.head
                sl_unlink(self.sess, &self.ghost, g)
                self._forget(g)
        elif self.sess[s].lst == Q_MAIN:
            sl_unlink(self.sess, &self.main, s)


def make(capacity: int, params: dict) -> SessionS3FIFO:
    ratio = float(params["small-size-ratio"])
    thr = int(params["move-to-main-threshold"])
    ghost = int(params["ghost-sessions"])
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"small-size-ratio must be in [0, 1], got {ratio}")
    if not 0 <= thr <= 3:
        raise ValueError(f"move-to-main-threshold must be in 0 .. 3, got {thr}")
    if not 0 <= ghost < 2**31:
        raise ValueError(f"ghost-sessions must be in 0 .. 2**31 - 1, got {ghost}")
    return SessionS3FIFO(capacity, ratio, thr, ghost)
