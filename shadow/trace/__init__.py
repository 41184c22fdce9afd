"""The trace layer: the lcp format (reader, writer), JSONL ingestion, conversion, statistics.

See docs/lcp.md for the format and docs/design.md ("Trace API") for the contract.
"""

from __future__ import annotations

from pathlib import Path

from shadow.trace.api import JsonlTrace, open_trace
from shadow.trace.batch import Batch
from shadow.trace.convert import convert_file
from shadow.trace.header import LcpHeader
from shadow.trace.reader import LcpReader, read_header
from shadow.trace.stat import trace_stats
from shadow.trace.writer import LcpWriter


def bundled_trace_path() -> str:
    """Path of the bundled default trace (Mooncake synthetic, JSONL; see shadow/data/NOTICE.md)."""
    return str(Path(__file__).resolve().parent.parent / "data" / "mooncake_synthetic.jsonl")


__all__ = ["Batch", "JsonlTrace", "LcpHeader", "LcpReader", "LcpWriter", "bundled_trace_path",
           "convert_file", "open_trace", "read_header", "trace_stats"]
