"""Conversion between trace files: JSONL -> lcp, lcp -> JSONL, lcp segments -> one lcp.

Inputs are told apart by content (:func:`shadow.trace.header.sniff`), outputs by name:
``*.jsonl`` / ``*.json`` JSONL, ``*.lcp.zst`` / ``*.zst`` zstd lcp, ``*.lcp`` plain lcp.

* JSONL -> lcp: parse and intern, sort by completion time, annotate, write.
* one lcp -> JSONL: streamed, constant memory (dense ids, so a slice can be filtered and
  converted again).
* lcp segments (a live recording, possibly truncated ``.partial`` files) -> lcp: joined in the
  given order, then sorted and annotated like JSONL input.  Segments share one id space, so ids
  are kept (only renumbered to first-appearance order when sorting changed that order).
* the recordings of several replicas -> one fleet trace (lcp v2): ids unified through the
  block keys, each request keeping its replica (:mod:`shadow.trace.fleet`).
* a recording directory -> lcp: every segment, in order, across restarts
  (:mod:`shadow.trace.recording`); the summary says what was read.

The output goes through :mod:`shadow.atomic`: a ``.tmp-`` temporary beside it, fsynced and renamed
when complete.  Whether it can be written is checked before the input is read (a missing, non-
directory or read-only directory is a one-line :class:`~shadow.errors.OutputError` at once); a
full disk shows while writing, and then nothing is left under the output's name or beside it.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable, Sequence

import numpy as np

from shadow import __version__
from shadow.atomic import atomic_path, check_writable, create_temp, discard
from shadow.errors import ShadowError, TraceFormatError
from shadow.trace.annotate import TraceArrays, annotate
from shadow.trace.fleet import join
from shadow.trace.format import FLAG_COUNTS_VALID, VERSION_1, VERSION_2, empty_records
from shadow.trace.header import LcpHeader, sniff
from shadow.trace.jsonl import JsonlReader, write_jsonl
from shadow.trace.reader import LcpReader
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW
from shadow.trace.writer import DEFAULT_FRAME_BYTES, DEFAULT_LEVEL, LcpWriter

logger = logging.getLogger(__name__)

WRITE_SLICE = 1 << 20


def output_kind(path: str) -> str:
    p = str(path)
    if p.endswith((".jsonl", ".json")):
        return "jsonl"
    if p.endswith(".zst"):
        return "lcp.zst"
    if p.endswith(".lcp"):
        return "lcp"
    raise ShadowError(f"{p}: cannot tell the output format from the name (use .lcp, .lcp.zst"
                      " or .jsonl)")


def input_kind(path: str) -> str:
    p = str(path)
    if not os.path.exists(p):
        raise ShadowError(f"{p}: no such file")
    if os.path.isdir(p):
        from shadow.trace.recording import is_recording

        if is_recording(p):
            return "recording"
        raise ShadowError(f"{p}: is a directory without recording segments, not a trace")
    kind = sniff(p)
    if kind == "empty":
        raise TraceFormatError(f"{p}: empty file (neither lcp nor JSONL)", n_complete_requests=0,
                               byte_offset=0)
    if kind == "unknown":
        raise TraceFormatError(f"{p}: not a trace (neither lcp, lcp.zst nor JSONL)",
                               byte_offset=0)
    return kind


def header_for(trace: TraceArrays, producer: str) -> LcpHeader:
    """The header (counts valid) that describes an annotated in-memory trace."""
    rec = trace.records
    lengths = np.diff(trace.offsets)
    sess = rec["session_id"]
    ct = rec["complete_time_us"]
    flags = FLAG_COUNTS_VALID
    if trace.annotated:
        from shadow.trace.format import FLAG_HAS_NEXT_ACCESS, FLAG_HAS_SESSION_NEXT, FLAG_SORTED
        flags |= FLAG_HAS_NEXT_ACCESS | FLAG_HAS_SESSION_NEXT | FLAG_SORTED
    return LcpHeader(
        block_size_tokens=trace.block_size_tokens, flags=flags, n_requests=trace.n_requests,
        n_block_accesses=trace.n_entries,
        n_unique_blocks=int(trace.block_ids.max()) if trace.n_entries else 0,
        max_blocks_per_request=int(lengths.max()) if lengths.shape[0] else 0,
        n_sessions=int(np.unique(sess[sess >= 0]).shape[0]),
        n_users=int(rec["user_id"].max()) if trace.n_requests else 0,
        first_complete_time_us=int(ct.min()) if trace.n_requests else 0,
        last_complete_time_us=int(ct.max()) if trace.n_requests else 0,
        type_names=list(trace.type_names), producer=producer,
        replica_names=list(trace.replica_names),
        version=VERSION_2 if trace.needs_v2 else VERSION_1)


def write_lcp(trace: TraceArrays, path: str, *, producer: str, compress: bool | None = None,
              level: int = DEFAULT_LEVEL, frame_bytes: int = DEFAULT_FRAME_BYTES) -> LcpHeader:
    """Write an annotated in-memory trace (through a :func:`shadow.atomic.create_temp`
    temporary); returns the header written."""
    tmp = create_temp(path)
    try:
        w = LcpWriter(path, block_size_tokens=trace.block_size_tokens, producer=producer,
                      type_names=trace.type_names, compress=compress, level=level,
                      frame_bytes=frame_bytes,
                      has_next_access=trace.annotated, has_session_next=trace.annotated,
                      sorted=trace.annotated, temp_path=str(tmp),
                      replica_names=trace.replica_names,
                      version=VERSION_2 if trace.needs_v2 else VERSION_1)
    except BaseException:
        discard(tmp)   # NOTE: a type table the header cannot hold fails before the writer opens it
        raise
    try:
        for b in trace.batches(WRITE_SLICE):
            w.write_arrays(b.records, b.offsets, b.block_ids, b.next_access)
        header = w.final_header()
        w.close()
    except BaseException:
        w.abort()
        raise
    return header


def load_lcp(path: str, *, allow_truncated: bool = False) -> TraceArrays:
    """Read a whole lcp file into memory (ids as stored; block keys and replica names kept)."""
    with LcpReader(path, allow_truncated=allow_truncated) as r:
        return read_arrays(r)


def read_arrays(r: LcpReader) -> TraceArrays:
    """The rest of an open reader's file in memory (ids as stored; block keys and replica names
    kept); ``r.truncated`` says afterwards whether a torn tail was left out."""
    batches = list(r)
    header = r.header
    keys = None
    if batches:
        records = np.concatenate([b.records for b in batches])
        lengths = records["n_blocks"].astype(np.int64)
        ids = np.concatenate([b.block_ids for b in batches])
        if header.has_block_keys:
            keys = np.concatenate([b.block_keys for b in batches])
    else:
        records = empty_records(0)
        lengths = np.zeros(0, dtype=np.int64)
        ids = np.zeros(0, dtype=np.int64)
        if header.has_block_keys:
            keys = np.zeros(0, dtype=np.int64)
    del batches
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return TraceArrays(records, offsets, ids, None, list(header.type_names),
                       header.block_size_tokens, replica_names=list(header.replica_names),
                       block_keys=keys)


def load_trace(inputs: Sequence[str], *, block_id: str = "prefix", time_unit: str = "auto",
               allow_truncated: bool = False, block_size_tokens: int | None = None,
               progress: Callable[[int], None] | None = None, infer_sessions: bool = False,
               session_window: int = DEFAULT_SESSION_WINDOW) -> TraceArrays:
    """Load one JSONL trace or several lcp segments, joined, sorted and annotated (sessions
    from chains, or with ``infer_sessions`` from prefix continuation: :func:`annotate`)."""
    kinds = [input_kind(p) for p in inputs]
    if "recording" in kinds:
        return _load_recording(inputs, kinds, allow_truncated=allow_truncated,
                               block_size_tokens=block_size_tokens,
                               infer_sessions=infer_sessions, session_window=session_window)[0]
    if "jsonl" in kinds and len(inputs) > 1:
        raise ShadowError("several inputs must all be lcp segments of one recording; convert"
                          " JSONL inputs one at a time")
    if kinds[0] == "jsonl":
        trace = JsonlReader(inputs[0], block_id=block_id, time_unit=time_unit,
                            block_size_tokens=block_size_tokens, progress=progress).read()
    else:
        if block_id == "raw":
            raise ShadowError("--block-id raw applies to JSONL input only (lcp ids are already"
                              " prefix-interned)")
        parts = [load_lcp(p, allow_truncated=allow_truncated or str(p).endswith(".partial"))
                 for p in inputs]
        trace, fleet = join(parts, inputs)
        del parts
        if fleet and not infer_sessions:
            # NOTE: each replica numbered its sessions by its own positions (fleet.join)
            infer_sessions = True
        if block_size_tokens:
            trace.block_size_tokens = block_size_tokens
    return annotate(trace, infer_sessions=infer_sessions, session_window=session_window,
                    name=inputs[0] if len(inputs) == 1 else f"{inputs[0]} +{len(inputs) - 1}")


def _load_recording(inputs: Sequence[str], kinds: Sequence[str], **kw: Any):
    """A recording directory as a trace and its summary (refused beside other inputs)."""
    from shadow.trace.recording import load_recording

    if len(inputs) > 1:
        p = inputs[kinds.index("recording")]
        raise ShadowError(f"{p}: a recording directory is read on its own (shadow convert DIR"
                          f" OUT)")
    return load_recording(inputs[0], **kw)


def convert_file(inputs: str | Sequence[str], output: str, *, block_id: str = "prefix",
                 time_unit: str = "auto", allow_truncated: bool = False,
                 compress: bool | None = None, level: int = DEFAULT_LEVEL,
                 frame_bytes: int = DEFAULT_FRAME_BYTES, block_size_tokens: int | None = None,
                 progress: Callable[[int], None] | None = None, infer_sessions: bool = False,
                 session_window: int = DEFAULT_SESSION_WINDOW) -> dict[str, Any]:
    """Convert ``inputs`` to ``output``; returns a summary (counts of what was written).

    ``infer_sessions``: sessions, turns and parents from prefix continuation
    (:mod:`shadow.trace.sessions`, remembering ``session_window`` request ends); refused for a
    trace that already has sessions or parents.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [str(inputs)]
    inputs = [str(p) for p in inputs]
    if not inputs:
        raise ShadowError("no input trace")
    out_kind = output_kind(output)
    for p in inputs:
        if os.path.exists(output) and os.path.samefile(p, output):
            raise ShadowError(f"{output}: output is also an input")
    kinds = [input_kind(p) for p in inputs]
    check_writable(output)   # NOTE: before a long read: a missing or read-only directory now
    if out_kind == "jsonl" and len(inputs) == 1 and kinds[0] != "jsonl" and not infer_sessions:
        with LcpReader(inputs[0], allow_truncated=allow_truncated) as r:
            with atomic_path(output, parents=False) as tmp:
                n = write_jsonl(r, r.header, str(tmp))
            return {"output": output, "format": "jsonl", "n_requests": n,
                    "n_block_accesses": r.n_entries, "truncated": r.truncated}
    recording = None
    if "recording" in kinds:
        trace, recording = _load_recording(inputs, kinds, allow_truncated=allow_truncated,
                                           block_size_tokens=block_size_tokens,
                                           infer_sessions=infer_sessions,
                                           session_window=session_window)
    else:
        trace = load_trace(inputs, block_id=block_id, time_unit=time_unit,
                           allow_truncated=allow_truncated, block_size_tokens=block_size_tokens,
                           progress=progress, infer_sessions=infer_sessions,
                           session_window=session_window)
    src = os.path.basename(inputs[0]) + (f" +{len(inputs) - 1}" if len(inputs) > 1 else "")
    inferred = f", sessions inferred, window {session_window}" if infer_sessions else ""
    producer = f"shadow {__version__} convert {src} (block-id {block_id}{inferred})"
    if out_kind == "jsonl":
        header = header_for(trace, producer)
        # NOTE: write_jsonl renames its own <tmp>.partial to tmp; atomic_path commits tmp
        with atomic_path(output, parents=False) as tmp:
            write_jsonl(trace.batches(), header, str(tmp))
    else:
        header = write_lcp(trace, output, producer=producer,
                           compress=(out_kind == "lcp.zst") if compress is None else compress,
                           level=level, frame_bytes=frame_bytes)
    out = {"output": output, "format": out_kind, "n_requests": header.n_requests,
           "n_block_accesses": header.n_block_accesses,
           "n_unique_blocks": header.n_unique_blocks, "n_sessions": header.n_sessions,
           "n_users": header.n_users, "n_types": header.n_types,
           "max_blocks_per_request": header.max_blocks_per_request,
           "block_size_tokens": header.block_size_tokens,
           "replicas": list(header.replica_names)}
    if recording is not None:
        out["recording"] = recording
    return out
