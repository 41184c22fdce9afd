"""lcp reader and writer: round trips, batching, flush, truncation and corruption."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import zstandard

from shadow.errors import TraceFormatError
from shadow.trace import LcpReader, LcpWriter, open_trace, read_header
from shadow.trace.batch import Batch
from shadow.trace.format import HEADER_SIZE, empty_records

REQS = [[1, 2, 3], [1, 2, 4], [5], [], [1, 2, 3, 6], [7, 8], [1]]


def _records(n: int) -> np.ndarray:
    rec = empty_records(n)
    rec["start_time_us"] = np.arange(n) * 10
    rec["complete_time_us"] = np.arange(n) * 10 + 5
    rec["chat_id"] = np.arange(n) + 100
    rec["parent_chat_id"] = -1
    rec["session_id"] = np.arange(n) % 2
    rec["session_next_req"] = -1
    rec["user_id"] = 1 + np.arange(n) % 3
    rec["input_length"] = 7
    rec["output_length"] = 9
    rec["turn"] = 1
    rec["type_id"] = np.arange(n) % 3
    return rec


def _next_access(reqs):
    flat = [b for r in reqs for b in r]
    nxt = [-1] * len(flat)
    last = {}
    for j in range(len(flat) - 1, -1, -1):
        nxt[j] = last.get(flat[j], -1)
        last[flat[j]] = j + 1
    out, k = [], 0
    for r in reqs:
        out.append(nxt[k:k + len(r)])
        k += len(r)
    return out


def _write(path, reqs=REQS, **kw):
    b = Batch.from_lists(reqs, next_access=_next_access(reqs), records=_records(len(reqs)))
    with LcpWriter(str(path), block_size_tokens=16, type_names=["text", "image"],
                   has_next_access=True, **kw) as w:
        w.write_batch(b)
    return b


def _read_all(path, **kw):
    reqs, nxt, recs = [], [], []
    with LcpReader(str(path), **kw) as r:
        for b in r:
            assert b.offsets[0] == 0 and b.offsets[-1] == b.n_blocks
            assert np.array_equal(np.diff(b.offsets), b.records["n_blocks"])
            assert b.first_request == len(reqs)
            assert b.first_vtime == sum(len(x) for x in reqs) + 1
            for i in range(b.n_requests):
                reqs.append(b.request_blocks(i).tolist())
                nxt.append(b.next_access[b.offsets[i]:b.offsets[i + 1]].tolist())
            recs.append(b.records)
    return reqs, nxt, (np.concatenate(recs) if recs else None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t.lcp", "t.lcp.zst"])
@pytest.mark.parametrize("batch_entries", [1, 2, 3, 1000])
def test_round_trip(tmp_path, name, batch_entries):
    src = _write(tmp_path / name)
    reqs, nxt, recs = _read_all(tmp_path / name, batch_entries=batch_entries)
    assert reqs == REQS
    assert nxt == _next_access(REQS)
    want = src.records.copy()
    want["n_blocks"] = [len(r) for r in REQS]   # the writer fills n_blocks from the offsets
    assert recs.tobytes() == want.tobytes()
    h = read_header(str(tmp_path / name))
    assert h.counts_valid and h.n_requests == 7 and h.n_block_accesses == 14
    assert h.n_unique_blocks == 8 and h.max_blocks_per_request == 4
    assert h.n_sessions == 2 and h.n_users == 3 and h.type_names == ["text", "image"]
    assert (h.first_complete_time_us, h.last_complete_time_us) == (5, 65)
    assert not os.path.exists(str(tmp_path / name) + ".partial")


def test_compression_told_by_magic_not_name(tmp_path):
    _write(tmp_path / "plain.zst", compress=False)
    _write(tmp_path / "packed.lcp", compress=True)
    assert (tmp_path / "packed.lcp").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"
    assert _read_all(tmp_path / "plain.zst")[0] == REQS
    assert _read_all(tmp_path / "packed.lcp")[0] == REQS
    # any zstd decoder reads the file (header frame + body frame) as the plain bytes
    plain = (tmp_path / "plain.zst").read_bytes()
    dctx = zstandard.ZstdDecompressor()
    with open(tmp_path / "packed.lcp", "rb") as f:
        assert dctx.stream_reader(f, read_across_frames=True).read() == plain


def test_without_next_access_reads_minus_one(tmp_path):
    b = Batch.from_lists(REQS, next_access=_next_access(REQS))
    with LcpWriter(str(tmp_path / "n.lcp")) as w:
        w.write_batch(b)
    _, nxt, _ = _read_all(tmp_path / "n.lcp")
    assert all(v == -1 for r in nxt for v in r)


def test_large_request_gets_its_own_batch(tmp_path):
    big = list(range(1, 5001))
    reqs = [[1], big, [2, 3]]
    _write(tmp_path / "big.lcp.zst", reqs=reqs)
    with LcpReader(str(tmp_path / "big.lcp.zst"), batch_entries=100) as r:
        sizes = [b.n_blocks for b in r]
    assert 5000 in sizes and sum(sizes) == 5003


@pytest.mark.slow
def test_many_chunks(tmp_path):
    rng = np.random.default_rng(1)
    reqs = [list(rng.integers(1, 5000, size=int(rng.integers(0, 300)))) for _ in range(3000)]
    for name in ("m.lcp", "m.lcp.zst"):
        _write(tmp_path / name, reqs=reqs)
        got, nxt, _ = _read_all(tmp_path / name, batch_entries=50_000)
        assert got == [list(map(int, r)) for r in reqs]
        assert nxt == _next_access(got)


def test_flush_makes_requests_readable_while_writing(tmp_path):
    path = tmp_path / "live.lcp.zst"
    w = LcpWriter(str(path))
    for i in range(50):
        w.write_request({"complete_time_us": i}, [1, i + 2])
    w.flush()
    partial = str(path) + ".partial"
    with LcpReader(partial, allow_truncated=True) as r:
        got = [b.request_blocks(i).tolist() for b in r for i in range(b.n_requests)]
    assert len(got) == 50 and got[7] == [1, 9]
    assert not read_header(partial).counts_valid
    w.write_request({"complete_time_us": 99}, [1])
    w.close()
    assert read_header(str(path)).n_requests == 51 and not os.path.exists(partial)


def test_abort_leaves_nothing(tmp_path):
    path = tmp_path / "x.lcp.zst"
    with pytest.raises(RuntimeError):
        with LcpWriter(str(path)) as w:
            w.write_request({"complete_time_us": 1}, [1, 2])
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["t.lcp", "t.lcp.zst"])
def test_truncated_plain_and_zstd(tmp_path, name, caplog):
    rng = np.random.default_rng(2)
    # NOTE: large enough for several zstd blocks (a cut block decodes to nothing)
    reqs = [list(map(int, rng.integers(1, 50, size=int(rng.integers(1, 40))))) for _ in range(4000)]
    path = tmp_path / name
    _write(path, reqs=reqs)
    data = path.read_bytes()
    cut = tmp_path / ("cut-" + name)
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(TraceFormatError, match=r"byte offset \d+: truncated.*; \d+ complete "
                                               r"requests read") as ei:
        _read_all(cut)
    n_ok = ei.value.n_complete_requests
    assert 0 < n_ok < 4000
    # the byte offset is the start of the first incomplete request in the decompressed stream
    expect = HEADER_SIZE + sum(68 + 16 * len(r) for r in reqs[:n_ok])
    assert ei.value.byte_offset == expect
    caplog.set_level(logging.WARNING)
    got, nxt, _ = _read_all(cut, allow_truncated=True)
    assert got == reqs[:n_ok]
    assert sum("truncated" in r.message for r in caplog.records) == 1


def test_truncated_at_request_boundary_detected_by_counts(tmp_path):
    path = tmp_path / "t.lcp"
    _write(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.lcp"
    cut.write_bytes(data[: HEADER_SIZE + 68 + 16 * 3])   # exactly one whole request
    with pytest.raises(TraceFormatError, match="header says 7 requests") as ei:
        _read_all(cut)
    assert ei.value.n_complete_requests == 1


def test_corrupt_block_id(tmp_path):
    path = tmp_path / "t.lcp"
    _write(path)
    raw = bytearray(path.read_bytes())
    off = HEADER_SIZE + 68 + 16 * 3 + 68     # the first entry of request 2
    raw[off:off + 8] = (0).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match=f"byte offset {off - 68}: corrupt lcp data in"
                                               f" request index 1, entry 0 \\(byte offset {off}\\):"
                                               " block id 0") as ei:
        _read_all(path)
    assert ei.value.n_complete_requests == 1


def test_corrupt_zstd_data(tmp_path):
    rng = np.random.default_rng(3)
    reqs = [list(map(int, rng.integers(1, 10**6, size=200))) for _ in range(200)]
    path = tmp_path / "t.lcp.zst"
    _write(path, reqs=reqs)
    raw = bytearray(path.read_bytes())
    for k in range(len(raw) // 2, len(raw) // 2 + 64):
        raw[k] ^= 0x5A
    path.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match="corrupt|truncated"):
        _read_all(path)


def test_garbage_after_header(tmp_path):
    path = tmp_path / "t.lcp"
    _write(path)
    raw = bytearray(path.read_bytes())
    raw[HEADER_SIZE + 52:HEADER_SIZE + 56] = (10**9).to_bytes(4, "little")  # n_blocks
    path.write_bytes(bytes(raw))
    with pytest.raises(TraceFormatError, match="request of 1000000000 blocks"):
        _read_all(path)


def test_open_trace_lcp(tmp_path):
    _write(tmp_path / "t.lcp.zst")
    with open_trace(str(tmp_path / "t.lcp.zst")) as tr:
        assert tr.header.block_size_tokens == 16
        assert sum(b.n_requests for b in tr) == 7
