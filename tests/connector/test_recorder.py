"""The live recording: rotating zstd lcp segments, atomic rename of finished segments, the
engine and DP rank in segment names, a kill -9 leaving the current segment readable up to its
last flushed request, and an unwritable directory turning recording off (one log line)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap


from shadow.connector.recorder import (PARTIAL_SUFFIX, Recorder, _NAME, list_segments,
                                       segment_sort_key)
from tests.vllm_support import REPO_ROOT


class Clock:
    def __init__(self, t: float = 1_780_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def read_requests(path: str, allow_truncated: bool = False) -> list[tuple[int, int, list[int]]]:
    from shadow.trace import open_trace

    out = []
    with open_trace(path, allow_truncated=allow_truncated) as tr:
        assert tr.header.block_size_tokens == 32
        for batch in tr:
            for i in range(batch.n_requests):
                rec = batch.records[i]
                out.append((int(rec["input_length"]), int(rec["output_length"]),
                            [int(x) for x in batch.request_blocks(i)]))
    return out


def request(i: int) -> tuple[int, int, list[int]]:
    n_prompt = 1 + i % 7
    return n_prompt * 32 + 5, 3 + i % 4, list(range(1 + i, 1 + i + n_prompt + 1))


def write(rec: Recorder, clock: Clock, i: int) -> None:
    n_in, n_out, blocks = request(i)
    rec.write(clock.t - 0.5, clock.t, n_in, n_out, blocks)


def test_segment_names_carry_engine_and_dp_rank(tmp_path):
    clock = Clock()
    rec = Recorder(str(tmp_path), block_size=32, engine_id="east/1", dp_rank=3, clock=clock)
    write(rec, clock, 0)
    (partial,) = os.listdir(tmp_path)
    assert partial.endswith(".lcp.zst" + PARTIAL_SUFFIX)
    m = _NAME.match(partial)
    assert m and m["engine"] == "east_1" and m["rank"] == "3" and m["seq"] == "000000"
    assert m["ts"] == "20260528T202640Z"  # the UTC start time of the segment
    rec.close()
    (done,) = os.listdir(tmp_path)
    assert done == partial[: -len(PARTIAL_SUFFIX)]  # renamed, not rewritten
    assert rec.finished == [str(tmp_path / done)]
    assert read_requests(rec.finished[0]) == [request(0)]


def test_rotation_by_size_keeps_every_request_in_order(tmp_path):
    clock = Clock()
    rec = Recorder(str(tmp_path), block_size=32, max_bytes=16384, flush_ms=0, clock=clock)
    n = 300
    for i in range(n):
        clock.t += 0.01
        write(rec, clock, i)
    rec.close()
    segs = list_segments(str(tmp_path))
    assert len(segs) >= 2 and segs == rec.finished
    assert not any(s.endswith(PARTIAL_SUFFIX) for s in segs)
    seqs = [int(_NAME.match(os.path.basename(s))["seq"]) for s in segs]
    assert seqs == list(range(len(segs)))
    got = [r for s in segs for r in read_requests(s)]
    assert got == [request(i) for i in range(n)]
    # every finished segment but the last reached the size bound before it was rotated
    assert all(os.path.getsize(s) >= 16384 for s in segs[:-1])
    assert rec.n_recorded == n
    assert rec.bytes_total == sum(os.path.getsize(s) for s in segs)


def test_rotation_by_time_on_write_and_when_idle(tmp_path):
    clock = Clock()
    rec = Recorder(str(tmp_path), block_size=32, max_seconds=60, clock=clock)
    write(rec, clock, 0)
    clock.t += 30
    write(rec, clock, 1)
    assert len(list_segments(str(tmp_path))) == 1
    clock.t += 31  # the open segment is 61 s old: the next write starts a new one
    write(rec, clock, 2)
    assert len(rec.finished) == 1
    clock.t += 61
    rec.idle()  # no traffic: the idle worker still rotates by age
    assert len(rec.finished) == 2
    assert [len(read_requests(s)) for s in rec.finished] == [2, 1]
    assert list_segments(str(tmp_path)) == rec.finished
    rec.close()  # nothing open: no empty segment is left behind
    assert list_segments(str(tmp_path)) == rec.finished


def test_segment_order_follows_time_then_sequence():
    names = ["shadow-e0-dp0-20260101T000001Z-000002.lcp.zst",
             "shadow-e0-dp0-20260101T000000Z-000001.lcp.zst.partial",
             "shadow-e0-dp0-20260101T000000Z-000000.lcp.zst"]
    assert sorted(names, key=segment_sort_key) == [names[2], names[1], names[0]]


def test_unwritable_directory_turns_recording_off_with_one_log_line(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
        rec = Recorder(str(blocker / "rec"), block_size=32)
        for _ in range(3):
            assert rec.write(1.0, 2.0, 40, 2, [1, 2]) is None
        rec.idle()
        rec.close()
    assert not rec.enabled and rec.disabled_reason
    lines = [r for r in caplog.records if "recording to" in r.getMessage()]
    assert len(lines) == 1 and "turned off" in lines[0].getMessage()


def test_directory_vanishing_mid_recording_turns_recording_off(tmp_path, caplog):
    """A write error while recording (here: the directory removed under the writer at rotation)
    stops recording; finished segments written before it stay intact."""
    import shutil

    clock = Clock()
    d = tmp_path / "rec"
    keep = tmp_path / "kept"
    rec = Recorder(str(d), block_size=32, max_seconds=10, clock=clock)
    write(rec, clock, 0)
    clock.t += 11
    write(rec, clock, 1)  # rotates: segment 0 finished
    shutil.copy(rec.finished[0], keep)
    shutil.rmtree(d)
    clock.t += 11
    with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
        assert rec.write(clock.t, clock.t, 40, 2, [1, 2]) is None
        write(rec, clock, 3)
    assert not rec.enabled
    assert sum("turned off" in r.getMessage() for r in caplog.records) == 1
    assert read_requests(str(keep)) == [request(0)]


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from shadow.connector.recorder import Recorder
    rec = Recorder({d!r}, block_size=32, max_bytes=16384, flush_ms=0)
    i = 0
    while True:
        n_prompt = 1 + i % 7
        rec.write(time.time(), time.time(), n_prompt * 32 + 5, 3 + i % 4,
                  list(range(1 + i, 1 + i + n_prompt + 1)))
        i += 1
        if i % 50 == 0:
            print(i, flush=True)
        if i >= {n}:
            print("done", flush=True)
            time.sleep(600)
""")


def test_kill_9_leaves_finished_segments_intact_and_the_partial_readable(tmp_path):
    d = tmp_path / "rec"
    n = 400
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(REPO_ROOT), d=str(d),
                                                                  n=n)],
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "done":
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    segs = list_segments(str(d))
    partial = [s for s in segs if s.endswith(PARTIAL_SUFFIX)]
    finished = [s for s in segs if not s.endswith(PARTIAL_SUFFIX)]
    assert len(partial) == 1 and partial[0] == segs[-1] and finished
    got = [r for s in finished for r in read_requests(s)]
    got += read_requests(partial[0], allow_truncated=True)
    # flushed after every request: nothing written before the kill is lost
    assert got == [request(i) for i in range(n)]

    out = tmp_path / "joined.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert sorted(map(repr, read_requests(str(out)))) == sorted(map(repr, got))
