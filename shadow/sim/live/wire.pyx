# cython: language_level=3
"""See live/wire.pxd: the live batch's rows and columns, their encoders and their check."""

from libc.stdint cimport int64_t


def admit_row(int64_t n_blocks, int64_t n_match, int64_t n_anonymous, int64_t category=0,
              int64_t session_id=-1, int64_t session_next_req=-1) -> tuple:
    """The row of an admission of ``n_blocks`` blocks (its info row at the end)."""
    return (EV_ADMIT, n_blocks, n_match, n_anonymous, 0, -1, category, session_id,
            session_next_req)


def release_row(int64_t n_blocks, int64_t n_anonymous, int64_t n_anonymous_final,
                int64_t link) -> tuple:
    """The row of a release of an admission of ``n_blocks`` blocks (``link``: its event or -1)."""
    return (EV_RELEASE, n_blocks, 0, n_anonymous, n_anonymous_final, link, 0, -1, -1)


cdef int64_t check_live_batch(const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                              const int64_t[::1] block_ids, const int64_t[::1] next_access,
                              const double[::1] timestamps, const double[::1] cost_exact,
                              const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                              double[:, :, ::1] out_f) except -1:
    """Check a live batch's arrays before the loop reads them unchecked; its longest event
    (entries plus anonymous slots)."""
    cdef int64_t n = ev.shape[0], e, L, need, max_len = 0
    if (ev.shape[1] != ROW_WIDTH or offsets.shape[0] != n + 1 or out_i.shape[0] < n
            or out_f.shape[0] < n or out_i.shape[1] != out_f.shape[1]
            or out_i.shape[2] != OUT_WIDTH or out_f.shape[2] != OUT_WIDTH
            or next_access.shape[0] != block_ids.shape[0] or timestamps.shape[0] < n
            or offsets[n] > block_ids.shape[0] or offsets[0] != 0):
        raise ValueError("live_batch: inconsistent array shapes")
    for e in range(n):
        L = offsets[e + 1] - offsets[e]
        if (L < 0 or ev[e, ROW_N_BLOCKS] < 0 or ev[e, ROW_N_MATCH] < 0
                or ev[e, ROW_N_ANONYMOUS] < 0 or ev[e, ROW_N_ANONYMOUS_FINAL] < 0):
            raise ValueError(f"live_batch: bad event {e}")
        if ev[e, ROW_KIND] == EV_ADMIT:
            if ev[e, ROW_N_BLOCKS] != L:
                raise ValueError(f"live_batch: admission {e} has {L} entries for "
                                 f"{ev[e, ROW_N_BLOCKS]} blocks")
            need = L + ev[e, ROW_N_ANONYMOUS]
        elif ev[e, ROW_KIND] == EV_RELEASE:
            if ev[e, ROW_N_BLOCKS] > L:
                raise ValueError(f"live_batch: release {e} has fewer entries than its blocks")
            if ev[e, ROW_LINK] >= e or (ev[e, ROW_LINK] >= 0
                                        and ev[ev[e, ROW_LINK], ROW_KIND] != EV_ADMIT):
                raise ValueError(f"live_batch: release {e} does not link to an earlier admission")
            need = L + ev[e, ROW_N_ANONYMOUS_FINAL]
        else:
            raise ValueError(f"live_batch: event {e} of unknown kind {ev[e, ROW_KIND]}")
        if need > max_len:
            max_len = need
    if cost_exact.shape[0] < max_len + 1 or cost_int.shape[0] < max_len + 1:
        raise ValueError("live_batch: cost arrays shorter than the longest event")
    return max_len
