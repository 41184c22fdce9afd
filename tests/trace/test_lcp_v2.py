"""lcp v2 (docs/lcp.md "lcp v2"): 80-byte records with ``arrival_time_us`` and ``replica_id``, the
header's replica name table, BLOCK_KEYS entries; v1 files read unchanged; damage and misuse
refused with the place named."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shadow.errors import TraceFormatError
from shadow.trace import LcpReader, LcpWriter, read_header
from shadow.trace.batch import Batch
from shadow.trace.format import (FLAG_BLOCK_KEYS, FLAG_HAS_NEXT_ACCESS, HEADER_SIZE,
                                 MAX_REPLICAS, RECORD_SIZE, RECORD_SIZE_V2, REPLICA_NAME_SIZE,
                                 REPLICA_NAMES_OFFSET, V2_RECORD_DEFAULTS, VERSION_1, VERSION_2,
                                 empty_records)
from shadow.trace.header import LcpHeader, parse_header

REQS = [[1, 2, 3], [1, 2, 4], [5], [], [1, 2, 3, 6], [7, 8], [1]]
NAMES = ["east-0", "west-1", "ünïcode"]


def _batch(n_replicas: int = 3, keys: bool = True) -> Batch:
    n = len(REQS)
    rec = empty_records(n)
    rec["start_time_us"] = np.arange(n) * 10 + 2
    rec["complete_time_us"] = np.arange(n) * 10 + 5
    rec["arrival_time_us"] = np.arange(n) * 10
    rec["arrival_time_us"][3] = -1
    rec["replica_id"] = np.arange(n) % (n_replicas + 1)
    rec["input_length"] = 40
    rec["n_blocks"] = [len(r) for r in REQS]
    b = Batch.from_lists(REQS, records=rec)
    if not keys:
        return b
    # a key per entry: any value in 1..2**63-1, here a fixed function of the id
    k = ((b.block_ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
         >> np.uint64(1)).astype(np.int64)
    k[k == 0] = 1
    return Batch(b.records, b.offsets, b.block_ids, b.next_access, block_keys=k)


def _read(path, **kw):
    recs, ids, keys = [], [], []
    with LcpReader(str(path), **kw) as r:
        for b in r:
            recs.append(b.records.copy())
            ids.extend(b.block_ids.tolist())
            keys.extend(b.block_keys.tolist() if b.block_keys is not None else [])
        h = r.header
    return h, np.concatenate(recs), ids, keys


@pytest.mark.parametrize("name", ["t.lcp", "t.lcp.zst"])
@pytest.mark.parametrize("batch_entries", [1, 3, 1000])
def test_v2_round_trip_keeps_replicas_arrivals_and_keys(tmp_path, name, batch_entries):
    src = _batch()
    with LcpWriter(str(tmp_path / name), block_size_tokens=32, replica_names=NAMES,
                   block_keys=True, frame_bytes=200) as w:
        w.write_batch(src)
    h, recs, ids, keys = _read(tmp_path / name, batch_entries=batch_entries)
    assert h.version == VERSION_2 and h.record_size == RECORD_SIZE_V2
    assert h.replica_names == NAMES and h.has_block_keys and h.n_replicas == 3
    assert [h.replica_name(i) for i in range(5)] == ["", *NAMES, ""]
    assert recs.tobytes() == src.records.tobytes()
    assert ids == src.block_ids.tolist() and keys == src.block_keys.tolist()
    assert h.n_unique_blocks == 8   # the dense ids' largest, as in v1


def test_parallel_frames_of_a_v2_file_equal_the_streaming_decoder(tmp_path):
    src = _batch()
    path = tmp_path / "t.lcp.zst"
    with LcpWriter(str(path), replica_names=NAMES, block_keys=True, frame_bytes=100) as w:
        for _ in range(40):
            w.write_batch(src)
    assert w.n_frames > 10
    with LcpReader(str(path), decode_threads=2) as r:
        par = [(b.records.tobytes(), b.block_ids.tolist(), b.block_keys.tolist()) for b in r]
        assert r.n_frames_parallel == w.n_frames
    with LcpReader(str(path), decode_threads=0) as r:
        seq = [(b.records.tobytes(), b.block_ids.tolist(), b.block_keys.tolist()) for b in r]
    assert par == seq


def test_a_v1_file_reads_unchanged_with_the_v2_fields_at_their_defaults(tmp_path):
    src = _batch(keys=False)
    src.records["replica_id"] = 0
    with LcpWriter(str(tmp_path / "v1.lcp"), block_size_tokens=32) as w:
        w.write_batch(src)
    raw = (tmp_path / "v1.lcp").read_bytes()
    assert struct.unpack_from("<IIH", raw, 8) == (VERSION_1, HEADER_SIZE, RECORD_SIZE)
    assert len(raw) == HEADER_SIZE + RECORD_SIZE * len(REQS) + 16 * sum(map(len, REQS))
    h, recs, ids, keys = _read(tmp_path / "v1.lcp")
    assert h.version == VERSION_1 and h.replica_names == [] and not h.has_block_keys
    for f, v in V2_RECORD_DEFAULTS.items():
        assert (recs[f] == v).all()
    for f in ("start_time_us", "complete_time_us", "input_length", "n_blocks"):
        assert np.array_equal(recs[f], src.records[f])
    assert ids == src.block_ids.tolist() and keys == []


def test_v2_records_without_replicas_or_keys(tmp_path):
    src = _batch(keys=False)
    src.records["replica_id"] = 0
    with LcpWriter(str(tmp_path / "t.lcp"), version=VERSION_2) as w:
        w.write_batch(src)
    h, recs, _ids, keys = _read(tmp_path / "t.lcp")
    assert h.version == VERSION_2 and not h.has_block_keys and keys == []
    assert np.array_equal(recs["arrival_time_us"], src.records["arrival_time_us"])


@pytest.mark.parametrize("kwargs,words", [
    ({"replica_names": ["a"], "version": VERSION_1}, "need lcp v2"),
    ({"block_keys": True, "version": VERSION_1}, "need lcp v2"),
    ({"block_keys": True, "has_next_access": True}, "block keys or next accesses"),
    ({"replica_names": [f"r{i}" for i in range(MAX_REPLICAS + 1)]}, f"at most {MAX_REPLICAS}"),
    ({"replica_names": ["x" * (REPLICA_NAME_SIZE + 1)]}, "replica name"),
    ({"replica_names": [""]}, "replica name"),
])
def test_the_writer_refuses_what_the_format_cannot_hold(tmp_path, kwargs, words):
    with pytest.raises(ValueError, match=words):
        LcpWriter(str(tmp_path / "t.lcp"), **kwargs)
    assert not list(tmp_path.iterdir())


def test_the_writer_refuses_a_replica_id_past_its_names_and_a_key_of_0(tmp_path):
    src = _batch()
    with pytest.raises(ValueError, match="replica id 3 beyond the 2 replica names"):
        with LcpWriter(str(tmp_path / "a.lcp"), replica_names=NAMES[:2], block_keys=True) as w:
            w.write_batch(src)
    bad = src.block_keys.copy()
    bad[2] = 0
    with pytest.raises(ValueError, match="block key 0"):
        with LcpWriter(str(tmp_path / "b.lcp"), replica_names=NAMES, block_keys=True) as w:
            w.write_batch(Batch(src.records, src.offsets, src.block_ids, src.next_access,
                                block_keys=bad))
    assert not list(tmp_path.iterdir())


def _v2_file(tmp_path) -> bytes:
    with LcpWriter(str(tmp_path / "ok.lcp"), replica_names=NAMES, block_keys=True) as w:
        w.write_batch(_batch())
    return (tmp_path / "ok.lcp").read_bytes()


def _first_record(i: int) -> int:
    return HEADER_SIZE + sum(RECORD_SIZE_V2 + 16 * len(r) for r in REQS[:i])


@pytest.mark.parametrize("where,fmt,value,words", [
    (lambda: _first_record(1) + 68, "<q", -7, "request index 1: arrival_time_us -7 is below -1"),
    (lambda: _first_record(2) + 76, "<I", 4, "request index 2: replica id 4 beyond the header's"
                                            " 3 replicas"),
    (lambda: _first_record(1) + RECORD_SIZE_V2 + 16 + 8, "<Q", 0,
     "request index 1, entry 1 (byte offset {at}): block key 0 out of range"),
    (lambda: _first_record(0) + RECORD_SIZE_V2 + 8, "<Q", 1 << 63,
     "request index 0, entry 0 (byte offset {at}): block key 9223372036854775808"),
])
def test_damaged_v2_requests_are_named(tmp_path, where, fmt, value, words):
    raw = bytearray(_v2_file(tmp_path))
    at = where()
    struct.pack_into(fmt, raw, at, value)
    p = tmp_path / "bad.lcp"
    p.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError) as ei:
        _read(p)
    entry_at = at - 8 if "entry" in words else at
    assert words.format(at=entry_at) in str(ei.value), str(ei.value)


@pytest.mark.parametrize("offset,fmt,value,words", [
    (100, "<I", MAX_REPLICAS + 1, f"{MAX_REPLICAS + 1} replicas (at most {MAX_REPLICAS})"),
    (REPLICA_NAMES_OFFSET + 3 * REPLICA_NAME_SIZE, "<B", 7, "nonzero byte in the area that lcp"
                                                            " v2 keeps zero"),
    (REPLICA_NAMES_OFFSET + 1, "<B", 0xFF, "replica name 1 is not UTF-8"),
    (REPLICA_NAMES_OFFSET + 34, "<B", 0, "replica name 2 has bytes after its NUL padding"),
    (24, "<Q", FLAG_BLOCK_KEYS | FLAG_HAS_NEXT_ACCESS, "BLOCK_KEYS and HAS_NEXT_ACCESS"),
    (24, "<Q", 1 << 5, "unknown flag bits 0x20 (lcp v2 defines bits 0-4)"),
    (16, "<H", RECORD_SIZE, f"bad lcp record size {RECORD_SIZE} (lcp v2 has {RECORD_SIZE_V2})"),
])
def test_damaged_v2_headers_are_named(tmp_path, offset, fmt, value, words):
    raw = bytearray(_v2_file(tmp_path)[:HEADER_SIZE])
    struct.pack_into(fmt, raw, offset, value)
    with pytest.raises(TraceFormatError, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_header(bytes(raw), "x.lcp")


def test_v1_refuses_the_block_keys_flag_and_a_v2_record_size():
    raw = bytearray(LcpHeader().pack())
    struct.pack_into("<Q", raw, 24, FLAG_BLOCK_KEYS)
    with pytest.raises(TraceFormatError, match="lcp v1 defines bits 0-3"):
        parse_header(bytes(raw))
    raw = bytearray(LcpHeader().pack())
    struct.pack_into("<H", raw, 16, RECORD_SIZE_V2)
    with pytest.raises(TraceFormatError, match="bad lcp record size 80"):
        parse_header(bytes(raw))


def test_header_round_trip_v2():
    h = LcpHeader(block_size_tokens=32, replica_names=NAMES, version=VERSION_2,
                  flags=FLAG_BLOCK_KEYS, type_names=["preempted"])
    assert parse_header(h.pack()) == h
    assert read_header  # the file-level reader is exercised above
