"""The live batch's wire format: event rows in, result columns out.

:class:`shadow.sim.live.batch.LiveBatch` encodes live admissions and releases here, and
:func:`shadow.sim.core.loop.live_batch_all` serves them.  Event ``e`` covers the block entries
``offsets[e]:offsets[e+1]`` and is the int64 row ``ev[e, 0:ROW_WIDTH]``:

* ``ROW_KIND``: ``EV_ADMIT`` or ``EV_RELEASE``;
* ``ROW_N_BLOCKS``: the admission's block count (an admission's entries are its blocks; a
  release's are the admission's blocks, then the generated ones);
* ``ROW_N_MATCH`` (admission): how many leading blocks are looked up for the statistics;
* ``ROW_N_ANONYMOUS``: the admission's anonymous slots (vLLM's partial last block);
* ``ROW_N_ANONYMOUS_FINAL`` (release): anonymous slots held when the request finishes;
* ``ROW_LINK`` (release): the admission's event in this batch, or -1 when an earlier batch
  admitted it (the caller then sets the release row's own ``OUT_RC``);
* ``ROW_INFO .. ROW_INFO + INFO_WIDTH - 1`` (admission): the request's info row (below).

A request's **info row** (``INFO_WIDTH`` int64, what ``Policy.set_request_ctx`` reads besides the
timestamp and the block count): ``INFO_CATEGORY`` (0 = one undifferentiated class),
``INFO_SESSION`` (session id, -1 none), ``INFO_SESSION_NEXT`` (1-based file-order index of the
session's next request, -1 none).  Offline batches pass one per request as an ``(n,
INFO_WIDTH)`` array (``shadow.sim.core.loop.serve_chunks``'s ``info``); a live admission carries it
at the end of its row.

Results: ``out_i[e, k, OUT_RC | OUT_HITS | OUT_PREFIX_HITS]`` and ``out_f[e, k, OUT_COST |
OUT_SAVED | OUT_PREFIX_SAVED]`` for admission ``e`` in cache ``k`` (rc 0: served, 1: skipped, -1:
the cache failed).  A release is applied in cache ``k`` only where its admission was served.
"""

from libc.stdint cimport int64_t

cpdef enum:
    EV_ADMIT = 0
    EV_RELEASE = 1

cpdef enum:
    ROW_KIND = 0
    ROW_N_BLOCKS = 1
    ROW_N_MATCH = 2
    ROW_N_ANONYMOUS = 3
    ROW_N_ANONYMOUS_FINAL = 4
    ROW_LINK = 5
    ROW_INFO = 6
    ROW_WIDTH = 9

cpdef enum:
    INFO_CATEGORY = 0
    INFO_SESSION = 1
    INFO_SESSION_NEXT = 2
    INFO_WIDTH = 3

cpdef enum:
    OUT_RC = 0
    OUT_HITS = 1
    OUT_PREFIX_HITS = 2

cpdef enum:
    OUT_COST = 0
    OUT_SAVED = 1
    OUT_PREFIX_SAVED = 2

cpdef enum:
    OUT_WIDTH = 3

cdef int64_t check_live_batch(const int64_t[:, ::1] ev, const int64_t[::1] offsets,
                              const int64_t[::1] block_ids, const int64_t[::1] next_access,
                              const double[::1] timestamps, const double[::1] cost_exact,
                              const int64_t[::1] cost_int, int64_t[:, :, ::1] out_i,
                              double[:, :, ::1] out_f) except -1
