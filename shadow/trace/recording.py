"""A recording directory read as one trace: every segment, in order, across restarts.

The connector's recorder writes a directory of segments (:mod:`shadow.trace.segments`: streams
of one engine and DP rank, runs of one writer process).  :func:`load_recording` joins them the
way ``shadow convert SEG... OUT`` joins segments, with what a directory adds:

* **Order**: by engine, DP rank, start time and sequence number (:func:`segment_sort_key`); a
  ``.partial`` segment comes last in its run and is read up to its last complete request.  The
  joined trace is then sorted by completion time and annotated like any converted trace
  (:func:`shadow.trace.annotate.annotate`).
* **Block ids**: segments with block keys (the connector's lcp v2) are joined by their keys,
  as ``shadow convert`` joins any segments (:func:`shadow.trace.fleet.join`): one key, one id,
  whichever run wrote it (a recorder without a ``fleet_key`` keys privately, so its runs share
  no block).  Without keys each run is its own id space (a restarted recorder interns from 1
  again), so each run's ids are moved past every earlier run's.
* **Replicas**: the segments' replica names are united; streams of several replicas (DP ranks,
  engines) make a fleet trace, whose sessions are inferred again over the whole.  Two engine
  streams under one replica name whose requests overlap in time (two servers on one host with
  the default name, the host's) are two replicas: the later stream's name becomes
  ``<name>@<engine>`` (:func:`_part_streams`), where ``shadow convert A B`` of two recordings
  refuses the same overlap as a name clash.
* **Requests and sessions**: a run whose chat ids begin above every chat id read so far
  continues the numbering, and its records keep their ``chat_id``, ``parent_chat_id`` and
  ``session_id``; a run that numbers from 1 again (a restarted recorder) has all three moved
  past the ids read so far, so its requests and sessions stay its own.
* **Open and torn**: a ``.partial`` whose stream a live process writes is the open segment (its
  complete prefix read without a warning); one whose writer is gone is a torn tail (its complete
  prefix read, one warning from the reader, counted).

:class:`RecordingSummary` counts what was read: segments, streams, runs, restarts, torn tails;
:meth:`RecordingSummary.line` is the one line the commands print.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import asdict, dataclass
import numpy as np

from shadow.errors import ShadowError
from shadow.trace.annotate import TraceArrays, annotate
from shadow.trace.api import InMemoryTrace
from shadow.trace.fleet import join
from shadow.trace.format import REPLICA_NAME_SIZE
from shadow.trace.reader import DEFAULT_BATCH_ENTRIES, LcpReader
from shadow.trace.segments import (SEGMENT_SUFFIX, quiet_truncation, scan_segments, split_runs,
                                   stream_is_live)
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW

logger = logging.getLogger(__name__)

#: The id fields a restarted run's records move past the earlier runs' (chat ids and what names
#: them).
CHAT_FIELDS = ("chat_id", "parent_chat_id", "session_id")


@dataclass(frozen=True)
class RecordingSummary:
    """What :func:`load_recording` read from a directory."""

    directory: str
    segments: int
    streams: int
    runs: int
    torn_tails: int
    open_segments: int
    requests: int

    @property
    def restarts(self) -> int:
        """Runs after each stream's first: the writer was restarted this many times."""
        return self.runs - self.streams

    def line(self) -> str:
        """``DIR: 12 segments of 2 engine/rank streams, 3 restarts, 1 torn tail, 1,234
        requests``."""
        def n(k: int, word: str) -> str:
            return f"{k:,} {word}{'' if k == 1 else 's'}"

        parts = [f"{n(self.segments, 'segment')} of {n(self.streams, 'engine/rank stream')}",
                 n(self.restarts, "restart"), n(self.torn_tails, "torn tail")]
        if self.open_segments:
            parts.append(f"{self.open_segments:,} open (read to its last flush)")
        parts.append(n(self.requests, "request"))
        return f"{self.directory}: " + ", ".join(parts)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["restarts"] = self.restarts
        return d


def is_recording(path: str) -> bool:
    """Whether ``path`` is a directory holding recording segments."""
    return os.path.isdir(path) and bool(scan_segments(path))


def _read_segment(path: str, *, allow_truncated: bool, quiet: bool) -> tuple[TraceArrays, bool]:
    """One segment in memory, ids as stored (block keys and replica names kept);
    ``(arrays, truncated)``."""
    from shadow.trace.convert import read_arrays

    ctx = quiet_truncation() if quiet else contextlib.nullcontext()
    with ctx, LcpReader(path, allow_truncated=allow_truncated) as r:
        return read_arrays(r), r.truncated


def _shift_chats(rec: np.ndarray, by: int) -> None:
    for f in CHAT_FIELDS:
        col = rec[f]
        col[col >= 0] += by


def load_recording(directory: str, *, allow_truncated: bool = False,
                   block_size_tokens: int | None = None, infer_sessions: bool = False,
                   session_window: int = DEFAULT_SESSION_WINDOW
                   ) -> tuple[TraceArrays, RecordingSummary]:
    """Read every segment of recording ``directory`` into one annotated trace (module
    docstring); ``(trace, summary)``.  A damaged finished segment is an error unless
    ``allow_truncated`` (then its complete prefix is read, with a warning)."""
    directory = str(directory)
    segs = scan_segments(directory)
    if not segs:
        raise ShadowError(f"{directory}: no recording segments (shadow-e<engine>-dp<rank>-*"
                          f"{SEGMENT_SUFFIX}) in this directory")
    live = {p for p in {s.prefix for s in segs if s.partial} if stream_is_live(directory, p)}
    runs = split_runs(segs)
    parts: list[TraceArrays] = []
    names: list[str] = []
    streams: list[str] = []   # each part's engine (stream) name
    id_base = 0       # block ids of earlier runs end here
    chat_top = 0      # the largest chat id read so far
    torn = n_open = 0
    for run in runs:
        run_parts = []
        # NOTE: a run is one stream's segments in time order: its newest .partial is its last
        newest_partial = next((s for s in reversed(run) if s.partial), None)
        for s in run:
            is_open = s.partial and s.prefix in live and s is newest_partial
            part, truncated = _read_segment(s.path, allow_truncated=allow_truncated or s.partial,
                                            quiet=is_open)
            n_open += is_open
            torn += truncated and not is_open
            run_parts.append(part)
            names.append(s.path)
            streams.append(s.engine)
        # NOTE: one id space per run: moved past every earlier run's ids (segments with block
        # keys are joined by their keys instead, below)
        top = 0
        for part in run_parts:
            if part.n_entries:
                top = max(top, int(part.block_ids.max()))
                part.block_ids += id_base
        id_base += top
        chats = [p.records["chat_id"] for p in run_parts if p.n_requests]
        if chats:
            lo = min(int(c[c >= 0].min()) if (c >= 0).any() else 0 for c in chats)
            if 0 < lo <= chat_top:   # NOTE: the run numbers from 1 again: a restarted recorder
                for part in run_parts:
                    _shift_chats(part.records, chat_top)
            chat_top = max([chat_top] + [int(p.records["chat_id"].max()) for p in run_parts
                                         if p.n_requests])
        parts.extend(run_parts)
    _part_streams(parts, streams)
    # NOTE: block sizes, type tables, replica names and block keys as any segments' join
    # (shadow.trace.fleet): streams of different replicas make a fleet, whose sessions are
    # inferred again over the whole
    trace, fleet = join(parts, names)
    del parts
    if block_size_tokens:
        trace.block_size_tokens = block_size_tokens
    summary = RecordingSummary(directory, len(segs), len({s.prefix for s in segs}), len(runs),
                               torn, n_open, trace.n_requests)
    annotate(trace, infer_sessions=infer_sessions or fleet, session_window=session_window,
             name=directory)
    return trace, summary


def _spans(parts: list[TraceArrays], streams: list[str]) -> dict[tuple[str, str], tuple[int, int]]:
    """``(engine stream, replica name) -> (first, last completion time)`` over the parts."""
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for p, eng in zip(parts, streams):
        if not p.replica_names or not p.n_requests:
            continue
        rid = p.records["replica_id"]
        ct = p.records["complete_time_us"]
        for k, name in enumerate(p.replica_names, 1):
            t = ct[(rid == k) & (ct >= 0)]
            if t.shape[0]:
                lo, hi = spans.get((eng, name), (int(t.min()), int(t.max())))
                spans[(eng, name)] = (min(lo, int(t.min())), max(hi, int(t.max())))
    return spans


def _part_streams(parts: list[TraceArrays], streams: list[str]) -> None:
    """Rename a replica name that two engine streams of the directory use at overlapping times:
    every stream but the first (in the directory's order) to ``<name>@<engine>``."""
    spans = _spans(parts, streams)
    rename: dict[tuple[str, str], str] = {}
    by_name: dict[str, list[tuple[str, tuple[int, int]]]] = {}
    for (eng, name), span in spans.items():
        by_name.setdefault(name, []).append((eng, span))
    for name, uses in by_name.items():
        kept = [uses[0][1]]
        for eng, (lo, hi) in uses[1:]:
            if any(lo <= b and a <= hi for a, b in kept):
                new = f"{name}@{eng}"
                if len(new.encode()) > REPLICA_NAME_SIZE:
                    new = new.encode()[-REPLICA_NAME_SIZE:].decode(errors="ignore")
                rename[(eng, name)] = new
                logger.info("%s and %s write replica %r at the same time: the second reads as %r",
                            uses[0][0], eng, name, new)
            else:
                kept.append((lo, hi))
    if rename:
        for p, eng in zip(parts, streams):
            p.replica_names = [rename.get((eng, n), n) for n in p.replica_names]


class RecordingTrace(InMemoryTrace):
    """A recording directory read in memory (:func:`load_recording`), served as batches, as
    :func:`shadow.trace.open_trace` serves a JSONL trace; ``summary`` says what was read."""

    def __init__(self, directory: str, *, allow_truncated: bool = False,
                 batch_entries: int = DEFAULT_BATCH_ENTRIES) -> None:
        from shadow.trace.convert import header_for

        self.path = str(directory)
        self.trace, self.summary = load_recording(self.path, allow_truncated=allow_truncated)
        self.header = header_for(self.trace, f"shadow (in memory from recording {self.path})")
        self.batch_entries = batch_entries
        self.truncated = self.summary.torn_tails > 0
