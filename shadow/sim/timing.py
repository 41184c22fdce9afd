"""``--timing recorded``: serve a recording as the live connector served it, in time order.

The serial replay (``--timing serial``, :func:`shadow.sim.drive.run_trace`) serves each request
whole, one after another.  An engine runs many at once: a request's blocks stay held while it
runs, and its generated blocks enter the cache when it finishes.  With start and completion times
(a recording of the connector has both) the same live path the connector drives
(:class:`~shadow.sim.live.LiveBatch`) replays that:

* each request is admitted at its ``start_time_us`` and released at its ``complete_time_us``, all
  events in time order (at equal times releases first, then file order);
* the admission holds the prompt's full blocks, ``input_length // B`` of the request's blocks,
  looks up ``(input_length - 1) // B`` of them (vLLM recomputes the last prompt token) and
  reserves the prompt's partial last block; the release inserts the generated blocks vLLM cached
  (up to ``input_length + output_length - 1`` computed tokens) and holds the final partial block
  while they go in: :mod:`shadow.sim.vllm_rules`, as the connector's worker does;
* blocks held by running requests are pinned; an admission that would need them is skipped.

Left out: the engine's queue (a recording's start time is the request's arrival, so a request
that waited is admitted here before the engine admitted it), preemptions, chunked prefill (a
prompt is held whole from its start).  Oracles are refused: their next-access times follow file
order, not this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.registry import policy_info
from shadow.trace.format import RECORD_DTYPE
from shadow.sim.vllm_rules import (blocks_held, computed_tokens, full_blocks, max_hit_blocks,
                                   partial_tail_blocks)

if TYPE_CHECKING:
    from shadow.sim.simulator import Simulator

#: ``--timing`` modes.
TIMING_MODES = ("serial", "recorded")

#: Events per :meth:`Simulator.serve_live` call.
BATCH_EVENTS = 4096


def _load(tr) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole trace's records, offsets and block ids (time order needs all of it)."""
    recs = [np.zeros(0, dtype=RECORD_DTYPE)]
    offs = [np.zeros(1, dtype=np.int64)]
    ids = [np.zeros(0, dtype=np.int64)]
    base = 0
    for batch in tr:
        recs.append(np.asarray(batch.records))
        o = np.asarray(batch.offsets, dtype=np.int64)
        offs.append(o[1:] + base)
        base += int(o[-1])
        ids.append(np.asarray(batch.block_ids, dtype=np.int64))
    return np.concatenate(recs), np.concatenate(offs), np.concatenate(ids)


def run_trace_recorded(sim: "Simulator", tr, path: str | os.PathLike[str], block_size: int,
                       progress: Callable[[int, int], None] | None = None) -> None:
    """Serve the trace ``tr`` in the order of its recorded start and completion times, through
    the live path of every cache of ``sim``; then close ``sim`` (abort it on any failure)."""
    from shadow.sim.live import Admission, LiveBatch   # NOTE: the Cython loop, only when run

    try:
        oracles = sorted({s.policy for s in sim.specs if policy_info(s.policy).needs_next_access})
        if oracles:
            raise ShadowError(f"--timing recorded cannot run {', '.join(oracles)}: an oracle's "
                              f"next-access times follow the file's order, not the recorded times")
        if block_size < 1:
            raise ShadowError(f"{path}: --timing recorded needs the block size in tokens, which "
                              f"the trace's header does not give")
        rec, off, ids = _load(tr)
        n = int(rec.shape[0])
        start = rec["start_time_us"].astype(np.int64)
        done = rec["complete_time_us"].astype(np.int64)
        bad = np.flatnonzero((start < 0) | (done < start))
        if bad.shape[0]:
            r = int(bad[0])
            raise ShadowError(f"{path}: request {r} has start time {int(start[r])} us and "
                              f"completion time {int(done[r])} us: --timing recorded needs both "
                              f"(a recording has them; a trace with arrival times only does not)")
        inp = rec["input_length"].astype(np.int64)
        out = np.maximum(rec["output_length"].astype(np.int64), 1)
        nb = np.diff(off)
        n_prompt = np.minimum(full_blocks(inp, block_size), nb)
        n_match = np.minimum(max_hit_blocks(inp, block_size), n_prompt)
        n_anon = blocks_held(inp, block_size) - full_blocks(inp, block_size)
        n_comp = computed_tokens(inp, out)
        n_full = np.minimum(full_blocks(n_comp, block_size), nb)
        n_final = partial_tail_blocks(n_comp, np.maximum(n_full, n_prompt), block_size)
        # events: (time, 0 = release before 1 = admission at equal times, request index)
        times = np.concatenate([done, start])
        kinds = np.concatenate([np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.int64)])
        reqs = np.concatenate([np.arange(n), np.arange(n)])
        order = np.lexsort((reqs, kinds, times))
        adms: dict[int, Admission] = {}
        done_req = np.zeros(n, dtype=bool)
        lb = LiveBatch()
        served_requests = served_accesses = 0
        for e in order.tolist():
            r = int(reqs[e])
            a = int(off[r])
            if kinds[e] == 1 and done_req[r]:
                continue                     # it started as it finished: served already
            if r not in adms:
                adms[r] = lb.admit(ids[a:a + int(n_prompt[r])].tolist(), int(n_match[r]),
                                   int(n_anon[r]), float(start[r]) / 1e6)
            if kinds[e] == 0:
                done_req[r] = True
                lb.release(adms.pop(r), ids[a + int(n_prompt[r]):a + int(n_full[r])].tolist(),
                           int(n_final[r]))
                served_requests += 1
                served_accesses += int(nb[r])
            if len(lb) >= BATCH_EVENTS:
                sim.serve_live(lb)
                lb = LiveBatch()
                if progress is not None:
                    progress(served_accesses, served_requests)
        if len(lb):
            sim.serve_live(lb)
        if progress is not None:
            progress(served_accesses, served_requests)
    except BaseException:
        sim.abort()
        raise
    sim.close()
