"""The frame index of a multi-frame ``.lcp.zst``: one 56-byte skippable zstd frame per body frame.

This writer cuts the zstd body into independent frames of a few MiB of decompressed payload, each
holding whole requests, and puts a *skippable* frame (which every zstd decoder ignores) in front
of each, so a reader can find every data frame by hopping over the file without decoding, and
decode several at once.  Layout of one index entry (docs/lcp.md, "Frame index"):

    u32 0x184D2A5B (skippable magic) | u32 48 (content size) | 8 B "LCPFRAME"
    | u64 compressed_size | u64 decompressed_size | u64 n_requests | u64 n_entries
    | u32 crc32 of the 40 bytes from the tag | u32 0

Invariant: ``decompressed_size == R * n_requests + 16 * n_entries`` (R the file's record size: 68
in lcp v1, 80 in v2); ``compressed_size == 0``
marks the frame a writer had open when it stopped (crash): such a frame is read by the ordinary
streaming decoder.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from shadow.trace.format import (
    ENTRY_SIZE,
    FRAME_INDEX_CONTENT,
    FRAME_INDEX_MAGIC,
    FRAME_INDEX_SIZE,
    FRAME_INDEX_TAG,
    RECORD_SIZE,
)

_ENTRY = struct.Struct("<4sI8sQQQQII")
assert _ENTRY.size == FRAME_INDEX_SIZE


class FrameIndexError(Exception):
    """A frame index entry that is ours (tag) but damaged; ``what`` says how."""


class FrameEntry(NamedTuple):
    compressed_size: int     # bytes of the data frame after this entry (0: frame left open)
    decompressed_size: int   # payload bytes: whole requests
    n_requests: int
    n_entries: int


def pack_entry(e: FrameEntry) -> bytes:
    body = struct.pack("<8sQQQQ", FRAME_INDEX_TAG, e.compressed_size, e.decompressed_size,
                       e.n_requests, e.n_entries)
    return _ENTRY.pack(FRAME_INDEX_MAGIC, FRAME_INDEX_CONTENT, FRAME_INDEX_TAG,
                       e.compressed_size, e.decompressed_size, e.n_requests, e.n_entries,
                       zlib.crc32(body), 0)


def parse_entry(raw: bytes, record_size: int = RECORD_SIZE) -> FrameEntry | None:
    """The entry in ``raw`` (FRAME_INDEX_SIZE bytes), or None when ``raw`` is not one of ours
    (another frame, a short read at the end of the file).  Raise :class:`FrameIndexError` when
    it is ours but fails its checksum or its size invariant (records of ``record_size``
    bytes)."""
    if len(raw) < FRAME_INDEX_SIZE or raw[:4] != FRAME_INDEX_MAGIC:
        return None
    magic, size, tag, csize, dsize, nreq, nent, crc, _ = _ENTRY.unpack(raw[:FRAME_INDEX_SIZE])
    if size != FRAME_INDEX_CONTENT or tag != FRAME_INDEX_TAG:
        return None
    if zlib.crc32(raw[8:48]) != crc:
        raise FrameIndexError("checksum mismatch")
    if dsize != record_size * nreq + ENTRY_SIZE * nent:
        raise FrameIndexError(f"decompressed size {dsize} is not {record_size} x {nreq} requests"
                              f" + 16 x {nent} entries")
    return FrameEntry(csize, dsize, nreq, nent)
