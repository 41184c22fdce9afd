"""The live recording: rotating zstd lcp segments, atomic rename of finished segments, the
engine and DP rank in segment names, a kill -9 leaving the current segment readable up to its
last flushed request, and an unwritable directory or a full disk turning recording off (one log
line) while the process, and the worker that drives the recorder, go on."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from shadow.connector.recorder import Recorder
from shadow.trace.segments import (PARTIAL_SUFFIX, list_segments, quiet_truncation,
                                   segment_sort_key)
from shadow.trace.segments import SEGMENT_NAME_RE as _NAME
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


def files(d) -> list[str]:
    """The directory's entries but the hidden stream lock files (``.shadow-*.lock``)."""
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


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
    (partial,) = files(tmp_path)
    assert partial.endswith(".lcp.zst" + PARTIAL_SUFFIX)
    m = _NAME.match(partial)
    assert m and m["engine"] == "east_1" and m["rank"] == "3" and m["seq"] == "000000"
    assert m["ts"] == "20260528T202640Z"  # the UTC start time of the segment
    rec.close()
    (done,) = files(tmp_path)
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


def _killed_child(tmp_path, n: int = 400) -> str:
    """Run CHILD into tmp_path/rec until it wrote ``n`` requests, kill -9 it; the directory."""
    d = tmp_path / "rec"
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
    return str(d)


@pytest.mark.slow
def test_kill_9_leaves_finished_segments_intact_and_the_partial_readable(tmp_path):
    n = 400
    d = _killed_child(tmp_path, n)
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


# -- faults: the recorder turns itself off, the process (the engine) goes on --------------------
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_SKIP = "running as root: chmod does not stop root from writing"

FULL_DISK_CHILD = textwrap.dedent("""
    import json, os, resource, sys
    sys.path.insert(0, {root!r})
    from shadow.connector.recorder import Recorder

    class Clock:
        t = 1_780_000_000.0
        def __call__(self):
            return self.t

    clock = Clock()
    rec = Recorder({d!r}, block_size=32, max_seconds=60, flush_ms=0, clock=clock)
    for i in range(20):
        rec.write(clock.t, clock.t, 100, 3, list(range(1 + i, 40 + i)))
    clock.t += 61                       # the next write rotates: segment 0 is finished
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))
    off_at = None
    for i in range(20, 20000):
        added = rec.write(clock.t, clock.t, 100, 3, list(range(1 + i, 40 + i)))
        if added is None and off_at is None:
            off_at = i
    rec.idle()
    rec.close()
    print(json.dumps({{"off_at": off_at, "enabled": rec.enabled, "reason": rec.disabled_reason,
                      "finished": rec.finished, "files": sorted(n for n in os.listdir({d!r})
                                                   if not n.startswith("."))}}))
""")


@pytest.mark.slow
def test_a_full_disk_mid_segment_turns_recording_off_and_the_process_goes_on(tmp_path):
    """RLIMIT_FSIZE stands for a full disk (writes past it fail with EFBIG; Python ignores
    SIGXFSZ): the segment being written is dropped, the finished one stays whole, every later
    call returns quietly, one log line says why."""
    import json

    d = tmp_path / "rec"
    limit = 64 << 10
    r = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD.format(root=str(REPO_ROOT),
                                                                       d=str(d), limit=limit)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("turned off") == 1, r.stderr
    out = json.loads(r.stdout)
    assert out["off_at"] is not None and out["off_at"] > 20 and not out["enabled"]
    assert "file too large" in out["reason"]
    assert len(out["finished"]) == 1 and out["files"] == [os.path.basename(out["finished"][0])]
    assert [n for n, _o, _b in read_requests(out["finished"][0])] == [100] * 20


@pytest.mark.skipif(AS_ROOT, reason=ROOT_SKIP)
def test_a_read_only_directory_turns_recording_off_at_start(tmp_path, caplog):
    d = tmp_path / "rec"
    d.mkdir()
    d.chmod(0o555)
    try:
        with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
            rec = Recorder(str(d), block_size=32)
            assert rec.write(1.0, 2.0, 40, 2, [1, 2]) is None
            rec.close()
    finally:
        d.chmod(0o755)
    assert not rec.enabled and "not writable" in rec.disabled_reason
    assert sum("turned off" in r.getMessage() for r in caplog.records) == 1
    assert os.listdir(d) == []


def _one_segment_finished(tmp_path):
    """(clock, directory, recorder): request 0 in a finished segment, request 1 in an open one."""
    clock = Clock()
    d = tmp_path / "rec"
    rec = Recorder(str(d), block_size=32, max_seconds=10, clock=clock)
    write(rec, clock, 0)
    clock.t += 11
    write(rec, clock, 1)                 # rotates: segment 0 finished, segment 1 open
    return clock, d, rec


@pytest.mark.skipif(AS_ROOT, reason=ROOT_SKIP)
def test_a_directory_made_read_only_mid_recording_keeps_the_finished_segments(tmp_path, caplog):
    clock, d, rec = _one_segment_finished(tmp_path)
    d.chmod(0o555)
    try:
        clock.t += 11
        with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
            assert rec.write(clock.t, clock.t, 40, 2, [1, 2]) is None   # cannot rename or open
            write(rec, clock, 3)
            rec.close()
    finally:
        d.chmod(0o755)
    assert not rec.enabled
    assert sum("turned off" in r.getMessage() for r in caplog.records) == 1
    assert read_requests(rec.finished[0]) == [request(0)]


def test_the_directory_replaced_by_a_file_mid_recording_turns_recording_off(tmp_path, caplog):
    """ENOTDIR at rotation (as root too, where chmod does not restrict)."""
    import shutil

    clock, d, rec = _one_segment_finished(tmp_path)
    kept = tmp_path / "kept.lcp.zst"
    shutil.copy(rec.finished[0], kept)
    shutil.rmtree(d)
    d.write_text("not a directory")
    clock.t += 11
    with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
        assert rec.write(clock.t, clock.t, 40, 2, [1, 2]) is None
        rec.idle()
        rec.close()
    assert not rec.enabled and rec.disabled_reason
    assert sum("turned off" in r.getMessage() for r in caplog.records) == 1
    assert read_requests(str(kept)) == [request(0)]


def test_the_worker_goes_on_when_its_recorder_cannot_write(tmp_path):
    """The connector's worker with a recorder that cannot write: every request is still
    simulated and predicted, no worker error is counted, recording shows as off."""
    from shadow.connector.config import parse_extra_config
    from shadow.connector.worker import Admit, Release, ShadowWorker

    blocker = tmp_path / "file"
    blocker.write_text("x")
    rec = Recorder(str(blocker / "rec"), block_size=4)
    cfg = parse_extra_config({"policies": ["vllm", "lru"], "capacity_factors": [1]},
                             block_size=4, engine_blocks=8)
    w = ShadowWorker(cfg, recorder=rec)
    try:
        for i in range(5):
            hashes = [f"h:{i}:{j}".encode() for j in range(2)]
            assert w.submit(Admit(f"r{i}", hashes, 9, 0, False, 1.0))
            w.submit_control(Release(f"r{i}", [], 1, 2.0, 0, 1))
        assert w.flush()
        assert [p.request_id for p in w.predictions] == [f"r{i}" for i in range(5)]
        snap = w.snapshot
        assert snap.worker[2] == 0 and snap.recording_enabled == 0
    finally:
        w.stop()


# -- lifecycle: restarts, streams, orphans, retention -------------------------------------------
def test_a_restart_in_the_same_second_appends_a_new_run_after_the_old_one(tmp_path):
    """Two recorders one after the other (a restart) at the same clock second: the second run
    starts at seq 0 with a later name time, nothing is overwritten, and the directory sorts the
    old run first."""
    from shadow.trace.segments import scan_segments, split_runs

    clock = Clock()
    a = Recorder(str(tmp_path), block_size=32, max_bytes=16384, flush_ms=0, clock=clock)
    for i in range(120):
        write(a, clock, i)
    a.close()
    b = Recorder(str(tmp_path), block_size=32, max_bytes=16384, flush_ms=0, clock=clock)
    for i in range(120, 150):
        write(b, clock, i)
    b.close()
    segs = scan_segments(str(tmp_path))
    assert [s.path for s in segs] == a.finished + b.finished
    runs = split_runs(segs)
    assert [[s.path for s in r] for r in runs] == [a.finished, b.finished]
    assert [s.seq for s in runs[1]] == list(range(len(b.finished)))
    assert runs[1][0].opened_at_s > max(s.opened_at_s for s in runs[0])
    got = [r for s in segs for r in read_requests(s.path)]
    assert got == [request(i) for i in range(150)]


def test_two_live_writers_of_one_engine_and_rank_get_two_streams(tmp_path, caplog, monkeypatch):
    """A second live recorder on the same engine id and rank (another server with the default
    engine_id) writes as <engine>_2, with one warning; the names never clash."""
    import shadow.connector.recorder as recorder
    from shadow.trace.segments import parse_segment, scan_segments

    monkeypatch.setattr(recorder, "CLAIM_WAIT_S", 0.0)   # NOTE: the 2 s wait is for sealers
    clock = Clock()
    a = Recorder(str(tmp_path), block_size=32, engine_id="srv", clock=clock)
    with caplog.at_level(logging.WARNING, logger="shadow.connector.recorder"):
        b = Recorder(str(tmp_path), block_size=32, engine_id="srv", clock=clock)
    assert a.prefix == "shadow-esrv-dp0" and b.prefix == "shadow-esrv_2-dp0"
    assert sum("records as shadow-esrv_2-dp0" in r.getMessage() for r in caplog.records) == 1
    for i in range(10):
        write(a if i % 2 else b, clock, i)
    a.close()
    b.close()
    segs = scan_segments(str(tmp_path))
    assert sorted(s.engine for s in segs) == ["srv", "srv_2"]
    assert sorted(r for s in segs for r in read_requests(s.path)) == sorted(
        request(i) for i in range(10))
    # released: a third recorder takes the configured name again
    c = Recorder(str(tmp_path), block_size=32, engine_id="srv", clock=clock)
    assert c.prefix == "shadow-esrv-dp0"
    c.close()
    assert parse_segment(segs[0].path).prefix == "shadow-esrv-dp0"


@pytest.mark.slow
def test_a_restarted_recorder_seals_the_orphan_its_killed_predecessor_left(tmp_path, caplog):
    """kill -9 leaves a .partial; the next recorder of the stream rewrites its complete prefix
    under the final name (no warning when read), keeps its time, and starts a run after it."""
    d = _killed_child(tmp_path)
    (orphan,) = [s for s in list_segments(d) if s.endswith(PARTIAL_SUFFIX)]
    before = read_requests(orphan, allow_truncated=True)
    mtime = os.stat(orphan).st_mtime
    from shadow.trace import read_header

    header = read_header(orphan)
    from shadow.trace.convert import load_lcp

    with quiet_truncation():
        keys = load_lcp(orphan, allow_truncated=True).block_keys
    assert header.has_block_keys and keys.shape[0] > 0
    with caplog.at_level(logging.INFO):
        rec = Recorder(d, block_size=32)
    final = orphan[:-len(PARTIAL_SUFFIX)]
    assert rec.sealed == [(final, len(before), rec.sealed[0][2])]
    assert not os.path.exists(orphan) and os.path.exists(final)
    assert os.stat(final).st_mtime == mtime
    from dataclasses import fields

    from shadow.trace.format import FLAG_COUNTS_VALID
    from shadow.trace.header import LcpHeader
    from shadow.trace.segments import SEALED_MARK

    sealed = read_header(final)
    assert sealed.producer == header.producer + SEALED_MARK
    # every other header field kept as the writer made it; the counts filled in and valid
    counts = {"n_requests", "n_block_accesses", "n_unique_blocks", "max_blocks_per_request",
              "n_sessions", "n_users", "first_complete_time_us", "last_complete_time_us"}
    for f in fields(LcpHeader):
        if f.name not in counts | {"flags", "producer"}:
            assert getattr(sealed, f.name) == getattr(header, f.name), f.name
    assert sealed.flags == header.flags | FLAG_COUNTS_VALID
    assert sealed.n_requests == len(before)
    with caplog.at_level(logging.WARNING, logger="shadow.trace.reader"):
        caplog.clear()
        assert read_requests(final) == before
    assert not caplog.records
    assert (load_lcp(final).block_keys == keys).all()    # each block's key kept
    rec.write(1.0, 2.0, 40, 2, [1, 2])
    rec.close()
    assert list_segments(d)[-1] == rec.finished[0]
    assert _NAME.match(os.path.basename(rec.finished[0]))["seq"] == "000000"


LIVE_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from shadow.connector.recorder import Recorder
    rec = Recorder({d!r}, block_size=32, flush_ms=0)
    rec.write(1.0, 2.0, 40, 2, [1, 2])
    print("ready", flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_sealing_leaves_a_stream_that_a_live_process_writes_alone(tmp_path):
    from shadow.trace.segments import seal_orphans, stream_is_live

    d = str(tmp_path / "rec")
    proc = subprocess.Popen([sys.executable, "-c", LIVE_CHILD.format(root=str(REPO_ROOT), d=d)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        (partial,) = list_segments(d)
        assert stream_is_live(d, "shadow-e0-dp0")
        assert seal_orphans(d) == []
        assert list_segments(d) == [partial]
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not stream_is_live(d, "shadow-e0-dp0")
    ((final, n, _torn),) = seal_orphans(d)   # its writer is gone now: an orphan
    assert n == 1 and list_segments(d) == [final]


@pytest.mark.slow
def test_a_watcher_seals_the_open_segment_once_its_writer_is_gone(tmp_path, caplog):
    """What the API server runs beside its engine cores (shadow.connector.connector
    .seal_orphans_of): a live writer's segment is left alone, and sealed within a poll or two
    after the writer is killed."""
    import threading
    import time

    from shadow.trace.segments import seal_when_gone

    d = str(tmp_path / "rec")
    stop = threading.Event()
    watcher = threading.Thread(target=seal_when_gone, args=(d, stop), kwargs={"poll_s": 0.05})
    watcher.start()      # NOTE: before the directory exists, as in a starting server
    proc = subprocess.Popen([sys.executable, "-c", LIVE_CHILD.format(root=str(REPO_ROOT), d=d)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        (partial,) = list_segments(d)
        time.sleep(0.5)
        assert list_segments(d) == [partial]           # ten looks: the live writer's, kept
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while list_segments(d) != [partial[:-len(PARTIAL_SUFFIX)]]:
            assert time.monotonic() < deadline, list_segments(d)
            time.sleep(0.05)
    finally:
        stop.set()
        watcher.join(30)
        proc.kill()
        proc.wait(timeout=30)
    with caplog.at_level(logging.WARNING, logger="shadow.trace.reader"):
        caplog.clear()
        assert len(read_requests(list_segments(d)[0])) == 1
    assert not caplog.records


def _sizes(d) -> int:
    return sum(os.path.getsize(s) for s in list_segments(str(d)))


def test_retention_by_bytes_deletes_whole_segments_oldest_first_never_the_open_one(tmp_path):
    clock = Clock()
    keep = 64 << 10
    rec = Recorder(str(tmp_path), block_size=32, max_bytes=16384, flush_ms=0, clock=clock,
                   keep_bytes=keep)
    n = 3000
    for i in range(n):
        clock.t += 0.01
        write(rec, clock, i)
        assert rec.bytes_on_disk == _sizes(tmp_path)
        assert rec.bytes_on_disk <= keep + 16384 + 4096   # one request past a rotation at most
    segs = list_segments(str(tmp_path))
    assert rec.segments_deleted > 0 and segs[-1].endswith(PARTIAL_SUFFIX)
    kept = set(segs[:-1])
    deleted = [s for s in rec.finished if s not in kept]
    assert len(deleted) == rec.segments_deleted
    assert rec.finished[:len(deleted)] == deleted          # the oldest went first
    # what is left is the newest requests, complete and in order
    got = [r for s in segs for r in read_requests(s, allow_truncated=s.endswith(PARTIAL_SUFFIX))]
    assert got == [request(i) for i in range(n - len(got), n)]
    rec.close()
    assert rec.bytes_on_disk == _sizes(tmp_path) <= keep + 16384


def test_retention_by_age_when_idle_and_across_a_restart(tmp_path):
    clock = Clock()
    a = Recorder(str(tmp_path), block_size=32, max_seconds=60, clock=clock)
    for i in range(4):            # four segments, 61 s apart
        write(a, clock, i)
        clock.t += 61
    a.close()
    assert len(list_segments(str(tmp_path))) == 4
    # ages 183, 122, 61 and 0 s: a restarted recorder keeping 100 s deletes the two older
    b = Recorder(str(tmp_path), block_size=32, max_seconds=60, clock=clock, keep_seconds=100)
    assert b.segments_deleted == 2 and list_segments(str(tmp_path)) == a.finished[2:]
    write(b, clock, 10)           # open: never deleted, however old
    clock.t += 1000
    b.idle()                      # the age rotation finishes it; the older ones go
    assert b.segments_deleted == 4
    assert list_segments(str(tmp_path)) == b.finished
    clock.t += 1000
    b.idle()
    assert b.segments_deleted == 5 and list_segments(str(tmp_path)) == []
    b.close()


@pytest.mark.slow
def test_a_seal_cut_short_is_redone_and_its_temporary_removed(tmp_path):
    """A seal killed before its rename leaves the orphan and a .tmp- temporary; the next seal
    removes the temporary and seals the orphan."""
    from shadow.atomic import create_temp
    from shadow.trace.segments import seal_orphans

    d = _killed_child(tmp_path, 60)
    (orphan,) = [s for s in list_segments(d) if s.endswith(PARTIAL_SUFFIX)]
    stale = create_temp(orphan[:-len(PARTIAL_SUFFIX)])
    stale.write_bytes(b"half a segment")
    ((final, n, _torn),) = seal_orphans(d)
    assert n > 0 and not stale.exists() and final == orphan[:-len(PARTIAL_SUFFIX)]
    assert sorted(os.listdir(d)) == sorted([".shadow-e0-dp0.lock"] + [
        os.path.basename(s) for s in list_segments(d)])
