"""lcp byte layout (v1 and v2): constants, numpy dtypes, and the 8192-byte header.

See docs/lcp.md (which restates ../shared/spec/lcp.md and adds v2) for the field meanings.
Everything is little-endian and packed.  The dtypes below are the in-memory form the reader hands
to the simulator: a request record is one element of :data:`RECORD_DTYPE` (80 bytes, the v2 file
layout; a v1 file's 68-byte record is its first 68 bytes, the rest read as
:data:`V2_RECORD_DEFAULTS`), a block entry one element of :data:`ENTRY_DTYPE` (16 bytes).
"""

from __future__ import annotations

import numpy as np

MAGIC = b"LCPTRACE"
#: The versions this reader reads; a writer writes v1 unless the trace needs v2's additions.
VERSION_1 = 1
VERSION_2 = 2
VERSIONS = (VERSION_1, VERSION_2)
VERSION = VERSION_1
HEADER_SIZE = 8192
#: Bytes of a request record in a v1 file.
RECORD_SIZE = 68
#: Bytes of a request record in a v2 file (v1's, then ``arrival_time_us`` and ``replica_id``).
RECORD_SIZE_V2 = 80
#: Record bytes per version.
RECORD_SIZES = {VERSION_1: RECORD_SIZE, VERSION_2: RECORD_SIZE_V2}
ENTRY_SIZE = 16
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_TYPES = 64
TYPE_NAME_SIZE = 32
PRODUCER_SIZE = 256
#: v2: replica names in the header (``replica_id`` k >= 1 names ``replica_names[k - 1]``).
MAX_REPLICAS = 128
REPLICA_NAME_SIZE = 32

# header flags (offset 24, u64)
FLAG_HAS_NEXT_ACCESS = 1 << 0
FLAG_HAS_SESSION_NEXT = 1 << 1
FLAG_COUNTS_VALID = 1 << 2
FLAG_SORTED = 1 << 3
#: v2: the second field of every block entry is the block's key (a keyed 63-bit digest of what
#: vLLM's block hash covers, the same on every replica of a fleet), not a next-access delta.
FLAG_BLOCK_KEYS = 1 << 4
#: No real request has more blocks (a billion tokens at 16 tokens per block): a larger n_blocks,
#: or max_blocks_per_request, is damage, never a reason to allocate gigabytes.
MAX_PLAUSIBLE_BLOCKS = 1 << 26
#: Every flag lcp v1 defines; a reader refuses any other bit (damage, or a format it cannot read).
KNOWN_FLAGS = FLAG_HAS_NEXT_ACCESS | FLAG_HAS_SESSION_NEXT | FLAG_COUNTS_VALID | FLAG_SORTED
#: The flags of lcp v2: v1's and BLOCK_KEYS.
KNOWN_FLAGS_V2 = KNOWN_FLAGS | FLAG_BLOCK_KEYS

RECORD_DTYPE = np.dtype(
    [
        ("start_time_us", "<i8"),
        ("complete_time_us", "<i8"),
        ("chat_id", "<i8"),
        ("parent_chat_id", "<i8"),
        ("session_id", "<i8"),
        ("session_next_req", "<i8"),
        ("user_id", "<u4"),
        ("n_blocks", "<u4"),
        ("input_length", "<u4"),
        ("output_length", "<u4"),
        ("turn", "<u2"),
        ("type_id", "<u2"),
        ("arrival_time_us", "<i8"),
        ("replica_id", "<u4"),
    ],
    align=False,
)
assert RECORD_DTYPE.itemsize == RECORD_SIZE_V2
assert RECORD_DTYPE.fields["arrival_time_us"][1] == RECORD_SIZE
#: The v2 fields of a record read from a v1 file (or made without them): arrival unknown, no
#: replica.
V2_RECORD_DEFAULTS = {"arrival_time_us": -1, "replica_id": 0}
#: The fields that hold -1 for "unknown" or "none" (``empty_records`` sets them).
MINUS_ONE_FIELDS = ("start_time_us", "complete_time_us", "chat_id", "parent_chat_id",
                    "session_id", "session_next_req", "arrival_time_us")

ENTRY_DTYPE = np.dtype([("block_id", "<u8"), ("next_access_delta", "<i8")], align=False)
assert ENTRY_DTYPE.itemsize == ENTRY_SIZE

# header layout: (name, offset, numpy/struct type)
HEADER_FIELDS = (
    ("version", 8, "<u4"),
    ("header_size", 12, "<u4"),
    ("record_size", 16, "<u2"),
    ("entry_size", 18, "<u2"),
    ("block_size_tokens", 20, "<u4"),
    ("flags", 24, "<u8"),
    ("n_requests", 32, "<u8"),
    ("n_block_accesses", 40, "<u8"),
    ("n_unique_blocks", 48, "<u8"),
    ("max_blocks_per_request", 56, "<u8"),
    ("n_sessions", 64, "<u8"),
    ("n_users", 72, "<u8"),
    ("first_complete_time_us", 80, "<i8"),
    ("last_complete_time_us", 88, "<i8"),
    ("n_types", 96, "<u4"),
    ("reserved", 100, "<u4"),   # v2: n_replicas
)
TYPE_NAMES_OFFSET = 104
PRODUCER_OFFSET = 2152
ZERO_OFFSET = PRODUCER_OFFSET + PRODUCER_SIZE   # 2408: zero up to the end magic (v1)
#: v2: the replica name table sits where v1 keeps zeros; the rest stays zero.
REPLICA_NAMES_OFFSET = ZERO_OFFSET
ZERO_OFFSET_V2 = REPLICA_NAMES_OFFSET + MAX_REPLICAS * REPLICA_NAME_SIZE   # 6504
END_MAGIC_OFFSET = 8184

# -- zstd layout of this project's writer (docs/lcp.md "Writer conventions") -------------------
# The header is its own frame: one raw (stored) zstd block of HEADER_SIZE bytes, 10 + 8192 bytes:
# magic, descriptor 0x60 (single segment, 2-byte content size), content size - 256, then the
# block header (size << 3 | last).
HEADER_FRAME_PREFIX = (ZSTD_MAGIC + bytes([0x60]) + (HEADER_SIZE - 256).to_bytes(2, "little")
                       + ((HEADER_SIZE << 3) | 1).to_bytes(3, "little"))
HEADER_FRAME_SIZE = len(HEADER_FRAME_PREFIX) + HEADER_SIZE
# Each body frame is preceded by a zstd *skippable* frame (magic 0x184D2A5B, which every zstd
# decoder skips) holding this 48-byte frame index entry:
#   tag "LCPFRAME" | u64 compressed_size of the data frame that follows (0: still being written)
#   | u64 decompressed_size | u64 n_requests | u64 n_entries | u32 crc32 of the 40 bytes before
#   | u32 reserved (0)
FRAME_INDEX_MAGIC = (0x184D2A5B).to_bytes(4, "little")
FRAME_INDEX_TAG = b"LCPFRAME"
FRAME_INDEX_CONTENT = 48
FRAME_INDEX_SIZE = 8 + FRAME_INDEX_CONTENT


def empty_records(n: int) -> np.ndarray:
    """``n`` records with every field unset: -1 where -1 means unknown (:data:`MINUS_ONE_FIELDS`),
    0 elsewhere."""
    rec = np.zeros(n, dtype=RECORD_DTYPE)
    for f in MINUS_ONE_FIELDS:
        rec[f] = -1
    return rec
