"""``open_trace``: one entry point for lcp, lcp.zst and JSONL traces (told apart by content)."""

from __future__ import annotations

from typing import Any, Iterator

from shadow.errors import ShadowError
from shadow.trace.annotate import TraceArrays
from shadow.trace.batch import Batch
from shadow.trace.convert import header_for, input_kind, load_trace
from shadow.trace.header import LcpHeader
from shadow.trace.reader import DEFAULT_BATCH_ENTRIES, LcpReader


class InMemoryTrace:
    """A trace held in memory as :class:`TraceArrays`, served as batches (the reader's
    interface: ``header``, iteration, ``truncated``, a context manager)."""

    path: str
    trace: TraceArrays
    header: LcpHeader
    batch_entries: int = DEFAULT_BATCH_ENTRIES
    truncated: bool = False

    def __iter__(self) -> Iterator[Batch]:
        return self.trace.batches(self.batch_entries)

    def __enter__(self) -> "InMemoryTrace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        pass


class JsonlTrace(InMemoryTrace):
    """A JSONL trace converted in memory (interned, sorted, annotated), served as batches."""

    def __init__(self, path: str, *, block_id: str = "prefix", time_unit: str = "auto",
                 batch_entries: int = DEFAULT_BATCH_ENTRIES) -> None:
        self.path = str(path)
        self.trace = load_trace([self.path], block_id=block_id, time_unit=time_unit)
        self.header = header_for(self.trace, f"shadow (in memory from {self.path},"
                                             f" block-id {block_id})")
        self.batch_entries = batch_entries
        self.truncated = False


def open_trace(path: str, allow_truncated: bool = False, block_id: str = "prefix", *,
               time_unit: str = "auto",
               batch_entries: int = DEFAULT_BATCH_ENTRIES,
               decode_threads: int | None = None) -> Any:
    """Open a trace for reading; iterate it for :class:`Batch` objects; ``.header`` describes it.

    lcp input streams in constant memory; JSONL input is converted in memory first, and so is
    a recording directory (:class:`shadow.trace.recording.RecordingTrace`, with ``.summary``).
    ``block_id="raw"`` applies to JSONL only.  ``decode_threads``: see :class:`LcpReader` (lcp
    input only).
    """
    kind = input_kind(str(path))
    if kind == "recording":
        from shadow.trace.recording import RecordingTrace

        return RecordingTrace(str(path), allow_truncated=allow_truncated,
                              batch_entries=batch_entries)
    if kind == "jsonl":
        return JsonlTrace(path, block_id=block_id, time_unit=time_unit,
                          batch_entries=batch_entries)
    if block_id != "prefix":
        raise ShadowError("--block-id raw applies to JSONL input only (lcp ids are already"
                          " prefix-interned)")
    return LcpReader(str(path), allow_truncated=allow_truncated, batch_entries=batch_entries,
                     decode_threads=decode_threads)
