"""lcp header: pack/parse round trip and the errors for wrong magic, version and sizes."""

from __future__ import annotations

import struct

import pytest

from shadow.errors import TraceFormatError
from shadow.trace import LcpHeader, read_header
from shadow.trace.format import HEADER_SIZE, RECORD_DTYPE, ENTRY_DTYPE, VERSIONS
from shadow.trace.header import parse_header, sniff


def _header() -> LcpHeader:
    return LcpHeader(block_size_tokens=16, flags=0b1111, n_requests=3, n_block_accesses=10,
                     n_unique_blocks=7, max_blocks_per_request=5, n_sessions=2, n_users=1,
                     first_complete_time_us=-5, last_complete_time_us=99,
                     type_names=["text", "image", "ü" * 16], producer="test producer")


def test_pack_parse_round_trip():
    h = _header()
    raw = h.pack()
    assert len(raw) == HEADER_SIZE
    assert raw[:8] == b"LCPTRACE" and raw[-8:] == b"LCPTRACE"
    back = parse_header(raw)
    assert back == h
    assert back.n_types == 3 and back.type_name(2) == "image" and back.type_name(0) == ""
    assert back.has_next_access and back.has_session_next and back.counts_valid and back.is_sorted


def test_byte_layout_matches_spec():
    raw = _header().pack()
    assert struct.unpack_from("<IIHHIQ", raw, 8) == (1, 8192, 68, 16, 16, 0b1111)
    assert struct.unpack_from("<Q", raw, 48)[0] == 7          # n_unique_blocks
    assert struct.unpack_from("<q", raw, 80)[0] == -5         # first_complete_time_us
    assert struct.unpack_from("<I", raw, 96)[0] == 3          # n_types
    assert raw[104:108] == b"text" and raw[108] == 0
    assert raw[2152:2165] == b"test producer"
    assert RECORD_DTYPE.fields["n_blocks"][1] == 52 and RECORD_DTYPE.fields["type_id"][1] == 66
    assert ENTRY_DTYPE.itemsize == 16


@pytest.mark.parametrize("offset,fmt,value,message", [
    (0, "8s", b"NOTLCPTR", "bad magic"),
    (8, "<I", max(VERSIONS) + 1, f"unsupported lcp version {max(VERSIONS) + 1}"),
    (12, "<I", 4096, "bad lcp header size 4096"),
    (16, "<H", 64, "bad lcp record size 64"),
    (18, "<H", 24, "bad lcp entry size 24"),
    (96, "<I", 65, "65 request types"),
    (8184, "8s", b"XXXXXXXX", "end magic"),
])
def test_bad_header_fields(tmp_path, offset, fmt, value, message):
    raw = bytearray(_header().pack())
    struct.pack_into(fmt, raw, offset, value)
    p = tmp_path / "bad.lcp"
    p.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match=message):
        read_header(str(p))


def test_empty_and_short_files(tmp_path):
    empty = tmp_path / "empty.lcp"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        read_header(str(empty))
    short = tmp_path / "short.lcp"
    short.write_bytes(_header().pack()[:1000])
    with pytest.raises(TraceFormatError, match="byte offset 1000: truncated lcp header") as ei:
        read_header(str(short))
    assert ei.value.n_complete_requests == 0 and ei.value.byte_offset == 1000


def test_too_many_types_refused():
    with pytest.raises(ValueError):
        LcpHeader(type_names=[f"t{i}" for i in range(65)]).pack()
    with pytest.raises(ValueError):
        LcpHeader(type_names=["x" * 33]).pack()


def test_sniff(tmp_path):
    cases = {"a.lcp": _header().pack(), "b": b"\x28\xb5\x2f\xfd....", "c": b'  {"hash_ids": []}\n',
             "d": b"", "e": b"\x00\x01binary"}
    want = {"a.lcp": "lcp", "b": "lcp.zst", "c": "jsonl", "d": "empty", "e": "unknown"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert sniff(str(tmp_path / name)) == want[name]
