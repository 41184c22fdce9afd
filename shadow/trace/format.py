"""lcp v1 byte layout: constants, numpy dtypes, and the 8192-byte header.

See docs/lcp.md (which restates ../shared/spec/lcp.md) for the field meanings.  Everything is
little-endian and packed.  The dtypes below are the in-memory form the reader hands to the
simulator: a request record is one element of :data:`RECORD_DTYPE` (68 bytes, the exact file
layout), a block entry one element of :data:`ENTRY_DTYPE` (16 bytes).
"""

from __future__ import annotations

import numpy as np

MAGIC = b"LCPTRACE"
VERSION = 1
HEADER_SIZE = 8192
RECORD_SIZE = 68
ENTRY_SIZE = 16
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_TYPES = 64
TYPE_NAME_SIZE = 32
PRODUCER_SIZE = 256

# header flags (offset 24, u64)
FLAG_HAS_NEXT_ACCESS = 1 << 0
FLAG_HAS_SESSION_NEXT = 1 << 1
FLAG_COUNTS_VALID = 1 << 2
FLAG_SORTED = 1 << 3
#: No real request has more blocks (a billion tokens at 16 tokens per block): a larger n_blocks,
#: or max_blocks_per_request, is damage, never a reason to allocate gigabytes.
MAX_PLAUSIBLE_BLOCKS = 1 << 26
#: Every flag lcp v1 defines; a reader refuses any other bit (damage, or a format it cannot read).
KNOWN_FLAGS = FLAG_HAS_NEXT_ACCESS | FLAG_HAS_SESSION_NEXT | FLAG_COUNTS_VALID | FLAG_SORTED

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
    ],
    align=False,
)
assert RECORD_DTYPE.itemsize == RECORD_SIZE

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
    ("reserved", 100, "<u4"),
)
TYPE_NAMES_OFFSET = 104
PRODUCER_OFFSET = 2152
ZERO_OFFSET = PRODUCER_OFFSET + PRODUCER_SIZE   # 2408: zero up to the end magic
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
