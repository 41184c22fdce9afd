"""From a trace to the requests a replay sends: prefix structure, prompt length, output length, time.

Scaling rule (``tokens_per_block`` = T, the trace's block size = S, engine block size = B):

* A request with ``n`` block ids whose ``input_length`` L satisfies ``(n-1)*S < L < n*S`` has a
  partial last trace block: its first ``n-1`` ids become full blocks of T tokens each, and the tail
  is ``clamp(round((L - (n-1)*S) * T / S), 1, T-1)`` tokens keyed by the request (T > 1).
* Otherwise (L a multiple of S, L unknown, or L inconsistent with ``n``) all ``n`` ids are full
  blocks and there is no tail.
* The output length is the trace's ``output_length`` capped by ``max_output_tokens`` and at least 1.

Invariant: ``prompt_tokens == len(blocks) * T + tail`` and ``0 <= tail < T``; T is a multiple of B,
so a trace block is exactly ``T // B`` engine blocks and equal trace ids give equal engine blocks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from shadow.errors import ShadowError
from shadow.trace.segments import PREEMPTED_TYPE

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: ``blocks`` are the trace ids of its full blocks, in prefix order."""

    index: int  # 0-based position in the trace (file order); keys the tail tokens
    arrival_s: float  # seconds from the first request sent (start time, else completion time, else 0)
    blocks: tuple[int, ...]
    tail: int
    prompt_tokens: int
    max_tokens: int
    trace_input_length: int
    trace_output_length: int
    session: int = -1  # the trace's session id (-1 none): X-Session-ID with --session-headers
    user: int = 0      # the trace's user id (0 none): X-User-ID with --session-headers


def scale_tail(n_blocks: int, input_length: int, trace_block_size: int,
               tokens_per_block: int) -> tuple[int, int]:
    """``(n_full, tail)`` for a request of ``n_blocks`` trace ids and ``input_length`` tokens."""
    if n_blocks <= 0:
        return 0, 0
    rem = input_length - (n_blocks - 1) * trace_block_size
    if input_length <= 0 or rem <= 0 or rem >= trace_block_size or tokens_per_block <= 1:
        return n_blocks, 0
    tail = int(np.floor(rem * tokens_per_block / trace_block_size + 0.5))
    tail = min(tokens_per_block - 1, max(1, tail))
    return n_blocks - 1, tail


def check_tokens_per_block(tokens_per_block: int, engine_block_size: int | None) -> None:
    if tokens_per_block <= 0:
        raise ShadowError(f"bad --tokens-per-block {tokens_per_block}: must be positive")
    if engine_block_size and tokens_per_block % engine_block_size:
        raise ShadowError(
            f"--tokens-per-block {tokens_per_block} is not a multiple of the engine's block size "
            f"{engine_block_size}: trace blocks would straddle engine blocks and the engine's "
            f"hashes would not reproduce the trace's sharing")


def iter_requests(trace_path: str, *, tokens_per_block: int | None = None,
                  trace_block_size: int | None = None, max_output_tokens: int | None = None,
                  max_requests: int | None = None, skip_requests: int = 0,
                  allow_truncated: bool = False, block_id: str = "prefix",
                  ) -> tuple[int, int, Iterator[RequestSpec]]:
    """Open a trace; return ``(trace_block_size, tokens_per_block, iterator of RequestSpec)``.

    Arrival times are rebased to the first request sent.  ``skip_requests`` drops that many
    requests from the start (a slice); ``max_requests`` stops after that many.
    """
    from shadow.trace import open_trace

    tr = open_trace(trace_path, allow_truncated=allow_truncated, block_id=block_id)
    tr.__enter__()
    try:
        header_bs = int(getattr(tr.header, "block_size_tokens", 0) or 0)
    except Exception:
        tr.__exit__(None, None, None)
        raise
    tbs = int(trace_block_size or header_bs or 0)
    if tbs <= 0:
        tr.__exit__(None, None, None)
        raise ShadowError(f"{trace_path}: the trace does not state its block size; pass --trace-block-size")
    tpb = int(tokens_per_block or tbs)
    # NOTE: a connector recording's admission that ended in a preemption is a record of its own
    # (docs/connector.md); the request is sent once, as its last admission recorded it
    names = list(getattr(tr.header, "type_names", []) or [])
    preempted = names.index(PREEMPTED_TYPE) + 1 if PREEMPTED_TYPE in names else 0

    def gen() -> Iterator[RequestSpec]:
        sent = 0
        t0: float | None = None
        try:
            for batch in tr:
                recs = batch.records
                for i in range(batch.n_requests):
                    idx = batch.first_request + i
                    if idx < skip_requests:
                        continue
                    if max_requests is not None and sent >= max_requests:
                        return
                    rec = recs[i]
                    if preempted and int(rec["type_id"]) == preempted:
                        continue
                    ids = batch.request_blocks(i)
                    n_full, tail = scale_tail(len(ids), int(rec["input_length"]), tbs, tpb)
                    # NOTE: arrival = start_time_us; traces that only carry the completion time
                    # (Mooncake's `timestamp`) use that, as the simulator does.
                    start = int(rec["start_time_us"])
                    if start < 0:
                        start = int(rec["complete_time_us"])
                    t = start / 1e6 if start >= 0 else 0.0
                    if t0 is None:
                        t0 = t
                    out = int(rec["output_length"]) or 1
                    if max_output_tokens:
                        out = min(out, max_output_tokens)
                    yield RequestSpec(
                        index=idx, arrival_s=max(0.0, t - t0),
                        blocks=tuple(int(b) for b in ids[:n_full]), tail=tail,
                        prompt_tokens=n_full * tpb + tail, max_tokens=max(1, out),
                        trace_input_length=int(rec["input_length"]),
                        trace_output_length=int(rec["output_length"]),
                        session=int(rec["session_id"]), user=int(rec["user_id"]))
                    sent += 1
        finally:
            tr.__exit__(None, None, None)

    return tbs, tpb, gen()


def load_requests(trace_path: str, **kwargs) -> tuple[int, int, list[RequestSpec]]:
    tbs, tpb, it = iter_requests(trace_path, **kwargs)
    return tbs, tpb, list(it)
