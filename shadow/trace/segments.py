"""The live recording's segment format: file names, their order, and the request type table.

The connector's recorder (:mod:`shadow.connector.recorder`) writes a recording directory as a
series of zstd lcp segments; the readers (``replay``, ``shadow convert``/``stat``/``simulate``)
find and order them through this module, so neither side imports the other.

A segment's name says which engine and data-parallel rank wrote it and when it was opened::

    shadow-e<engine_id>-dp<rank>-<UTC yyyymmddThhmmssZ>-<seq:06d>.lcp.zst[.partial]

A segment being written carries :data:`PARTIAL_SUFFIX`; it is renamed to its final name (atomic
within the directory) once finished, so a finished segment is never half-written.
"""

from __future__ import annotations

import os
import re
import time

#: The final segment's extension (a zstd-compressed lcp file).
SEGMENT_SUFFIX = ".lcp.zst"
#: Appended to the name of the segment being written; removed by an atomic rename when finished.
PARTIAL_SUFFIX = ".partial"
#: The recording's request type of an admission that ended in a preemption (type_id 1): the
#: request was admitted again later, which is a record of its own (type_id 0).
PREEMPTED_TYPE = "preempted"
#: The segments' request type table (``type_names[k - 1]`` names ``type_id`` k).
TYPE_NAMES = (PREEMPTED_TYPE,)
#: A segment file name; groups ``engine``, ``rank``, ``ts``, ``seq`` and ``partial``.
SEGMENT_NAME_RE = re.compile(
    r"^shadow-e(?P<engine>[A-Za-z0-9_.-]+?)-dp(?P<rank>\d+)-(?P<ts>\d{8}T\d{6}Z)-"
    r"(?P<seq>\d{6})\.lcp\.zst(?P<partial>\.partial)?$")


def segment_prefix(engine_id: str, dp_rank: int) -> str:
    """The name prefix of one engine's (DP rank's) segments: ``shadow-e<engine>-dp<rank>``."""
    engine = re.sub(r"[^A-Za-z0-9_.]", "_", str(engine_id)) or "0"
    return f"shadow-e{engine}-dp{int(dp_rank)}"


def segment_name(prefix: str, opened_at_s: float, seq: int) -> str:
    """The final name of a segment opened at ``opened_at_s`` (Unix seconds), number ``seq``."""
    ts = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(opened_at_s))
    return f"{prefix}-{ts}-{int(seq):06d}{SEGMENT_SUFFIX}"


def segment_sort_key(name: str) -> tuple:
    """Order segment file names by engine, rank, start time and sequence number."""
    m = SEGMENT_NAME_RE.match(os.path.basename(name))
    if not m:
        return ("", 0, "", 0, name)
    return (m["engine"], int(m["rank"]), m["ts"], int(m["seq"]), name)


def list_segments(directory: str, *, include_partial: bool = True) -> list[str]:
    """The recording's segment paths in ``directory``, in time order per engine."""
    out = []
    for n in os.listdir(directory):
        m = SEGMENT_NAME_RE.match(n)
        if m and (include_partial or not m["partial"]):
            out.append(os.path.join(directory, n))
    return sorted(out, key=segment_sort_key)
