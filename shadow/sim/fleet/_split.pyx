# cython: language_level=3
"""A batch's requests split by replica in one counting pass: each replica's requests in file
order and their block ids side by side, replica after replica (pure-Python twin:
:func:`shadow.sim.fleet.probe_ref.split`; tested equal)."""

from libc.stdint cimport int64_t
from libc.string cimport memcpy


def split(const int64_t[::1] off, const int64_t[::1] ids, const int64_t[::1] assign,
          int64_t replicas, int64_t[::1] req_order, int64_t[::1] req_ends,
          int64_t[::1] out_ids, int64_t[::1] ent_ends) -> None:
    """``req_order``: the requests of replica 0, then 1, ... (file order within each);
    ``req_ends[r]``: the end of replica r's run there; ``out_ids`` and ``ent_ends`` the same for
    their block ids.  Every ``assign`` entry must be in ``0 .. replicas-1``."""
    cdef int64_t n = off.shape[0] - 1, i, r, L, pos
    if (assign.shape[0] < n or req_order.shape[0] < n or req_ends.shape[0] < replicas
            or ent_ends.shape[0] < replicas or out_ids.shape[0] < off[n]):
        raise ValueError("split: inconsistent array shapes")
    for i in range(n):
        if not 0 <= assign[i] < replicas:
            raise ValueError(f"split: request {i} assigned to replica {assign[i]}")
    with nogil:
        for r in range(replicas):
            req_ends[r] = 0
            ent_ends[r] = 0
        for i in range(n):
            r = assign[i]
            req_ends[r] += 1
            ent_ends[r] += off[i + 1] - off[i]
        for r in range(1, replicas):
            req_ends[r] += req_ends[r - 1]
            ent_ends[r] += ent_ends[r - 1]
        # NOTE: fill backwards from each run's end, so the requests keep file order
        for i in range(n - 1, -1, -1):
            r = assign[i]
            L = off[i + 1] - off[i]
            req_ends[r] -= 1
            req_order[req_ends[r]] = i
            ent_ends[r] -= L
            if L > 0:
                memcpy(&out_ids[ent_ends[r]], &ids[off[i]], L * sizeof(int64_t))
        # the starts are now where the ends were: shift to ends
        for r in range(replicas - 1):
            req_ends[r] = req_ends[r + 1]
            ent_ends[r] = ent_ends[r + 1]
        req_ends[replicas - 1] = n
        ent_ends[replicas - 1] = off[n]
