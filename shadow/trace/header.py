"""The lcp header (8192 bytes, v1 and v2): parse, validate and build it.

:class:`LcpHeader` holds every header field as a Python value.  ``type_names[k - 1]`` is the name
of ``type_id == k`` (``type_id == 0`` is untyped), so ``len(type_names) == n_types``; in v2
``replica_names[k - 1]`` names ``replica_id == k`` the same way.
Invariant: :meth:`LcpHeader.pack` and :func:`parse_header` are inverses for every valid header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace

from shadow.errors import TraceFormatError
from shadow.trace.format import (
    END_MAGIC_OFFSET,
    ENTRY_SIZE,
    FLAG_BLOCK_KEYS,
    FLAG_COUNTS_VALID,
    FLAG_HAS_NEXT_ACCESS,
    FLAG_HAS_SESSION_NEXT,
    FLAG_SORTED,
    HEADER_FIELDS,
    HEADER_SIZE,
    KNOWN_FLAGS,
    KNOWN_FLAGS_V2,
    MAGIC,
    MAX_PLAUSIBLE_BLOCKS,
    MAX_REPLICAS,
    MAX_TYPES,
    PRODUCER_OFFSET,
    PRODUCER_SIZE,
    RECORD_SIZE,
    RECORD_SIZES,
    REPLICA_NAME_SIZE,
    REPLICA_NAMES_OFFSET,
    TYPE_NAME_SIZE,
    TYPE_NAMES_OFFSET,
    VERSION,
    VERSION_2,
    VERSIONS,
    ZERO_OFFSET,
        ZSTD_MAGIC,
)

_STRUCT_CODES = {"<u2": "H", "<u4": "I", "<u8": "Q", "<i8": "q"}
# NOTE: the numeric fields are contiguous from offset 8 to 104, so one struct covers them.
_NUMERIC = struct.Struct("<" + "".join(_STRUCT_CODES[t] for _, _, t in HEADER_FIELDS))
assert _NUMERIC.size == TYPE_NAMES_OFFSET - 8


@dataclass
class LcpHeader:
    """Every field of an lcp header; counts are meaningful only when ``counts_valid``.

    ``replica_names`` (v2 only; v1 has none) names the replicas a fleet's records went to.
    """

    block_size_tokens: int = 0
    flags: int = 0
    n_requests: int = 0
    n_block_accesses: int = 0
    n_unique_blocks: int = 0
    max_blocks_per_request: int = 0
    n_sessions: int = 0
    n_users: int = 0
    first_complete_time_us: int = 0
    last_complete_time_us: int = 0
    type_names: list[str] = field(default_factory=list)
    producer: str = ""
    version: int = VERSION
    header_size: int = HEADER_SIZE
    entry_size: int = ENTRY_SIZE
    reserved: int = 0
    replica_names: list[str] = field(default_factory=list)

    @property
    def n_types(self) -> int:
        return len(self.type_names)

    @property
    def n_replicas(self) -> int:
        return len(self.replica_names)

    @property
    def has_block_keys(self) -> bool:
        return bool(self.flags & FLAG_BLOCK_KEYS)

    @property
    def has_next_access(self) -> bool:
        return bool(self.flags & FLAG_HAS_NEXT_ACCESS)

    @property
    def has_session_next(self) -> bool:
        return bool(self.flags & FLAG_HAS_SESSION_NEXT)

    @property
    def counts_valid(self) -> bool:
        return bool(self.flags & FLAG_COUNTS_VALID)

    @property
    def is_sorted(self) -> bool:
        return bool(self.flags & FLAG_SORTED)

    def type_name(self, type_id: int) -> str:
        """The name of a record's ``type_id`` ("" for 0, untyped, or an id past the table)."""
        if 1 <= type_id <= len(self.type_names):
            return self.type_names[type_id - 1]
        return ""

    def replica_name(self, replica_id: int) -> str:
        """The name of a record's ``replica_id`` ("" for 0, none, or an id past the table)."""
        if 1 <= replica_id <= len(self.replica_names):
            return self.replica_names[replica_id - 1]
        return ""

    @property
    def record_size(self) -> int:
        """Bytes of one request record in the file (68 in v1, 80 in v2)."""
        return RECORD_SIZES.get(self.version, RECORD_SIZE)

    def copy(self, **changes) -> "LcpHeader":
        return replace(self, type_names=list(self.type_names),
                       replica_names=list(self.replica_names), **changes)

    def pack(self) -> bytes:
        """The 8192 header bytes.  Raises :class:`ValueError` for a table that does not fit, or
        v2 content (replica names, block keys) in a v1 header."""
        if len(self.type_names) > MAX_TYPES:
            raise ValueError(f"{len(self.type_names)} request types; lcp holds at most {MAX_TYPES}")
        v2 = self.version == VERSION_2
        if not v2 and (self.replica_names or self.has_block_keys):
            raise ValueError("replica names and block keys need lcp v2")
        if len(self.replica_names) > MAX_REPLICAS:
            raise ValueError(f"{len(self.replica_names)} replicas; lcp holds at most"
                             f" {MAX_REPLICAS}")
        if self.has_block_keys and self.has_next_access:
            raise ValueError("an lcp file has block keys or next accesses, not both")
        buf = bytearray(HEADER_SIZE)
        buf[0:8] = MAGIC
        values = {
            "version": self.version, "header_size": self.header_size,
            "record_size": self.record_size, "entry_size": self.entry_size,
            "block_size_tokens": self.block_size_tokens, "flags": self.flags,
            "n_requests": self.n_requests, "n_block_accesses": self.n_block_accesses,
            "n_unique_blocks": self.n_unique_blocks,
            "max_blocks_per_request": self.max_blocks_per_request,
            "n_sessions": self.n_sessions, "n_users": self.n_users,
            "first_complete_time_us": self.first_complete_time_us,
            "last_complete_time_us": self.last_complete_time_us,
            "n_types": len(self.type_names),
            "reserved": len(self.replica_names) if v2 else self.reserved,
        }
        _NUMERIC.pack_into(buf, 8, *(values[name] for name, _, _ in HEADER_FIELDS))
        for i, name in enumerate(self.type_names):
            raw = name.encode("utf-8")
            if len(raw) > TYPE_NAME_SIZE:
                raise ValueError(f"request type name {name!r} is longer than {TYPE_NAME_SIZE} bytes")
            off = TYPE_NAMES_OFFSET + i * TYPE_NAME_SIZE
            buf[off:off + len(raw)] = raw
        for i, name in enumerate(self.replica_names):
            raw = name.encode("utf-8")
            if not raw or len(raw) > REPLICA_NAME_SIZE or b"\0" in raw:
                raise ValueError(f"replica name {name!r}: 1 to {REPLICA_NAME_SIZE} bytes of"
                                 " UTF-8 without NUL")
            off = REPLICA_NAMES_OFFSET + i * REPLICA_NAME_SIZE
            buf[off:off + len(raw)] = raw
        prod = self.producer.encode("utf-8")[:PRODUCER_SIZE]
        buf[PRODUCER_OFFSET:PRODUCER_OFFSET + len(prod)] = prod
        buf[END_MAGIC_OFFSET:END_MAGIC_OFFSET + 8] = MAGIC
        return bytes(buf)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _type_name(raw: bytes, name: str, offset: int, k: int, what: str = "request type") -> str:
    """Type (or replica) name ``k`` (1-based id) from its 32-byte slot at file ``offset``: strict
    UTF-8, NUL-padded (nothing but NULs after the first NUL)."""
    text, nul, pad = raw.partition(b"\0")
    if nul and pad.strip(b"\0"):
        raise TraceFormatError(f"{name}: byte offset {offset + len(text) + 1}: corrupt lcp header:"
                               f" {what} name {k} has bytes after its NUL padding",
                               byte_offset=offset + len(text) + 1)
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{name}: byte offset {offset + exc.start}: corrupt lcp header:"
                               f" {what} name {k} is not UTF-8 ({text!r})",
                               byte_offset=offset + exc.start) from None


def parse_header(buf: bytes, name: str = "<trace>") -> LcpHeader:
    """Parse and validate 8192 header bytes; a wrong magic/version/size raises TraceFormatError."""
    if len(buf) < HEADER_SIZE:
        if len(buf) == 0:
            raise TraceFormatError(f"{name}: empty trace (no lcp header)", n_complete_requests=0,
                                   byte_offset=0)
        if buf[:8] != MAGIC[:len(buf[:8])]:
            raise TraceFormatError(f"{name}: not an lcp trace (bad magic {bytes(buf[:8])!r})",
                                   byte_offset=0)
        raise TraceFormatError(
            f"{name}: byte offset {len(buf)}: truncated lcp header ({len(buf)} of {HEADER_SIZE} bytes),"
            f" 0 complete requests read", n_complete_requests=0, byte_offset=len(buf))
    if buf[0:8] != MAGIC:
        raise TraceFormatError(f"{name}: not an lcp trace (bad magic {bytes(buf[:8])!r})",
                               byte_offset=0)
    vals = dict(zip((n for n, _, _ in HEADER_FIELDS), _NUMERIC.unpack_from(buf, 8)))
    version = vals["version"]
    if version not in VERSIONS:
        raise TraceFormatError(f"{name}: unsupported lcp version {version} (this reader reads"
                               f" versions {', '.join(map(str, VERSIONS))})", byte_offset=8)
    v2 = version == VERSION_2
    for key, want, off in (("header_size", HEADER_SIZE, 12),
                           ("record_size", RECORD_SIZES[version], 16),
                           ("entry_size", ENTRY_SIZE, 18)):
        if vals[key] != want:
            raise TraceFormatError(f"{name}: bad lcp {key.replace('_', ' ')} {vals[key]}"
                                   f" (lcp v{version} has {want})", byte_offset=off)
    del vals["record_size"]
    if buf[END_MAGIC_OFFSET:END_MAGIC_OFFSET + 8] != MAGIC:
        raise TraceFormatError(f"{name}: byte offset {END_MAGIC_OFFSET}: bad lcp header end magic"
                               " (corrupt header)", byte_offset=END_MAGIC_OFFSET)
    n_types = vals.pop("n_types")
    if n_types > MAX_TYPES:
        raise TraceFormatError(f"{name}: byte offset 96: {n_types} request types (at most"
                               f" {MAX_TYPES})", byte_offset=96)
    unknown = vals["flags"] & ~(KNOWN_FLAGS_V2 if v2 else KNOWN_FLAGS)
    if unknown:
        raise TraceFormatError(f"{name}: byte offset 24: corrupt lcp header: unknown flag bits"
                               f" {unknown:#x} (lcp v{version} defines bits"
                               f" 0-{4 if v2 else 3})", byte_offset=24)
    if vals["flags"] & FLAG_BLOCK_KEYS and vals["flags"] & FLAG_HAS_NEXT_ACCESS:
        raise TraceFormatError(f"{name}: byte offset 24: corrupt lcp header: BLOCK_KEYS and"
                               " HAS_NEXT_ACCESS both set (the entries hold one or the other)",
                               byte_offset=24)
    n_replicas = vals.pop("reserved") if v2 else 0
    if n_replicas > MAX_REPLICAS:
        raise TraceFormatError(f"{name}: byte offset 100: {n_replicas} replicas (at most"
                               f" {MAX_REPLICAS})", byte_offset=100)
    _check_counts(vals, name)
    zero_from = (REPLICA_NAMES_OFFSET + n_replicas * REPLICA_NAME_SIZE) if v2 else ZERO_OFFSET
    zero = buf[zero_from:END_MAGIC_OFFSET]
    if zero.count(0) != len(zero):
        at = zero_from + next(i for i, c in enumerate(zero) if c)
        raise TraceFormatError(f"{name}: byte offset {at}: corrupt lcp header: nonzero byte in"
                               f" the area that lcp v{version} keeps zero", byte_offset=at)
    type_names = []
    for i in range(n_types):
        off = TYPE_NAMES_OFFSET + i * TYPE_NAME_SIZE
        type_names.append(_type_name(bytes(buf[off:off + TYPE_NAME_SIZE]), name, off, i + 1))
    replica_names = []
    for i in range(n_replicas):
        off = REPLICA_NAMES_OFFSET + i * REPLICA_NAME_SIZE
        replica_names.append(_type_name(bytes(buf[off:off + REPLICA_NAME_SIZE]), name, off,
                                        i + 1, "replica"))
    # NOTE: the producer is informational and a writer may cut it inside a UTF-8 sequence (this
    # one cuts at 256 bytes), so it is decoded leniently.
    producer = _cstr(buf[PRODUCER_OFFSET:PRODUCER_OFFSET + PRODUCER_SIZE])
    return LcpHeader(type_names=type_names, producer=producer, replica_names=replica_names,
                     **vals)


def _check_counts(vals: dict[str, int], name: str) -> None:
    """With COUNTS_VALID, the counts must agree with each other (a damaged plain header).

    NOTE: ``n_unique_blocks`` (the largest id) may exceed ``n_block_accesses``: a recorder
    segment continues the id space of the segments before it.
    """
    if not vals["flags"] & FLAG_COUNTS_VALID:
        return
    # NOTE: counts no file can have, refused before any reader or simulator sizes memory by them
    for key, off, top, why in (
            ("n_requests", 32, (1 << 63) // 68, "more requests than any file holds"),
            ("n_block_accesses", 40, (1 << 63) // 16, "more entries than any file holds"),
            ("n_unique_blocks", 48, (1 << 63) - 1, "past the largest block id, 2**63 - 1"),
            ("max_blocks_per_request", 56, MAX_PLAUSIBLE_BLOCKS,
             f"more than {MAX_PLAUSIBLE_BLOCKS} blocks, which no real request has"),
            ("n_users", 72, (1 << 32) - 1, "past the largest user id, 2**32 - 1")):
        if vals[key] > top:
            raise TraceFormatError(f"{name}: byte offset {off}: corrupt lcp header: {key}"
                                   f" {vals[key]} is {why}", byte_offset=off)
    for key, off, limit_key in (("max_blocks_per_request", 56, "n_block_accesses"),
                                ("n_sessions", 64, "n_requests")):
        if vals[key] > vals[limit_key]:
            raise TraceFormatError(f"{name}: byte offset {off}: corrupt lcp header: {key}"
                                   f" {vals[key]} is more than {limit_key} {vals[limit_key]}",
                                   byte_offset=off)
    first, last = vals["first_complete_time_us"], vals["last_complete_time_us"]
    if last < first:
        raise TraceFormatError(f"{name}: byte offset 88: corrupt lcp header:"
                               f" last_complete_time_us {last} is before first_complete_time_us"
                               f" {first}", byte_offset=88)


def sniff(path: str) -> str:
    """Tell a file's format by its first bytes: ``"lcp"``, ``"lcp.zst"``, ``"jsonl"`` or ``"empty"``.

    Anything else is reported as ``"unknown"``; the caller raises the error it wants.
    """
    with open(path, "rb") as f:
        head = f.read(64)
    if not head:
        return "empty"
    if head[:4] == ZSTD_MAGIC:
        return "lcp.zst"
    if head[:8] == MAGIC[:len(head[:8])] and len(head) >= 1:
        return "lcp"
    stripped = head.lstrip()
    if stripped[:1] == b"{" or (not stripped and len(head) > 0):
        return "jsonl"
    return "unknown"
