# cython: language_level=3
"""The event batches of ``--timing recorded`` (:mod:`shadow.sim.timing.run`) in the live wire format
(``live/wire.pxd``), built in one C pass per batch.

An event is ``g`` of the time order: ``g < n`` is the release of request ``g``, ``g >= n`` the
admission of request ``g - n``.  ``pos[r]`` is request ``r``'s admission row in the batch being
built (-1 outside it): a release in the same batch links to it, any other release takes its
admission's ``OUT_RC`` per cache from ``rc_of`` (kept by :func:`take_results`).

NOTE: numpy's per-batch fancy indexing cost more than serving the batch (each column a pass and
a temporary); here a batch is one pass over its events, writing the rows, the entries and the
timestamps where the loop reads them.
"""

from libc.stdint cimport int8_t, int64_t
from libc.string cimport memcpy

from shadow.sim.live.wire cimport (EV_ADMIT, EV_RELEASE, OUT_PREFIX_HITS, OUT_RC, ROW_KIND,
                                  ROW_LINK, ROW_N_ANONYMOUS, ROW_N_ANONYMOUS_FINAL,
                                  ROW_N_BLOCKS, ROW_N_MATCH, ROW_INFO, INFO_CATEGORY,
                                  INFO_SESSION, INFO_SESSION_NEXT, INFO_WIDTH)


def batch_entries(const int64_t[::1] order, int64_t c0, int64_t c1, int64_t n,
                  const int64_t[::1] n_prompt, const int64_t[::1] n_rel) -> int:
    """The block entries of events ``order[c0:c1]`` (an admission: the prompt's full blocks; a
    release: those and the generated ones)."""
    cdef int64_t c, g, total = 0
    with nogil:
        for c in range(c0, c1):
            g = order[c]
            total += n_prompt[g - n] if g >= n else n_rel[g]
    return total


def fill_batch(const int64_t[::1] order, int64_t c0, int64_t c1, int64_t n,
               const int64_t[::1] n_prompt, const int64_t[::1] n_rel,
               const int64_t[::1] n_match, const int64_t[::1] n_anon,
               const int64_t[::1] n_final, const int64_t[::1] nb, const int64_t[::1] off,
               const int64_t[::1] ids, const int64_t[::1] start, const int8_t[:, ::1] rc_of,
               int64_t[::1] pos, int64_t[:, ::1] ev, int64_t[::1] offsets,
               int64_t[::1] ids_out, double[::1] ts, int64_t[:, ::1] rc,
               const int64_t[:, ::1] info=None) -> tuple:
    """Write events ``order[c0:c1]`` into rows ``ev[0:m]``, entry ``offsets[0:m+1]`` into
    ``ids_out``, timestamps ``ts[0:m]`` (``start[r] / 1e6``) and, for a release whose admission
    is in an earlier batch, ``rc[e, :]`` (zero elsewhere).  An admission's info row is
    ``info[r]`` (requests x INFO_WIDTH), or category 0 and no session without ``info``.
    Returns (the longest event's entries plus anonymous slots, releases, their block accesses).  The caller sized every output for ``m`` events and
    :func:`batch_entries` entries."""
    cdef int64_t m = c1 - c0, e, g, r, L, need, k, K = rc.shape[1], o = 0
    cdef int64_t max_len = 0, n_released = 0, accesses = 0
    cdef int64_t* row
    cdef bint has_info = info is not None
    if (ev.shape[0] < m or offsets.shape[0] < m + 1 or ts.shape[0] < m or rc.shape[0] < m
            or rc_of.shape[1] != K or ev.shape[1] < ROW_INFO + INFO_WIDTH or c0 < 0
            or c1 > order.shape[0] or (info is not None and (info.shape[0] < n
                                                             or info.shape[1] != INFO_WIDTH))):
        raise ValueError("fill_batch: inconsistent array shapes")
    with nogil:
        offsets[0] = 0
        for e in range(m):
            g = order[c0 + e]
            row = &ev[e, 0]
            if g >= n:
                r = g - n
                L = n_prompt[r]
                row[ROW_KIND] = EV_ADMIT
                row[ROW_N_MATCH] = n_match[r]
                row[ROW_N_ANONYMOUS_FINAL] = 0
                row[ROW_LINK] = -1
                need = L + n_anon[r]
                pos[r] = e
                if has_info:
                    row[ROW_INFO + INFO_CATEGORY] = info[r, INFO_CATEGORY]
                    row[ROW_INFO + INFO_SESSION] = info[r, INFO_SESSION]
                    row[ROW_INFO + INFO_SESSION_NEXT] = info[r, INFO_SESSION_NEXT]
                else:
                    row[ROW_INFO + INFO_CATEGORY] = 0
                    row[ROW_INFO + INFO_SESSION] = -1
                    row[ROW_INFO + INFO_SESSION_NEXT] = -1
                for k in range(K):
                    rc[e, k] = 0
            else:
                r = g
                L = n_rel[r]
                row[ROW_KIND] = EV_RELEASE
                row[ROW_N_MATCH] = 0
                row[ROW_N_ANONYMOUS_FINAL] = n_final[r]
                row[ROW_LINK] = pos[r]
                row[ROW_INFO + INFO_CATEGORY] = 0
                row[ROW_INFO + INFO_SESSION] = -1
                row[ROW_INFO + INFO_SESSION_NEXT] = -1
                need = L + n_final[r]
                for k in range(K):
                    rc[e, k] = rc_of[r, k] if pos[r] < 0 else 0
                n_released += 1
                accesses += nb[r]
            row[ROW_N_BLOCKS] = n_prompt[r]
            row[ROW_N_ANONYMOUS] = n_anon[r]
            if L > 0:
                memcpy(&ids_out[o], &ids[off[r]], L * sizeof(int64_t))
            o += L
            offsets[e + 1] = o
            ts[e] = start[r] / 1e6
            if need > max_len:
                max_len = need
    return max_len, n_released, accesses


def take_results(const int64_t[::1] order, int64_t c0, int64_t c1, int64_t n,
                 const int64_t[:, :, ::1] out_i, int8_t[:, ::1] rc_of, int64_t[::1] pos,
                 int64_t[:, ::1] prefix_hits=None) -> None:
    """After serving events ``order[c0:c1]``: each admission's ``OUT_RC`` per cache into
    ``rc_of`` and its row out of ``pos``; with ``prefix_hits`` (requests x caches) its
    first-miss hit blocks there (-1 where a cache skipped it or had stopped)."""
    cdef int64_t e, g, r, k, K = rc_of.shape[1], v
    cdef bint want = prefix_hits is not None
    if out_i.shape[0] < c1 - c0 or out_i.shape[1] != K or (want and prefix_hits.shape[1] != K):
        raise ValueError("take_results: inconsistent array shapes")
    with nogil:
        for e in range(c1 - c0):
            g = order[c0 + e]
            if g < n:
                continue
            r = g - n
            pos[r] = -1
            for k in range(K):
                v = out_i[e, k, OUT_RC]
                rc_of[r, k] = <int8_t>v
                if want:
                    prefix_hits[r, k] = out_i[e, k, OUT_PREFIX_HITS] if v == 0 else -1
