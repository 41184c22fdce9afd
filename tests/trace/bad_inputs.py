"""Bad inputs shared by the bad-input tables of `shadow convert`, `shadow stat` and `shadow
simulate`: damaged lcp traces (made from one small valid plain `.lcp` by changing bytes) and
hostile JSONL lines, each with the words its one-line error must hold.

Invariant: every case is refused by every command that reads it, with exit status 2 and one
line ``shadow: error: ...`` naming the file and the place (``file:line`` for JSONL, ``byte
offset`` and ``request index`` for lcp), no traceback and no warning, and nothing written.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import zstandard

from shadow.trace.format import VERSIONS

REPO = Path(__file__).resolve().parents[2]
HEADER = 8192
RECORD = 68
ENTRY = 16
# header offsets (docs/lcp.md)
FLAGS, N_REQUESTS, N_ACCESSES, MAX_BLOCKS, N_SESSIONS, T_FIRST, T_LAST, N_TYPES = (
    24, 32, 40, 56, 64, 80, 88, 96)
# record offsets
START, COMPLETE, SESSION_NEXT, USER, N_BLOCKS, TYPE_ID = 0, 8, 40, 48, 52, 66


def shadow(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m shadow ARGS`` (the installed entry point's code) and capture its output."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                          errors="replace", cwd=cwd or REPO, env=env, timeout=120)


def assert_refused(r: subprocess.CompletedProcess, fragments: list[str]) -> None:
    """Exit 2, one stderr line ``shadow: error: ...`` holding every fragment, nothing else."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr


def ids(cases: list) -> list[str]:
    """Test ids of a table: each row's name."""
    return [c[0] for c in cases]


def listing(d: Path) -> list[str]:
    """Every path under ``d``, relative, sorted (to tell that a refused command wrote nothing)."""
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


# -- the valid base trace ------------------------------------------------------------------------
def base_rows() -> list[dict]:
    """Twelve requests with every field set: sessions, users, two types, chats, shared blocks."""
    rows = []
    for i in range(12):
        ids = [1, 2] + [10 * i + k for k in range(1, 1 + i % 4)]
        rows.append({"timestamp": 10.0 + i, "timestamp_arrival": 9.5 + i, "session_id": i % 3,
                     "user_id": f"u{i % 4}", "type": ("text", "image")[i % 2], "chat_id": i,
                     "parent_chat_id": i - 3 if i >= 3 else -1, "turn": 1 + i // 3,
                     "input_length": 16 * len(ids), "output_length": 5, "hash_ids": ids})
    return rows


@dataclass
class Base:
    """The valid plain trace: its bytes, header fields and the file offset of every record."""

    data: bytes
    offsets: list[int]
    n_blocks: list[int]

    def u64(self, off: int) -> int:
        return struct.unpack_from("<Q", self.data, off)[0]

    def i64(self, off: int) -> int:
        return struct.unpack_from("<q", self.data, off)[0]

    def vtime(self, r: int, e: int = 0) -> int:
        """1-based position of entry ``e`` of request ``r`` in the flattened trace."""
        return sum(self.n_blocks[:r]) + e + 1

    def entry(self, r: int, e: int = 0) -> int:
        return self.offsets[r] + RECORD + ENTRY * e


def make_base(d: Path) -> Base:
    """Convert :func:`base_rows` to ``d/base.lcp`` (counts valid, sorted, annotated)."""
    import json

    from shadow.trace import convert_file

    src = d / "base.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in base_rows()))
    convert_file(str(src), str(d / "base.lcp"))
    data = (d / "base.lcp").read_bytes()
    offsets, n_blocks, pos = [], [], HEADER
    while pos < len(data):
        nb = struct.unpack_from("<I", data, pos + N_BLOCKS)[0]
        offsets.append(pos)
        n_blocks.append(nb)
        pos += RECORD + ENTRY * nb
    return Base(data, offsets, n_blocks)


def _put(d: bytearray, off: int, fmt: str, value: int) -> None:
    struct.pack_into(fmt, d, off, value)


# -- damaged lcp: each function changes the bytes and returns the words the error must hold ------
Damage = Callable[[bytearray, Base], list[str]]


def _flag_bit(bit: int) -> Damage:
    def f(d: bytearray, b: Base) -> list[str]:
        _put(d, FLAGS, "<Q", b.u64(FLAGS) | (1 << bit))
        return ["byte offset 24", f"unknown flag bits {1 << bit:#x}"]
    return f


def _clear_flag(bit: int) -> Callable[[bytearray], None]:
    def f(d: bytearray) -> None:
        _put(d, FLAGS, "<Q", struct.unpack_from("<Q", d, FLAGS)[0] & ~(1 << bit))
    return f


Words = list[str | Callable[[Base, int], str]]


def _words(words: Words, b: Base, v: int) -> list[str]:
    """The expected words: a string with ``{v}`` for the value written, or a function of both."""
    return [w(b, v) if callable(w) else w.format(v=v) for w in words]


def _record(field: int, fmt: str, value: int | Callable[[Base], int], r: int,
            words: Words, *, before: Callable[[bytearray], None] | None = None) -> Damage:
    """Set a record field of request ``r``; the error names the request's byte offset."""
    def f(d: bytearray, b: Base) -> list[str]:
        if before:
            before(d)
        v = value(b) if callable(value) else value
        _put(d, b.offsets[r] + field, fmt, v)
        return [f"byte offset {b.offsets[r]}:", f"request index {r}:", *_words(words, b, v)]
    return f


def _entry(field: int, fmt: str, value: int | Callable[[Base], int], r: int, e: int,
           words: Words, *, before: Callable[[bytearray], None] | None = None) -> Damage:
    """Set a field of entry ``e`` of request ``r``; the error names the entry's byte offset."""
    def f(d: bytearray, b: Base) -> list[str]:
        if before:
            before(d)
        v = value(b) if callable(value) else value
        _put(d, b.entry(r, e) + field, fmt, v)
        return [f"byte offset {b.offsets[r]}:", f"request index {r}, entry {e} (byte offset"
                f" {b.entry(r, e)}):", *_words(words, b, v)]
    return f


def _header(off: int, fmt: str, value: int | Callable[[Base], int], words: list[str]) -> Damage:
    def f(d: bytearray, b: Base) -> list[str]:
        _put(d, off, fmt, value(b) if callable(value) else value)
        return words
    return f


def _type_name(raw: bytes, words: list[str]) -> Damage:
    def f(d: bytearray, b: Base) -> list[str]:
        d[104:104 + 32] = raw.ljust(32, b"\0")
        return words
    return f


def _cut(n: Callable[[Base], int], words: list[str]) -> Damage:
    def f(d: bytearray, b: Base) -> list[str]:
        del d[n(b):]
        return words
    return f


def _append_request(d: bytearray, b: Base) -> list[str]:
    last = b.offsets[-1]
    d += d[last:last + RECORD]
    _put(d, len(d) - RECORD + N_BLOCKS, "<I", 0)
    return ["more requests than the header's 12"]


_NO_NEXT = _clear_flag(0)
_I64 = (1 << 63) - 1

#: (name, damage): a plain `.lcp` that every reader refuses (the name is the test id).
LCP_DAMAGE: list[tuple[str, Damage]] = [
    # header
    ("flag bit 4", _flag_bit(4)),
    ("flag bit 63", _flag_bit(63)),
    ("type name not UTF-8", _type_name(b"\xff\xfetext", ["byte offset 104", "request type name 1"
                                                        " is not UTF-8"])),
    ("type name cut UTF-8", _type_name("tëxt".encode()[:2], ["byte offset 105", "not UTF-8"])),
    ("type name bytes after NUL", _type_name(b"text\0junk", ["byte offset 109", "after its NUL"
                                                            " padding"])),
    ("nonzero zero area", _header(5000, "<B", 7, ["byte offset 5000", "nonzero byte"])),
    ("65 types", _header(N_TYPES, "<I", 65, ["byte offset 96", "65 request types"])),
    ("version past the last", _header(8, "<I", max(VERSIONS) + 1,
                                      [f"unsupported lcp version {max(VERSIONS) + 1}"])),
    ("record size 64", _header(16, "<H", 64, ["bad lcp record size 64"])),
    ("end magic", _header(8184, "<Q", 0, ["byte offset 8184", "end magic"])),
    ("max blocks above accesses", _header(MAX_BLOCKS, "<Q", lambda b: b.u64(N_ACCESSES) + 1,
                                          ["byte offset 56", "max_blocks_per_request"])),
    ("sessions above requests", _header(N_SESSIONS, "<Q", 13, ["byte offset 64", "n_sessions 13"])),
    ("time span backwards", _header(T_LAST, "<q", lambda b: b.i64(T_FIRST) - 1,
                                    ["byte offset 88", "before first_complete_time_us"])),
    ("header cut", _cut(lambda b: 1000, ["byte offset 1000", "truncated lcp header"])),
    # records
    ("type id past the table", _record(TYPE_ID, "<H", 9, 3, ["type id 9 beyond the header's 2"
                                                             " request types"])),
    ("type id 65535", _record(TYPE_ID, "<H", 0xFFFF, 0, ["type id 65535"])),
    ("user id past n_users", _record(USER, "<I", 0xFFFFFFFF, 4, ["user id 4294967295 above the"
                                                                " header's 4 users"])),
    ("start time -5", _record(START, "<q", -5, 2, ["start_time_us -5"])),
    ("complete time -7", _record(COMPLETE, "<q", -7, 0, ["complete_time_us -7"])),
    ("complete time past the header's last", _record(
        COMPLETE, "<q", lambda b: b.i64(T_LAST) + 1, 11, ["outside the header's"])),
    ("complete time before the previous (SORTED)", _record(
        COMPLETE, "<q", lambda b: b.i64(b.offsets[4] + COMPLETE) - 1, 5,
        ["before the previous request's", "SORTED"])),
    ("unsorted without valid counts", _record(
        COMPLETE, "<q", 0, 6, ["before the previous request's"], before=_clear_flag(2))),
    ("session next pointing back", _record(SESSION_NEXT, "<q", 3, 7,
                                           ["session_next_req 3 is not a later request than this one (8, 1-based)"])),
    ("session next to itself", _record(SESSION_NEXT, "<q", 8, 7, ["session_next_req 8"])),
    ("session next past the end", _record(SESSION_NEXT, "<q", 13, 2, ["session_next_req 13"])),
    ("n_blocks 10**9", _record(N_BLOCKS, "<I", 10**9, 1, ["request of 1000000000 blocks (header"
                                                          " max 5)"])),
    ("n_blocks above the header max", _record(N_BLOCKS, "<I", 6, 1, ["request of 6 blocks"])),
    ("n_blocks 2**27 without valid counts", _record(
        N_BLOCKS, "<I", 1 << 27, 0, ["request of 134217728 blocks (more than 67108864, which"
                                     " no real request has)"],
        before=_clear_flag(2))),
    # entries
    ("block id 0", _entry(0, "<Q", 0, 2, 1, ["block id 0 out of range"])),
    ("block id 2**63", _entry(0, "<Q", 1 << 63, 5, 0, ["block id 9223372036854775808 out of"
                                                       " range"])),
    ("block id 2**64-1", _entry(0, "<Q", (1 << 64) - 1, 9, 2, ["block id 18446744073709551615"])),
    ("block id past n_unique", _entry(0, "<Q", lambda b: b.u64(48) + 1, 3, 2,
                                      [lambda b, v: f"block id {v} out of range 1..{v - 1}"])),
    ("block id 2**63 without valid counts", _entry(
        0, "<Q", 1 << 63, 5, 0, [f"out of range 1..{_I64}"], before=_clear_flag(2))),
    ("next access garbage", _entry(8, "<q", 0x4141414141414141, 4, 0, ["next access"])),
    ("next access pointing back", _entry(8, "<q", lambda b: b.vtime(6), 6, 0,
                                         ["next access {v} of vtime {v} (expected -1 or"])),
    ("next access past the trace", _entry(8, "<q", lambda b: b.u64(N_ACCESSES) + 1, 10, 0,
                                          ["next access"])),
    ("next access -2", _entry(8, "<q", -2, 1, 0, ["next access -2 of vtime 3 (expected -1 or"
                                                  " 4..42)"])),
    ("delta without HAS_NEXT_ACCESS", _entry(8, "<q", 5, 0, 0, ["next-access delta 5 in a file"
                                                               " without HAS_NEXT_ACCESS"],
                                             before=_NO_NEXT)),
    # the stream
    ("cut inside a request", _cut(lambda b: b.offsets[7] + 30,
                                  ["truncated lcp trace", "7 complete requests read"])),
    ("cut at a request boundary", _cut(lambda b: b.offsets[9], ["header says 12 requests",
                                                                "9 complete requests read"])),
    ("one request too many", _append_request),
    ("accesses short of the header", _header(N_ACCESSES, "<Q", lambda b: b.u64(N_ACCESSES) + 1,
                                             ["block accesses, the header says"])),
    # counts that no request contradicts alone, but the whole file does
    ("n_unique_blocks one too many", _header(48, "<Q", lambda b: b.u64(48) + 1,
                                             ["the header's n_unique_blocks is 21, the requests"
                                              " say 20"])),
    ("n_users one too many", _header(72, "<Q", 5, ["the header's n_users is 5, the requests say"
                                                   " 4"])),
    ("max_blocks_per_request one too many", _header(MAX_BLOCKS, "<Q", 6, [
        "the header's max_blocks_per_request is 6, the requests say 5"])),
    ("max_blocks_per_request one too few", _header(MAX_BLOCKS, "<Q", 4, [
        "request of 5 blocks (header max 4)"])),
    ("last time later than any", _header(T_LAST, "<q", lambda b: b.i64(T_LAST) + 5, [
        "the header's last_complete_time_us is 21000005, the largest complete time is"
        " 21000000"])),
    ("first time earlier than any", _header(T_FIRST, "<q", lambda b: b.i64(T_FIRST) - 5, [
        "the header's first_complete_time_us is 9999995, the smallest complete time is"
        " 10000000"])),
    # hostile counts: refused before anything is sized by them
    ("n_unique_blocks 2**64-1", _header(48, "<Q", (1 << 64) - 1, [
        "byte offset 48", "n_unique_blocks 18446744073709551615 is past the largest block id"])),
    ("n_block_accesses 2**64-1", _header(N_ACCESSES, "<Q", (1 << 64) - 1, [
        "byte offset 40", "more entries than any file holds"])),
    ("n_requests 2**62", _header(N_REQUESTS, "<Q", 1 << 62, [
        "byte offset 32", "more requests than any file holds"])),
    ("max_blocks_per_request 2**32-1", lambda d, b: (
        _put(d, MAX_BLOCKS, "<Q", (1 << 32) - 1), _put(d, N_ACCESSES, "<Q", 1 << 40),
        ["byte offset 56", "max_blocks_per_request 4294967295 is more than 67108864 blocks,"
         " which no real request has"])[-1]),
    ("n_users 2**32", _header(72, "<Q", 1 << 32, ["byte offset 72", "past the largest user"
                                                  " id"])),
]


def damaged(d: Path, base: Base, damage: Damage, name: str = "bad.lcp") -> tuple[Path, list[str]]:
    """Write ``base`` damaged by ``damage`` as ``d/name`` (``.zst``: compressed, checksummed)."""
    raw = bytearray(base.data)
    words = damage(raw, base)
    path = d / name
    if name.endswith(".zst"):
        raw = bytearray(zstandard.ZstdCompressor(write_checksum=True).compress(bytes(raw)))
    path.write_bytes(bytes(raw))
    return path, [name] + words


def lying_frame_index(d: Path, base: Base) -> Path:
    """The base trace as a `.lcp.zst` of one body frame whose index entry (checksum right) says
    the frame holds about 1 TiB: a buffer of that size must never be made."""
    from shadow.trace.format import HEADER_FRAME_PREFIX
    from shadow.trace.frames import FrameEntry, pack_entry

    body = base.data[HEADER:]
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(body)
    n = (1 << 36) + 1
    entry = pack_entry(FrameEntry(len(frame), RECORD * 1 + ENTRY * n, 1, n))
    path = d / "lying.lcp.zst"
    path.write_bytes(HEADER_FRAME_PREFIX + base.data[:HEADER] + entry + frame)
    return path


def writer_made(d: Path) -> tuple[Path, list[str]]:
    """A `.lcp.zst` in this writer's indexed frames, every checksum right, whose request 2 has a
    type id its header's table lacks (what a writer bug, not a flipped byte, leaves)."""
    from shadow.trace import LcpWriter
    from shadow.trace.format import RECORD_DTYPE

    rec = np.zeros(4, dtype=RECORD_DTYPE)
    rec["complete_time_us"] = [1, 2, 3, 4]
    rec["type_id"] = [1, 1, 3, 1]
    path = d / "writer.lcp.zst"
    with LcpWriter(str(path), type_names=["text"], frame_bytes=1) as w:
        w.write_arrays(rec, np.array([0, 1, 2, 3, 4]), np.array([1, 1, 1, 1]))
    return path, ["writer.lcp.zst", "type id 3 beyond the header's 1 request types",
                  "request index 2"]


# -- hostile JSONL: (name, the bad line as bytes, extra options, words) --------------------------
_GOOD = b'{"timestamp": 1, "hash_ids": [1, 2]}\n'
JSONL_CASES: list[tuple[str, bytes, list[str], list[str]]] = [
    # timestamps
    ("timestamp 1e400", b'{"timestamp": 1e400, "hash_ids": [1]}', [], ["invalid JSON",
                                                                       "infinity"]),
    ("timestamp -1e400", b'{"timestamp": -1e400, "hash_ids": [1]}', [], ["invalid JSON"]),
    ("timestamp_arrival 1e400", b'{"timestamp_arrival": 1e400, "hash_ids": [1]}', [],
     ["invalid JSON"]),
    ("timestamp NaN", b'{"timestamp": NaN, "hash_ids": [1]}', [], ["invalid JSON"]),
    ("timestamp Infinity", b'{"timestamp": Infinity, "hash_ids": [1]}', [], ["invalid JSON"]),
    ("timestamp -5", b'{"timestamp": -5, "hash_ids": [1]}', [], ["timestamp -5 is negative"]),
    ("timestamp -0.5", b'{"timestamp": -0.5, "hash_ids": [1]}', [], ["timestamp -0.5 is"
                                                                     " negative"]),
    ("timestamp_arrival -1", b'{"timestamp_arrival": -1, "hash_ids": [1]}', [],
     ["timestamp_arrival -1 is negative"]),
    ("timestamp 2**63", b'{"timestamp": 9223372036854775808, "hash_ids": [1]}', [],
     ["timestamp 9223372036854775808 is too large"]),
    ("timestamp 2**64-1", b'{"timestamp": 18446744073709551615, "hash_ids": [1]}', [],
     ["is too large"]),
    ("timestamp 10**20 (a float to orjson)", b'{"timestamp": 100000000000000000000,'
     b' "hash_ids": [1]}', [], ["timestamp 1e+20 is too large"]),
    ("timestamp -2**63-1", b'{"timestamp": -9223372036854775809, "hash_ids": [1]}', [],
     ["is negative"]),
    ("timestamp 1e300", b'{"timestamp": 1e300, "hash_ids": [1]}', [], ["timestamp 1e+300 is too"
                                                                       " large"]),
    ("timestamp 1e17 s", b'{"timestamp": 1e17, "hash_ids": [1]}', [],
     ["timestamp 1e+17 read as seconds is past the largest lcp time"]),
    ("timestamp 10**16 ms", b'{"timestamp": 10000000000000000, "hash_ids": [1]}', [],
     ["read as milliseconds is past the largest lcp time"]),
    ("timestamp 10**13 with --time-unit s", b'{"timestamp": 10000000000000, "hash_ids": [1]}',
     ["--time-unit", "s"], ["read as seconds"]),
    ("timestamp_arrival 1e17 s", b'{"timestamp": 2.5, "timestamp_arrival": 1e17,'
     b' "hash_ids": [1]}', [], ["timestamp_arrival 1e+17 read as seconds"]),
    ("timestamp true", b'{"timestamp": true, "hash_ids": [1]}', [], ["timestamp is True;"
                                                                     " expected a number"]),
    ("timestamp string", b'{"timestamp": "5", "hash_ids": [1]}', [], ["timestamp is '5'"]),
    ("timestamp list", b'{"timestamp": [5], "hash_ids": [1]}', [], ["timestamp is [5]"]),
    ("timestamp object", b'{"timestamp": {}, "hash_ids": [1]}', [], ["timestamp is {}"]),
    # integer fields
    ("input_length -1", b'{"input_length": -1, "hash_ids": [1]}', [], ["input_length -1 out of"
                                                                       " range"]),
    ("input_length 2**32", b'{"input_length": 4294967296, "hash_ids": [1]}', [],
     ["input_length 4294967296 out of range"]),
    ("input_length 1.5", b'{"input_length": 1.5, "hash_ids": [1]}', [], ["input_length is 1.5;"
                                                                         " expected an integer"]),
    ("input_length 3.0", b'{"input_length": 3.0, "hash_ids": [1]}', [], ["input_length is 3.0"]),
    ("input_length 1e400", b'{"input_length": 1e400, "hash_ids": [1]}', [], ["invalid JSON"]),
    ("input_length true", b'{"input_length": true, "hash_ids": [1]}', [], ["input_length is"
                                                                           " True"]),
    ("input_length 10**20", b'{"input_length": 100000000000000000000, "hash_ids": [1]}', [],
     ["input_length is 1e+20; expected an integer"]),
    ("output_length -7", b'{"output_length": -7, "hash_ids": [1]}', [], ["output_length -7"]),
    ("output_length string", b'{"output_length": "7", "hash_ids": [1]}', [],
     ["output_length is '7'"]),
    ("turn 65536", b'{"turn": 65536, "hash_ids": [1]}', [], ["turn 65536 out of range"]),
    ("turn -1", b'{"turn": -1, "hash_ids": [1]}', [], ["turn -1 out of range"]),
    ("turn 2.0", b'{"turn": 2.0, "hash_ids": [1]}', [], ["turn is 2.0"]),
    ("chat_id 2**63", b'{"chat_id": 9223372036854775808, "hash_ids": [1]}', [],
     ["chat_id 9223372036854775808 out of range"]),
    ("chat_id false", b'{"chat_id": false, "hash_ids": [1]}', [], ["chat_id is False"]),
    ("parent_chat_id -2**63-1", b'{"parent_chat_id": -9223372036854775809, "hash_ids": [1]}',
     [], ["parent_chat_id is -9.223372036854776e+18"]),
    ("session_id 0.5", b'{"session_id": 0.5, "hash_ids": [1]}', [], ["session_id is 0.5"]),
    ("user_id 1.5", b'{"user_id": 1.5, "hash_ids": [1]}', [], ["user_id is 1.5"]),
    ("user_id true", b'{"user_id": true, "hash_ids": [1]}', [], ["user_id is True"]),
    ("user_id list", b'{"user_id": [1], "hash_ids": [1]}', [], ["user_id is [1]"]),
    ("type 1.5", b'{"type": 1.5, "hash_ids": [1]}', [], ["type is 1.5"]),
    ("type false", b'{"type": false, "hash_ids": [1]}', [], ["type is False"]),
    ("type of 33 bytes", b'{"type": "' + b"y" * 33 + b'", "hash_ids": [1]}', [],
     ["longer than 32 bytes"]),
    ("type of 17 two-byte letters", b'{"type": "' + "\u00e9".encode() * 17 + b'",'
     b' "hash_ids": [1]}', [], ["longer than 32 bytes"]),
    # hash_ids
    ("hash_ids 2**64", b'{"hash_ids": [1, 18446744073709551616]}', [], ["hash_ids holds"
                                                                        " 1.8446744073709552e+19"]),
    ("hash_ids -2**63-1", b'{"hash_ids": [-9223372036854775809]}', [], ["hash_ids holds"]),
    ("hash_ids 1.5", b'{"hash_ids": [1.5]}', [], ["hash_ids holds 1.5"]),
    ("hash_ids 2.0", b'{"hash_ids": [2.0]}', [], ["hash_ids holds 2.0"]),
    ("hash_ids true", b'{"hash_ids": [true]}', [], ["hash_ids holds True"]),
    ("hash_ids null", b'{"hash_ids": [null]}', [], ["hash_ids holds None"]),
    ("hash_ids string", b'{"hash_ids": ["1"]}', [], ["hash_ids holds '1'"]),
    ("hash_ids 1e400", b'{"hash_ids": [1e400]}', [], ["invalid JSON"]),
    ("hash_ids a number", b'{"hash_ids": 5}', [], ["hash_ids is int"]),
    ("hash_ids missing", b'{"timestamp": 3}', [], ["missing hash_ids"]),
    # lines
    ("not UTF-8", b'{"hash_ids": [1], "type": "\xff\xfe"}', [], ["invalid JSON"]),
    ("a NUL byte", b'{"hash_ids": [1]\x00}', [], ["invalid JSON"]),
    ("trailing comma", b'{"hash_ids": [1,]}', [], ["invalid JSON"]),
    ("an array", b"[1, 2]", [], ["expected a JSON object, got list"]),
    ("null", b"null", [], ["expected a JSON object, got NoneType"]),
    ("cut line", b'{"hash_ids": [1, 2', [], ["invalid JSON"]),
]


def jsonl_file(d: Path, line: bytes, name: str = "t.jsonl") -> Path:
    """A JSONL trace of one good line and then ``line`` (line 2), and a good third line."""
    p = d / name
    p.write_bytes(_GOOD + line + b"\n" + _GOOD)
    return p


#: Damage that a `.lcp.zst` carries through its checksums (written so, not flipped later).
ZST_DAMAGE = [(n, d) for n, d in LCP_DAMAGE if n in (
    "type id past the table", "complete time before the previous (SORTED)", "block id 2**63",
    "next access pointing back", "session next pointing back", "one request too many")]
