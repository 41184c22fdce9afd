# cython: language_level=3
"""The serial kv_aware fleet loop, compiled: route each request by kv_aware's rule on the
replicas' caches and serve it in the chosen one, while the router's index is exactly the
resident sets (no lag, no speculative entry alive).

Under serial timing nothing is in flight, so kv_aware's least-load fallback is replica 0 (the
first among equals), and a speculation is replaced by the chosen replica's stores at once
unless some speculated block is not resident after the request (a skipped request): the loop
stops there and hands back, so that :func:`shadow.sim.fleet.run._serve_serial` (the reference
path, :class:`shadow.sim.fleet.kv_aware.KvAware` one request at a time) keeps the speculation
until it expires.  Tested equal to that path (tests/sim/fleet/test_serial_fast.py).
"""

from libc.stdint cimport int64_t

from shadow.sim.core.policy cimport Policy


def kv_serial(list runs, const int64_t[::1] off, object ids, object nxt,
              const int64_t[::1] pb, object ts, object cexact, object cint, object nm,
              object na, object info, int64_t i0, bint speculative, int64_t[::1] assign,
              int64_t[::1] peak) -> int:
    """Serve requests ``i0 ..`` (file order); returns the first not served here: the end, or
    the one after a request whose speculation outlives it (then ``peak[1]`` is its best match:
    the speculation is its prompt's blocks from there on, on ``assign[i]``; else -1).
    ``peak[0]`` keeps the replicas' largest resident total seen after a request."""
    cdef int64_t n = off.shape[0] - 1, N = len(runs), i, r, k, a, b, p, best, pick, j, total
    cdef const int64_t* idp
    cdef list policies = [run.policy for run in runs]
    cdef Policy pol
    cdef object one = __import__("numpy").zeros(2, dtype="int64")
    cdef int64_t[::1] onev = one
    cdef object ids_np = ids
    cdef const int64_t[::1] idv = ids
    peak[1] = -1
    for i in range(i0, n):
        a = off[i]
        b = off[i + 1]
        p = pb[i]
        best = 0
        pick = 0
        if N > 1 and p > 0:
            idp = &idv[a]
            for r in range(N):
                pol = <Policy>policies[r]
                k = 0
                while k < p and pol.find(idp[k]) >= 0:
                    k += 1
                if k >= best:               # NOTE: max_by_key: the last among the best
                    best = k
                    pick = r
            if best == 0:
                pick = 0                    # the least loaded, first among equals: all idle
        assign[i] = pick
        onev[1] = b - a
        runs[pick].serve_batch(one, ids_np[a:b], nxt[a:b], ts[i:i + 1], cexact, cint, i,
                               None if nm is None else nm[i:i + 1],
                               None if na is None else na[i:i + 1],
                               None if info is None else info[i:i + 1])
        total = 0
        for r in range(N):
            total += (<Policy>policies[r]).n_resident
        if total > peak[0]:
            peak[0] = total
        if speculative and N > 1 and best < p:
            pol = <Policy>policies[pick]
            for j in range(a + best, a + p):
                if pol.find(idv[j]) < 0:
                    peak[1] = best          # NOTE: the reference path keeps it from here
                    return i + 1
    return n
