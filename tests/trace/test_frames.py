"""Multi-frame .lcp.zst: frame index layout, parallel vs streaming decoding, damage and crashes."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zstandard

from shadow.errors import ShadowError, TraceFormatError
from shadow.trace import LcpReader, LcpWriter, open_trace, read_header
from shadow.trace.batch import Batch
from shadow.trace.format import (
    FRAME_INDEX_SIZE,
    HEADER_FRAME_SIZE,
    HEADER_SIZE,
    RECORD_DTYPE,
    ZSTD_MAGIC,
)
from shadow.trace.frames import FrameEntry, pack_entry, parse_entry
from shadow.trace import zstd_direct
from shadow.trace.reader import DECODE_THREADS_ENV, default_decode_threads
from tests.tiers import unit_rows


@pytest.fixture(autouse=True, params=["libzstd", "python-zstandard"])
def frame_decoder(request, monkeypatch):
    """Every test runs with both frame decoders (libzstd into reused buffers, or
    python-zstandard's decompress())."""
    if request.param == "libzstd":
        monkeypatch.delenv(zstd_direct.DIRECT_ENV, raising=False)
        if not zstd_direct.available():
            pytest.skip("no libzstd >= 1.4 on this machine")
    else:
        monkeypatch.setenv(zstd_direct.DIRECT_ENV, "0")
    return request.param


def _trace(n: int, seed: int = 0, max_len: int = 40) -> Batch:
    rng = np.random.default_rng(seed)
    reqs = [rng.integers(1, 500, size=int(rng.integers(0, max_len))).tolist() for _ in range(n)]
    flat = [b for r in reqs for b in r]
    nxt, last = [-1] * len(flat), {}
    for j in range(len(flat) - 1, -1, -1):
        nxt[j] = last.get(flat[j], -1)
        last[flat[j]] = j + 1
    split, k = [], 0
    for r in reqs:
        split.append(nxt[k:k + len(r)])
        k += len(r)
    rec = np.zeros(n, dtype=RECORD_DTYPE)
    rec["start_time_us"] = np.arange(n) * 7
    rec["complete_time_us"] = np.arange(n) * 7 + 3
    rec["chat_id"] = np.arange(n)
    rec["parent_chat_id"] = -1
    rec["session_id"] = np.arange(n) % 5
    rec["session_next_req"] = -1
    rec["user_id"] = 1 + np.arange(n) % 4
    rec["input_length"] = 16 * np.array([len(r) for r in reqs])
    return Batch.from_lists(reqs, next_access=split, records=rec)


def _write(path, batch: Batch, frame_bytes: int, *, slices: int = 1, flush_every: int = 0) -> int:
    """Write ``batch`` in ``slices`` write_arrays calls; return the number of body frames."""
    with LcpWriter(str(path), block_size_tokens=16, has_next_access=True,
                   frame_bytes=frame_bytes) as w:
        cuts = np.linspace(0, batch.n_requests, slices + 1).astype(int)
        for a, b in zip(cuts[:-1], cuts[1:]):
            w.write_arrays(batch.records[a:b], batch.offsets[a:b + 1], batch.block_ids,
                           batch.next_access)
            if flush_every:
                w.flush()
    return w.n_frames


def _batches(path, **kw) -> tuple[list[tuple], LcpReader]:
    out = []
    with LcpReader(str(path), **kw) as r:
        for b in r:
            out.append((b.first_request, b.first_vtime, b.records.tobytes(), b.offsets.tolist(),
                        b.block_ids.tolist(), b.next_access.tolist()))
    return out, r


def _flat(path, **kw):
    reqs, nxt = [], []
    with LcpReader(str(path), **kw) as r:
        for b in r:
            for i in range(b.n_requests):
                reqs.append(b.request_blocks(i).tolist())
                nxt.append(b.next_access[b.offsets[i]:b.offsets[i + 1]].tolist())
    return reqs, nxt, r


def _lists(batch: Batch):
    return ([batch.request_blocks(i).tolist() for i in range(batch.n_requests)],
            [batch.next_access[batch.offsets[i]:batch.offsets[i + 1]].tolist()
             for i in range(batch.n_requests)])


def _walk(path) -> list[tuple[int, FrameEntry]]:
    raw = open(path, "rb").read()
    pos, out = HEADER_FRAME_SIZE, []
    while pos < len(raw):
        e = parse_entry(raw[pos:pos + FRAME_INDEX_SIZE])
        assert e is not None, f"no index entry at {pos}"
        out.append((pos, e))
        pos += FRAME_INDEX_SIZE + e.compressed_size
    assert pos == len(raw)
    return out


# -- layout -----------------------------------------------------------------------------------
@pytest.mark.parametrize("frame_bytes", unit_rows([1, 200, 1000, 7777, 1 << 20], 5, first=2))
@pytest.mark.parametrize("slices", unit_rows([1, 7], 2, first=1))
def test_round_trip_and_index(tmp_path, frame_bytes, slices):
    batch = _trace(300, seed=frame_bytes)
    path = tmp_path / "t.lcp.zst"
    n_frames = _write(path, batch, frame_bytes, slices=slices)
    frames = _walk(path)
    assert len(frames) == n_frames
    assert sum(e.n_requests for _, e in frames) == 300
    assert sum(e.n_entries for _, e in frames) == batch.n_blocks
    sizes = [e.decompressed_size for _, e in frames]
    if frame_bytes == 1:
        assert n_frames == 300       # one request per frame
    else:
        # every frame but the last reaches frame_bytes with its last request, not before it
        for (_, e) in frames[:-1]:
            assert e.decompressed_size >= frame_bytes
            assert e.decompressed_size - 68 - 16 * 39 < frame_bytes
    assert sum(sizes) == 68 * 300 + 16 * batch.n_blocks
    for threads in (0, 1, 3):
        reqs, nxt, r = _flat(path, decode_threads=threads)
        assert (reqs, nxt) == _lists(batch)
        assert r.n_frames_parallel == (n_frames if threads else 0)
    assert read_header(str(path)).n_requests == 300


@pytest.mark.slow
def test_parallel_equals_sequential_batches(tmp_path):
    batch = _trace(3000, seed=5)
    path = tmp_path / "t.lcp.zst"
    assert _write(path, batch, 5000, slices=4) > 20
    for be in (1, 37, 4096):
        seq, _ = _batches(path, decode_threads=0, batch_entries=be)
        noprefetch, _ = _batches(path, prefetch=False, batch_entries=be)
        par, r = _batches(path, decode_threads=2, batch_entries=be)
        assert par == seq == noprefetch
        assert r.n_frames_parallel > 20


@pytest.mark.slow
def test_single_frame_file_still_reads(tmp_path):
    batch = _trace(500, seed=9)
    old, new = tmp_path / "old.lcp.zst", tmp_path / "new.lcp.zst"
    assert _write(old, batch, 0) == 0
    assert _write(new, batch, 2000) > 1
    raw = old.read_bytes()
    assert raw[HEADER_FRAME_SIZE:HEADER_FRAME_SIZE + 4] == ZSTD_MAGIC   # no index: one body frame
    seq_new, _ = _batches(new, decode_threads=2)
    got, r = _batches(old, decode_threads=2)
    assert got == seq_new and r.n_frames_parallel == 0


@pytest.mark.slow
def test_any_zstd_decoder_yields_the_plain_file(tmp_path):
    batch = _trace(800, seed=11)
    z, plain = tmp_path / "t.lcp.zst", tmp_path / "t.lcp"
    assert _write(z, batch, 3000, flush_every=1, slices=5) > 5
    _write(plain, batch, 3000)
    want = plain.read_bytes()
    dctx = zstandard.ZstdDecompressor()
    with open(z, "rb") as f:
        assert dctx.stream_reader(f, read_across_frames=True).read() == want
    out = io.BytesIO()
    with open(z, "rb") as f:
        dctx.copy_stream(f, out)
    assert out.getvalue() == want
    if shutil.which("zstd"):
        got = subprocess.run(["zstd", "-dc", str(z)], capture_output=True, check=True).stdout
        assert got == want


# -- damage -----------------------------------------------------------------------------------
def _error(path, **kw):
    with pytest.raises(TraceFormatError) as ei:
        _flat(path, **kw)
    return ei.value


@pytest.mark.slow
@pytest.mark.parametrize("where", ["in_entry", "in_frame", "at_frame", "in_last"])
def test_truncated_multi_frame_same_as_streaming(tmp_path, where):
    batch = _trace(2000, seed=13)
    path = tmp_path / "t.lcp.zst"
    _write(path, batch, 8000)
    frames = _walk(path)
    pos, e = frames[len(frames) // 2]
    cut = {"in_entry": pos + 20, "in_frame": pos + FRAME_INDEX_SIZE + e.compressed_size // 2,
           "at_frame": pos, "in_last": frames[-1][0] + FRAME_INDEX_SIZE
           + frames[-1][1].compressed_size - 3}[where]
    short = tmp_path / "cut.lcp.zst"
    short.write_bytes(path.read_bytes()[:cut])
    seq, par = _error(short, decode_threads=0), _error(short, decode_threads=2)
    assert str(par) == str(seq)
    assert "truncated" in str(par)
    assert par.n_complete_requests == seq.n_complete_requests
    done = par.n_complete_requests
    assert par.byte_offset == HEADER_SIZE + 68 * done + 16 * int(batch.offsets[done])
    if where in ("in_entry", "at_frame"):    # every whole frame before the cut is read
        assert done == sum(f.n_requests for p, f in frames if p < pos)
    reqs, nxt, r = _flat(short, decode_threads=2, allow_truncated=True)
    assert r.truncated and (reqs, nxt) == tuple(x[:done] for x in _lists(batch))


@pytest.mark.slow
def test_corrupt_frame_data_same_error_as_streaming(tmp_path):
    batch = _trace(2000, seed=17)
    path = tmp_path / "t.lcp.zst"
    _write(path, batch, 8000)
    pos, e = _walk(path)[3]
    raw = bytearray(path.read_bytes())
    for k in range(pos + FRAME_INDEX_SIZE + 20, pos + FRAME_INDEX_SIZE + 60):
        raw[k] ^= 0xA5
    path.write_bytes(bytes(raw))
    seq, par = _error(path, decode_threads=0), _error(path, decode_threads=2)
    assert str(par) == str(seq) and "corrupt zstd data" in str(par)
    assert par.n_complete_requests == seq.n_complete_requests


@pytest.mark.slow
def test_corrupt_index_entry_checksum(tmp_path):
    batch = _trace(2000, seed=19)
    path = tmp_path / "t.lcp.zst"
    _write(path, batch, 8000)
    frames = _walk(path)
    pos, _ = frames[4]
    raw = bytearray(path.read_bytes())
    raw[pos + 17] ^= 0x01               # a bit of compressed_size
    path.write_bytes(bytes(raw))
    err = _error(path, decode_threads=2)
    done = sum(e.n_requests for _, e in frames[:4])
    assert f"corrupt lcp frame index at file byte {pos} (checksum mismatch)" in str(err)
    assert err.n_complete_requests == done
    assert err.byte_offset == HEADER_SIZE + 68 * done + 16 * int(batch.offsets[done])
    reqs, _, r = _flat(path, decode_threads=2, allow_truncated=True)
    assert r.truncated and len(reqs) == done


@pytest.mark.slow
def test_index_entry_disagreeing_with_its_frame(tmp_path):
    batch = _trace(2000, seed=23)
    path = tmp_path / "t.lcp.zst"
    _write(path, batch, 8000)
    frames = _walk(path)
    pos, e = frames[2]
    raw = bytearray(path.read_bytes())
    # a well-formed entry (checksum and size invariant hold) that claims one request too many
    raw[pos:pos + FRAME_INDEX_SIZE] = pack_entry(FrameEntry(
        e.compressed_size, e.decompressed_size + 68, e.n_requests + 1, e.n_entries))
    path.write_bytes(bytes(raw))
    err = _error(path, decode_threads=2)
    assert f"corrupt lcp frame index at file byte {pos} (frame decodes to" in str(err)
    assert err.n_complete_requests == sum(f.n_requests for _, f in frames[:2])


@pytest.mark.slow
def test_index_entry_understating_its_frame_falls_back_to_streaming(tmp_path):
    batch = _trace(2000, seed=31)
    path = tmp_path / "t.lcp.zst"
    _write(path, batch, 8000)
    frames = _walk(path)
    pos, e = frames[2]
    raw = bytearray(path.read_bytes())
    raw[pos:pos + FRAME_INDEX_SIZE] = pack_entry(FrameEntry(
        e.compressed_size, e.decompressed_size - 68, e.n_requests - 1, e.n_entries))
    path.write_bytes(bytes(raw))
    reqs, nxt, r = _flat(path, decode_threads=2)
    assert (reqs, nxt) == _lists(batch)
    assert r.n_frames_parallel == 2     # the frames before it; the rest was streamed


def test_entry_size_invariant_checked():
    bad = bytearray(pack_entry(FrameEntry(10, 68, 1, 0)))
    assert parse_entry(bytes(bad)) == FrameEntry(10, 68, 1, 0)
    assert parse_entry(b"\x28\xb5\x2f\xfd" + bytes(52)) is None     # a data frame, not an entry
    import struct
    import zlib
    body = struct.pack("<8sQQQQ", b"LCPFRAME", 10, 69, 1, 0)
    bad[8:48] = body
    bad[48:52] = zlib.crc32(body).to_bytes(4, "little")
    from shadow.trace.frames import FrameIndexError
    with pytest.raises(FrameIndexError, match="not 68 x 1 requests"):
        parse_entry(bytes(bad))


# -- writers that stop early --------------------------------------------------------------------
@pytest.mark.slow
def test_open_writer_partial_file_reads_through_the_open_frame(tmp_path):
    batch = _trace(600, seed=29)
    path = tmp_path / "live.lcp.zst"
    w = LcpWriter(str(path), has_next_access=True, frame_bytes=3000)
    for i in range(batch.n_requests):
        w.write_arrays(batch.records[i:i + 1], batch.offsets[i:i + 2], batch.block_ids,
                       batch.next_access)
        if i % 50 == 49:
            w.flush()
            partial = str(path) + ".partial"
            seq, _ = _batches(partial, decode_threads=0, allow_truncated=True)
            par, r = _batches(partial, decode_threads=2, allow_truncated=True)
            assert par == seq
            assert sum(len(b[2]) // RECORD_DTYPE.itemsize for b in par) == i + 1
            assert r.n_frames_parallel == w.n_frames
    w.close()
    reqs, nxt, _ = _flat(path, decode_threads=2)
    assert (reqs, nxt) == _lists(batch)


_CHILD = textwrap.dedent("""
    import sys
    from shadow.trace import LcpWriter
    w = LcpWriter(sys.argv[1], frame_bytes=2000)
    for i in range(100000):
        w.write_request({"complete_time_us": i}, [1, 2 + i % 7, 3 + i % 11])
        if i == 500:
            w.flush()
            print("flushed", flush=True)
            sys.stdin.readline()
""")


@pytest.mark.slow
def test_kill_9_leaves_frames_and_flushed_requests_readable(tmp_path):
    path = tmp_path / "seg.lcp.zst"
    p = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "flushed"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    partial = str(path) + ".partial"
    for threads in (0, 2):
        reqs, _, r = _flat(partial, decode_threads=threads, allow_truncated=True)
        assert len(reqs) == 501 and reqs[500] == [1, 2 + 500 % 7, 3 + 500 % 11]
        # 116-byte requests: a frame closes with its 18th (2088 bytes); the 28th is still open
        assert r.n_frames_parallel == (501 // 18 if threads else 0)


def test_direct_decoder_matches_python_zstandard():
    if not zstd_direct.available():
        pytest.skip("no libzstd >= 1.4 on this machine")
    payload = bytes(range(256)) * 3000 + b"lcp" * 1000
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(payload)
    dec = zstd_direct.FrameDecoder()
    src, dst = bytearray(frame), bytearray(len(payload) + 1)
    assert dec.decode(src, len(frame), dst, len(dst)) == len(payload)
    assert bytes(dst[:len(payload)]) == payload
    with pytest.raises(zstd_direct.DirectError):          # output buffer too small
        dec.decode(src, len(frame), dst, len(payload) - 1)
    bad = bytearray(frame)
    bad[-1] ^= 0xFF                                        # the content checksum
    with pytest.raises(zstd_direct.DirectError, match="checksum|[Cc]orrupt"):
        dec.decode(bad, len(bad), dst, len(dst))
    with pytest.raises(zstd_direct.DirectError):          # cut frame
        dec.decode(src, len(frame) - 5, dst, len(dst))


# -- thread count -------------------------------------------------------------------------------
def test_decode_threads_default_and_override(monkeypatch):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    assert default_decode_threads() == max(1, min(len(os.sched_getaffinity(0)), 8))
    monkeypatch.setenv(DECODE_THREADS_ENV, "0")
    assert default_decode_threads() == 0
    monkeypatch.setenv(DECODE_THREADS_ENV, "3")
    assert default_decode_threads() == 3
    monkeypatch.setenv(DECODE_THREADS_ENV, "many")
    with pytest.raises(ShadowError, match="SHADOW_DECODE_THREADS='many': not an integer"):
        default_decode_threads()


@pytest.mark.slow
def test_decode_threads_preferred_by_a_caller(monkeypatch, tmp_path):
    monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
    assert default_decode_threads(prefer=1) == 1
    assert default_decode_threads(prefer=0) == 0
    assert default_decode_threads(prefer=99) == 8
    monkeypatch.setenv(DECODE_THREADS_ENV, "2")               # the environment still wins
    assert default_decode_threads(prefer=1) == 2
    monkeypatch.delenv(DECODE_THREADS_ENV)
    path = tmp_path / "t.lcp.zst"
    _write(path, _trace(300, seed=5), frame_bytes=4096)
    with open_trace(str(path), decode_threads=1) as tr:
        assert tr.decode_threads == 1
        one = [_lists(b) for b in tr]
        assert tr.n_frames_parallel > 1
    with open_trace(str(path)) as tr:
        assert tr.decode_threads == default_decode_threads()
        assert [_lists(b) for b in tr] == one
