"""``--timing recorded``: serve a recording as the live connector served it, in time order.

The serial replay (``--timing serial``, :func:`shadow.sim.core.simulator.run_trace`) serves each request
whole, one after another.  An engine runs many at once: a request's blocks stay held while it
runs, and its generated blocks enter the cache when it finishes.  With start and completion times
(a recording of the connector has both) the same live path the connector drives
(:class:`~shadow.sim.live.batch.LiveBatch`) replays that:

* each request is admitted at its ``start_time_us`` and released at its ``complete_time_us``, all
  events in time order (at equal times releases first, then admissions, then the release of a
  request that started as it finished; then file order);
* the admission holds the prompt's full blocks, ``input_length // B`` of the request's blocks,
  looks up ``(input_length - 1) // B`` of them (vLLM recomputes the last prompt token) and
  reserves the prompt's partial last block; the release inserts the generated blocks vLLM cached
  (up to ``input_length + output_length - 1`` computed tokens) and holds the final partial block
  while they go in: :mod:`shadow.sim.engine.rules`, as the connector's worker does;
* blocks held by running requests are pinned; an admission that would need them is skipped;
* a policy that wants the request context gets it at the admission (its start time, category
  folded by ``sim.category``, session), as in the serial replay.

The connector's recording stamps each admission and release on the scheduler's thread with a
strictly increasing microsecond (``start_time_us`` is the engine's admission, not the arrival),
and records an admission that ended in a preemption as a request of its own (type
``preempted``, input the tokens it was admitted with, output those it gained): so this order is
the live shadow's, and every simulator cache gives the live one's counters (tested with a real
engine, tests/connector/test_timing_recorded.py).  For other traces the start time is whatever
the trace says (often the arrival: a request that waited is admitted here before an engine
would have).  Left out: chunked prefill (a prompt is held whole from its start), decode-step
allocation (the generated blocks go in at the release, as the live simulator caches do).
Oracles are refused (:class:`shadow.sim.run.RunSpec`): their next-access times follow file
order, not this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.engine.rules import (blocks_held, computed_tokens, full_blocks, max_hit_blocks,
                                   partial_tail_blocks)

if TYPE_CHECKING:
    from shadow.sim.timing.service import ServiceModel
    from shadow.sim.core.simulator import Simulator

#: ``--timing`` modes.
TIMING_MODES = ("serial", "recorded", "model")

#: Events per :meth:`Simulator.serve_live_arrays` call.
BATCH_EVENTS = 8192


class SerialOrder:
    """One request at a time in file order: request ``i`` starts at ``2i`` and completes at
    ``2i + 1`` (microseconds): the serial replay under vLLM's block rules, through the live
    path (what ``--tier`` needs: each admission's GPU prefix hit)."""

    @staticmethod
    def schedule(n: int) -> tuple[np.ndarray, np.ndarray]:
        start = 2 * np.arange(n, dtype=np.int64)
        return start, start + 1


#: The record fields the recorded timing reads.
FIELDS = ("start_time_us", "complete_time_us", "input_length", "output_length")

#: And those the request context reads (only loaded when a policy wants it).
CTX_FIELDS = ("type_id", "turn", "session_id", "session_next_req")


def load_fields(sim: "Simulator") -> tuple[str, ...]:
    """The record columns :func:`run_trace_recorded` reads for ``sim``'s caches."""
    return FIELDS + CTX_FIELDS if sim.wants_request_ctx else FIELDS


def live_counts(rec, off: np.ndarray, block_size: int) -> tuple[np.ndarray, ...]:
    """Per request, vLLM's block rules for its admission and release (:mod:`shadow.sim.engine.rules`):
    the prompt's full blocks held at admission, the blocks looked up, the anonymous slots
    reserved, the entries of the release (admitted + generated blocks) and the final partial
    block held while they go in."""
    inp = rec["input_length"]
    out = np.maximum(rec["output_length"], 1)
    nb = np.diff(off)
    fb = full_blocks(inp, block_size)
    n_prompt = np.minimum(fb, nb)
    n_match = np.minimum(max_hit_blocks(inp, block_size), n_prompt)
    n_anon = blocks_held(inp, block_size) - fb
    n_comp = computed_tokens(inp, out)
    n_full = np.minimum(full_blocks(n_comp, block_size), nb)
    n_rel = np.maximum(n_full, n_prompt)             # a release's entries: admitted + generated
    n_final = partial_tail_blocks(n_comp, n_rel, block_size)
    return n_prompt, n_match, n_anon, n_rel, n_final


def _grow(a: np.ndarray, need: int) -> np.ndarray:
    """``a`` with room for at least ``need`` entries (doubling; the first ``len(a)`` kept)."""
    if need <= a.shape[0]:
        return a
    b = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


def _load(tr, fields: tuple[str, ...] = FIELDS) -> tuple[dict[str, np.ndarray], np.ndarray,
                                                         np.ndarray]:
    """The whole trace's timing fields (int64 each), offsets and block ids (time order needs all
    of it).  NOTE: plain int64 columns, not whole records (concatenating structured batches
    field by field cost as much as serving them), each batch copied into arrays sized by the
    header's counts (grown when a header has none or undercounts), not kept and concatenated:
    the copy then touches each new page once."""
    h = getattr(tr, "header", None)
    n_hint = max(int(getattr(h, "n_requests", 0) or 0), 0)
    m_hint = max(int(getattr(h, "n_block_accesses", 0) or 0), 0)
    cols = {f: np.empty(n_hint, dtype=np.int64) for f in fields}
    offs = np.empty(n_hint + 1, dtype=np.int64)
    offs[0] = 0
    ids = np.empty(m_hint, dtype=np.int64)
    i = j = 0
    for batch in tr:
        k = int(batch.records.shape[0])
        o = np.asarray(batch.offsets, dtype=np.int64)
        L = int(o[-1])
        if i + k > offs.shape[0] - 1:
            cols = {f: _grow(c, i + k) for f, c in cols.items()}
            offs = _grow(offs, i + k + 1)
        ids = _grow(ids, j + L)
        for f in fields:
            cols[f][i:i + k] = batch.records[f]
        offs[i + 1:i + k + 1] = o[1:] + j
        ids[j:j + L] = batch.block_ids
        i += k
        j += L
    return {f: c[:i] for f, c in cols.items()}, offs[:i + 1], ids[:j]


def run_trace_recorded(sim: "Simulator", tr, path: str | os.PathLike[str], block_size: int,
                       progress: Callable[[int, int], None] | None = None,
                       prefix_hits: np.ndarray | None = None,
                       service: "ServiceModel | SerialOrder | None" = None,
                       starts: np.ndarray | None = None, meter=None) -> None:
    """Serve the trace ``tr`` (an open trace, any iterable of its batches, or what :func:`_load`
    returned for it) in the order of its
    recorded start and completion times, through the live path of every cache of ``sim``; then
    close ``sim`` (abort it on any failure).  ``prefix_hits`` (int64, requests x caches, file
    order), when given, receives each admission's first-miss hit blocks per cache, -1 where the
    cache skipped the request or had stopped.  With ``service`` (``--timing model``) the start
    and completion times come from that model (:mod:`shadow.sim.timing.service`) and the trace's
    arrival times instead; with :class:`SerialOrder` (``--tier`` without ``--timing``) one
    request at a time in file order.  ``starts`` (int64, requests), when given, receives each
    request's start time (the admission order).  ``meter`` (a
    :class:`~shadow.sim.core.prefill.PrefillMeter`) gets every request's prompt length and
    per-cache first-miss hits at the end.  The run is checked before (:meth:`shadow.sim.
    run.RunSpec.bind`): no oracle, ``block_size`` >= 1."""
    # NOTE: the Cython modules, only when run (the CLI reads TIMING_MODES at start-up)
    from shadow.sim.category import request_info
    from shadow.sim.live.wire import ROW_WIDTH
    from shadow.sim.timing.wire import batch_entries, fill_batch, take_results

    try:
        # NOTE: a caller that needs the arrays too (--tier) loads them once and passes them
        # (with load_fields(sim)'s columns)
        wants_ctx = sim.wants_request_ctx
        rec, off, ids = tr if isinstance(tr, tuple) else _load(tr, load_fields(sim))
        start = rec["start_time_us"]
        done = rec["complete_time_us"]
        n = int(start.shape[0])
        if isinstance(service, SerialOrder):
            start, done = service.schedule(n)
        elif service is not None:
            arrival = np.where(start >= 0, start, done)
            bad = np.flatnonzero(arrival < 0)
            if bad.shape[0]:
                raise ShadowError(f"{path}: request {int(bad[0])} has no arrival time (start "
                                  f"and completion time unknown): --timing model needs one")
            start, done = service.schedule(arrival, rec["input_length"], rec["output_length"])
        bad = np.flatnonzero((start < 0) | (done < start))
        if bad.shape[0]:
            r = int(bad[0])
            raise ShadowError(f"{path}: request {r} has start time {int(start[r])} us and "
                              f"completion time {int(done[r])} us: --timing recorded needs both "
                              f"(a recording has them; for a trace with arrival times only, "
                              f"--timing model)")
        if starts is not None:
            starts[:] = start
        nb = np.diff(off)
        n_prompt, n_match, n_anon, n_rel, n_final = live_counts(rec, off, block_size)
        # NOTE: what set_request_ctx gets (only built when a policy wants it): the info rows,
        # and the request's own time in the trace where the order is not a time (--tier alone)
        info = request_info(rec, sim.category) if wants_ctx else None
        ts_us = start
        if isinstance(service, SerialOrder):
            arrival = np.where(rec["start_time_us"] >= 0, rec["start_time_us"],
                               rec["complete_time_us"])
            ts_us = np.where(arrival >= 0, arrival, -1_000_000)
        # events in time order; at equal times releases first, then admissions, then the release
        # of a request that started as it finished (after its own admission); then file order
        # (event g < n: the release of request g; g >= n: the admission of request g - n)
        if n and max(int(done.max()), int(start.max())) < (1 << 60):
            # NOTE: one stable sort of time * 4 + kind is the lexsort (releases, then admissions,
            # each in file order) at a third of its cost; the key built in place
            key = np.empty(2 * n, dtype=np.int64)
            np.multiply(done, 4, out=key[:n])
            key[:n] += 2 * (done == start)
            np.multiply(start, 4, out=key[n:])
            key[n:] += 1
            order = np.argsort(key, kind="stable")
        else:
            kinds = np.concatenate([np.where(done == start, 2, 0), np.ones(n, dtype=np.int64)])
            order = np.lexsort((np.concatenate([np.arange(n), np.arange(n)]), kinds,
                                np.concatenate([done, start])))
        K = len(sim.runs)
        N = 2 * n
        if meter is not None and prefix_hits is None:
            prefix_hits = np.full((n, K), -1, dtype=np.int64)
        # NOTE: each batch is written in one C pass (timing.wire.fill_batch) into buffers reused
        # from batch to batch: numpy's per-column fancy indexing cost more than the serving
        n_prompt, n_rel, n_match, n_anon, n_final, nb, off, ids, ts_us = (
            np.ascontiguousarray(x, dtype=np.int64)
            for x in (n_prompt, n_rel, n_match, n_anon, n_final, nb, off, ids, ts_us))
        order = np.ascontiguousarray(order, dtype=np.int64)
        rc_of = np.zeros((n, K), dtype=np.int8)          # each admission's OUT_RC per cache
        pos = np.full(n, -1, dtype=np.int64)             # its row in the batch being built
        m_max = min(BATCH_EVENTS, N)
        ev = np.zeros((m_max, ROW_WIDTH), dtype=np.int64)
        offsets = np.zeros(m_max + 1, dtype=np.int64)
        ts = np.zeros(m_max, dtype=np.float64)
        rc = np.zeros((m_max, K), dtype=np.int64)
        ids_out = np.zeros(0, dtype=np.int64)
        served_requests = served_accesses = 0
        for c0 in range(0, N, BATCH_EVENTS):
            c1 = min(c0 + BATCH_EVENTS, N)
            m = c1 - c0
            total = batch_entries(order, c0, c1, n, n_prompt, n_rel)
            if total > ids_out.shape[0]:
                ids_out = np.empty(max(total, 2 * ids_out.shape[0]), dtype=np.int64)
            max_len, n_released, accesses = fill_batch(
                order, c0, c1, n, n_prompt, n_rel, n_match, n_anon, n_final, nb, off, ids,
                ts_us, rc_of, pos, ev, offsets, ids_out, ts, rc, info)
            out_i, _ = sim.serve_live_arrays(ev[:m], offsets[:m + 1], ids_out[:total], ts[:m],
                                             rc[:m], max_len)
            take_results(order, c0, c1, n, out_i, rc_of, pos, prefix_hits)
            served_requests += n_released
            served_accesses += accesses
            if progress is not None:
                progress(served_accesses, served_requests)
        if meter is not None:
            meter.add(rec["input_length"], prefix_hits.T)
    except BaseException:
        sim.abort()
        raise
    sim.close()
