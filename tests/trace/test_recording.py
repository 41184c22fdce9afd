"""A recording directory is a trace: `shadow convert DIR`, `stat DIR` and `simulate -t DIR` read
every segment in order (engine, DP rank, start time; the open `.partial` last, its complete
prefix only), across restarts (each run its own block ids; chat ids and sessions kept apart, or
kept linked where the records continue the numbering), and say in one line how many segments,
restarts and torn tails they read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from shadow.connector.recorder import Recorder
from shadow.trace import LcpWriter, open_trace
from shadow.trace.recording import load_recording
from shadow.trace.segments import (PARTIAL_SUFFIX, TYPE_NAMES, list_segments, segment_name,
                                   segment_prefix)
from tests.tiers import by_name, unit_rows
from tests.trace.bad_inputs import REPO, assert_refused, shadow

T0 = 1_780_000_000.0
B = 32


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def conversation(base: int, turns: int) -> list[tuple[int, int, list[int]]]:
    """(input tokens, output tokens, block ids) of a conversation whose every turn continues the
    previous one's whole block sequence (so the recorder infers one session)."""
    out, blocks = [], []
    for t in range(turns):
        blocks = blocks + [base + 10 * t + k for k in range(3)]
        n_in = len(blocks) * B
        out.append((n_in, B, list(blocks)))
        blocks = blocks + [base + 10 * t + 3]     # the generated block continues it
        out[-1] = (n_in, B, list(blocks))
    return out


def run(d, clock: Clock, reqs, *, engine: str = "0", rank: int = 0, close: bool = True,
        max_bytes: int = 1 << 20) -> Recorder:
    rec = Recorder(str(d), block_size=B, engine_id=engine, dp_rank=rank, clock=clock,
                   flush_ms=0, max_bytes=max_bytes)
    for n_in, n_out, blocks in reqs:
        clock.t += 1
        rec.write(clock.t - 0.5, clock.t, n_in, n_out, blocks)
    if close:
        rec.close()
    return rec


KILLED = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from shadow.connector.recorder import Recorder
    rec = Recorder({d!r}, block_size=32, engine_id="b", flush_ms=0)
    for i in range(5):
        rec.write(time.time(), time.time(), 100, 10, [1, 2, 3, 4 + i])
    print("done", flush=True)
    time.sleep(600)
""")


def kill_9_after_writing(d) -> None:
    """A recorder of engine ``b`` writes 5 requests (one session root each: no shared end) and
    is killed: its segment stays ``.partial`` (a torn tail when read)."""
    proc = subprocess.Popen([sys.executable, "-c", KILLED.format(root=str(REPO), d=str(d))],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "done"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture()
def recording(tmp_path):
    """Engine 0: two runs (a restart), each one 3-turn conversation over the same block ids;
    engine b: one killed run of 5 requests (a torn tail)."""
    d = tmp_path / "rec"
    clock = Clock()
    run(d, clock, conversation(1, 3), max_bytes=4096)     # rotates after every request
    run(d, clock, conversation(1, 3))                     # restarted: ids and chats from 1
    kill_9_after_writing(d)
    return d


@pytest.mark.slow
def test_a_directory_reads_as_one_trace_across_restarts(recording):
    trace, s = load_recording(str(recording))
    assert (s.segments, s.streams, s.runs, s.restarts, s.torn_tails, s.open_segments) == (
        5, 2, 3, 1, 1, 0)
    assert s.requests == trace.n_requests == 11
    assert s.line().endswith(": 5 segments of 2 engine/rank streams, 1 restart, 1 torn tail,"
                             " 11 requests")
    rec = trace.records
    # the two runs of engine 0 used the same ids for different blocks: kept apart
    per_run_unique = 3 * 4          # each run: 3 turns x 4 new blocks
    assert int(trace.block_ids.max()) == 2 * per_run_unique + 4 + 4   # + engine b's
    # chat ids stay distinct, each run's conversation stays one session of its own
    assert len(set(rec["chat_id"].tolist())) == 11
    sessions = {}
    for sid, turn in zip(rec["session_id"], rec["turn"]):
        sessions.setdefault(int(sid), []).append(int(turn))
    sizes = sorted(len(v) for v in sessions.values())
    assert sizes == [1, 1, 1, 1, 1, 3, 3]
    assert all(sorted(v) == list(range(1, len(v) + 1)) for v in sessions.values())


@pytest.mark.slow
def test_convert_dir_reads_every_segment_and_says_so_in_one_line(recording, tmp_path):
    out = tmp_path / "joined.lcp.zst"
    r = shadow("convert", str(recording), str(out))
    assert r.returncode == 0, r.stderr
    assert "read " + str(recording) + ": 5 segments of 2 engine/rank streams, 1 restart, 1 torn" \
        " tail, 11 requests" in r.stdout
    # the torn tail's own warning (which file, which byte offset), once
    (warning,) = r.stderr.splitlines()
    assert "truncated" in warning and "shadow-eb-dp0-" in warning and "byte offset" in warning
    with open_trace(str(out)) as tr:
        assert tr.header.n_requests == 11 and tr.header.n_sessions == 7
    # stat and simulate read the directory as the converted file
    st = shadow("stat", str(recording))
    assert st.returncode == 0 and "1 restart, 1 torn tail" in st.stdout
    a = shadow("simulate", "-t", str(recording), "-a", "lru,fifo", "-c", "4,16")
    b = shadow("simulate", "-t", str(out), "-a", "lru,fifo", "-c", "4,16")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    def results(r) -> list[str]:   # the RESULT lines, less the trace's name
        return [ln.split(" ", 2)[2] for ln in r.stdout.splitlines() if ln.startswith("RESULT")]

    assert len(results(a)) == 4 and results(a) == results(b)
    assert "format recording" in a.stdout


@pytest.mark.slow
def test_final_segments_only_read_without_a_warning(tmp_path):
    """What a clean stop leaves (every segment final): no warning, no torn tail."""
    d = tmp_path / "rec"
    clock = Clock()
    run(d, clock, conversation(1, 4), max_bytes=4096)
    run(d, clock, conversation(100, 2), engine="0", rank=1)
    r = shadow("convert", str(d), str(tmp_path / "o.lcp.zst"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert "2 engine/rank streams, 0 restarts, 0 torn tails, 6 requests" in r.stdout


@pytest.mark.slow
def test_the_open_segment_is_read_to_its_last_flush_without_a_warning(tmp_path):
    """A live writer's .partial (its stream lock held) is the open segment, not a torn tail."""
    d = tmp_path / "rec"
    clock = Clock()
    live = run(d, clock, conversation(1, 3), close=False)
    try:
        assert list_segments(str(d))[-1].endswith(PARTIAL_SUFFIX)
        _trace, s = load_recording(str(d))
        assert (s.open_segments, s.torn_tails, s.requests) == (1, 0, 3)
        r = shadow("convert", str(d), str(tmp_path / "o.lcp.zst"))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert "1 open (read to its last flush)" in r.stdout
    finally:
        live.close()


def test_a_run_that_continues_the_numbering_keeps_its_links(tmp_path):
    """Records whose chat ids continue an earlier run's (and name a parent there) stay one
    session with it: ids are moved apart only for a run that numbers from 1 again."""
    d = tmp_path / "rec"
    d.mkdir()
    prefix = segment_prefix("0", 0)

    def segment(t: float, seq: int, rows) -> None:
        path = d / segment_name(prefix, t, seq)
        with LcpWriter(str(path), block_size_tokens=B, type_names=TYPE_NAMES) as w:
            for chat, parent, session, turn, blocks in rows:
                w.write_request({"start_time_us": int(t * 1e6), "complete_time_us":
                                 int(t * 1e6) + chat, "chat_id": chat, "parent_chat_id": parent,
                                 "session_id": session, "turn": turn, "input_length": 96,
                                 "output_length": 4}, blocks)

    segment(T0, 0, [(1, -1, 1, 1, [1, 2]), (2, 1, 1, 2, [1, 2, 3])])
    segment(T0 + 10, 0, [(3, 2, 1, 3, [1, 2, 3, 4])])     # a new run, numbering continued
    segment(T0 + 20, 0, [(1, -1, 1, 1, [1, 2])])          # a new run from 1: its own session
    trace, s = load_recording(str(d))
    assert s.restarts == 2
    rec = trace.records
    assert rec["chat_id"].tolist() == [1, 2, 3, 4]
    assert rec["parent_chat_id"].tolist() == [-1, 1, 2, -1]
    assert rec["session_id"].tolist() == [1, 1, 1, 4]
    assert rec["session_next_req"].tolist() == [2, 3, -1, -1]
    # and the block ids of the three runs never meet
    assert np.unique(trace.block_ids).shape[0] == 3 + 4 + 2


ARGS = [
    ("an empty directory", ["convert", "{d}/empty", "{d}/o.lcp"],
     ["{d}/empty: is a directory without recording segments"]),
    ("stat of an empty directory", ["stat", "{d}/empty"], ["is a directory without"]),
    ("simulate of an empty directory", ["simulate", "-t", "{d}/empty", "-c", "8"],
     ["is a directory without"]),
    ("a recording beside a file", ["convert", "{d}/rec", "{seg}", "{d}/o.lcp"],
     ["{d}/rec: a recording directory is read on its own"]),
]


@pytest.mark.parametrize("name,args,words", unit_rows(ARGS, 4, ids=by_name))
def test_bad_directories_are_refused_in_one_line(name, args, words, tmp_path):
    (tmp_path / "empty").mkdir()
    run(tmp_path / "rec", Clock(), conversation(1, 1))
    seg = list_segments(str(tmp_path / "rec"))[0]
    fmt = [a.format(d=tmp_path, seg=seg) for a in args]
    before = sorted(os.listdir(tmp_path))
    assert_refused(shadow(*fmt), [w.format(d=tmp_path) for w in words])
    assert sorted(os.listdir(tmp_path)) == before


@pytest.fixture()
def quick_claims(monkeypatch):
    """A held stream lock is given up at once (the recorder waits 2 s for a sealer to finish)."""
    import shadow.connector.recorder as recorder

    monkeypatch.setattr(recorder, "CLAIM_WAIT_S", 0.0)


def test_two_servers_under_one_name_read_as_two_replicas(tmp_path, quick_claims):
    """Two live recorders of one engine id and one replica name (two servers on one host with
    the defaults): the second writes stream ``0_2``; the directory reads as a fleet of two
    replicas, the second named ``host@0_2``, each request under its own writer's name."""
    d = tmp_path / "rec"
    clock = Clock()
    a = Recorder(str(d), block_size=B, engine_id="0", replica="host", clock=clock, flush_ms=0)
    b = Recorder(str(d), block_size=B, engine_id="0", replica="host", clock=clock, flush_ms=0)
    assert (a.prefix, b.prefix) == ("shadow-e0-dp0", "shadow-e0_2-dp0")
    for i in range(6):                 # interleaved in time: the two overlap
        clock.t += 1
        (a if i % 2 == 0 else b).write(clock.t - 0.5, clock.t, 4 * B, B, [1, 2, 3, 4 + i],
                                       block_keys=[11, 12, 13, 20 + i])
    a.close()
    b.close()
    trace, s = load_recording(str(d))
    assert s.streams == 2 and trace.n_requests == 6
    assert trace.replica_names == ["host", "host@0_2"]
    assert trace.records["replica_id"].tolist() == [1, 2, 1, 2, 1, 2]
    r = shadow("stat", str(d))
    assert r.returncode == 0 and "clash" not in r.stderr, r.stderr


def test_one_name_at_different_times_stays_one_replica(tmp_path, quick_claims):
    """A stream ``0_2`` whose requests come after stream ``0``'s ended (a restart that found the
    old lock still held) is the same replica over time: no second name."""
    d = tmp_path / "rec"
    clock = Clock()
    a = Recorder(str(d), block_size=B, engine_id="0", replica="host", clock=clock, flush_ms=0)
    b = Recorder(str(d), block_size=B, engine_id="0", replica="host", clock=clock, flush_ms=0)
    for rec in (a, b):
        for i in range(2):
            clock.t += 1
            rec.write(clock.t - 0.5, clock.t, 4 * B, B, [1, 2, 3, 4 + i])
        rec.close()
    trace, _ = load_recording(str(d))
    assert trace.replica_names == ["host"]
