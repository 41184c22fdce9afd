# cython: language_level=3
"""What a KV-event index answers, read from the replicas' caches themselves: per replica, how
many leading blocks of a prompt are resident (contiguous from block 0), and which blocks of a
request a cache holds.  Pure-Python twins: :mod:`shadow.sim.fleet.probe_ref` (tested equal)."""

from libc.stdint cimport int64_t, uint8_t

from shadow.sim.core.policy cimport Policy


def prefix_lengths(list policies, const int64_t[::1] ids, int64_t[::1] out) -> None:
    """``out[r]``: the leading entries of ``ids`` that ``policies[r]`` holds, up to its first
    miss (read-only: ``find`` changes no state)."""
    cdef int64_t r, i, n = ids.shape[0], k = len(policies)
    cdef Policy p
    if out.shape[0] < k:
        raise ValueError("prefix_lengths: one output per policy")
    for r in range(k):
        p = <Policy?>policies[r]
        with nogil:
            i = 0
            while i < n and p.find(ids[i]) >= 0:
                i += 1
        out[r] = i


def resident_mask(Policy p, const int64_t[::1] ids, uint8_t[::1] out) -> int:
    """``out[i]`` = 1 where ``p`` holds ``ids[i]``; returns how many it holds."""
    cdef int64_t i, n = ids.shape[0], held = 0
    if out.shape[0] < n:
        raise ValueError("resident_mask: one output per id")
    with nogil:
        for i in range(n):
            if p.find(ids[i]) >= 0:
                out[i] = 1
                held += 1
            else:
                out[i] = 0
    return held
