"""`shadow convert` of several replicas' recordings (lcp v2 segments with block keys) into one
fleet trace: every request keeps its replica and its times, ids are shared exactly where the
keys are, sessions span replicas; a fleet that shares no block warns in one line; different
block sizes, a replica name clash and keyed with unkeyed inputs are refused (one line, exit 2,
nothing written).  Recordings are written here with LcpWriter as the connector's recorder
writes them (tests/connector/test_fleet_live.py records real engines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.trace.segments import TYPE_NAMES
from shadow.trace import LcpWriter, open_trace, read_header
from shadow.trace.convert import load_lcp
from shadow.trace.format import empty_records
from tests.trace import bad_inputs as bi

B = 32


def record(d: Path, name: str, replica: str, reqs: list[tuple], *, block_size: int = B,
           keys: bool = True, first_id: int = 1) -> Path:
    """One recorder segment of ``replica``: ``reqs`` = (arrival, start, complete, keys, input,
    output) in completion order; dense ids interned from the keys in order, as the recorder's
    id table does, starting at ``first_id``; the recorder's own session fields (its positions)."""
    ids_of: dict[int, int] = {}
    n = len(reqs)
    rec = empty_records(n)
    flat_ids, flat_keys, lengths = [], [], []
    for i, (arrival, start, done, ks, n_in, n_out) in enumerate(reqs):
        rec[i]["arrival_time_us"], rec[i]["start_time_us"] = arrival, start
        rec[i]["complete_time_us"] = done
        rec[i]["input_length"], rec[i]["output_length"] = n_in, n_out
        rec[i]["chat_id"], rec[i]["session_id"], rec[i]["turn"] = i + 1, i + 1, 1
        rec[i]["replica_id"] = 1
        for k in ks:
            flat_ids.append(ids_of.setdefault(k, first_id + len(ids_of)))
            flat_keys.append(k)
        lengths.append(len(ks))
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    path = d / name
    with LcpWriter(str(path), block_size_tokens=block_size, type_names=TYPE_NAMES,
                   replica_names=[replica], block_keys=keys,
                   version=2) as w:
        w.write_arrays(rec, offsets, np.asarray(flat_ids, dtype=np.int64), None,
                       np.asarray(flat_keys, dtype=np.int64) if keys else None)
    return path


def read(path: Path) -> tuple:
    t = load_lcp(str(path))
    blocks = [t.block_ids[t.offsets[i]:t.offsets[i + 1]].tolist() for i in range(t.n_requests)]
    return read_header(str(path)), list(t.records), blocks


# a conversation: turn 1 on r0, turn 2 (its continuation) on r1; a one-off on each; a shared
# system prompt (keys 11, 12) everywhere
R0 = [(100, 110, 200, [11, 12, 21], 3 * B + 5, 40), (300, 305, 400, [11, 12, 31, 32], 4 * B, 9)]
R0_SEG2 = [(900, 950, 1000, [11, 12, 41], 3 * B + 1, 3)]
R1 = [(250, 260, 350, [11, 12, 21, 22, 23], 5 * B + 2, 8), (500, 520, 600, [11, 12, 51], 3 * B, 2)]


def test_replicas_merge_into_one_trace_that_keeps_replicas_times_and_shared_ids(tmp_path):
    segs = [record(tmp_path, "r0-a.lcp.zst", "r0", R0),
            record(tmp_path, "r0-b.lcp.zst", "r0", R0_SEG2, first_id=100),
            record(tmp_path, "r1-a.lcp.zst", "r1", R1)]
    out = tmp_path / "fleet.lcp.zst"
    r = bi.shadow("convert", *map(str, segs), str(out))
    assert r.returncode == 0, r.stderr
    assert "2 replicas (r0, r1)" in r.stdout and not r.stderr.strip(), (r.stdout, r.stderr)
    h, recs, blocks = read(out)
    assert h.version == 2 and h.replica_names == ["r0", "r1"] and not h.has_block_keys
    assert h.has_next_access and h.is_sorted
    # completion order, each request with its own replica and times
    want = sorted([(done, "r0", a, s) for a, s, done, *_ in R0 + R0_SEG2]
                  + [(done, "r1", a, s) for a, s, done, *_ in R1])
    got = [(int(x["complete_time_us"]), h.replica_name(int(x["replica_id"])),
            int(x["arrival_time_us"]), int(x["start_time_us"])) for x in recs]
    assert got == want
    # ids: one per key, shared across replicas and segments exactly where the keys are
    keys = {200: [11, 12, 21], 350: [11, 12, 21, 22, 23], 400: [11, 12, 31, 32],
            600: [11, 12, 51], 1000: [11, 12, 41]}
    key_of: dict[int, int] = {}
    for x, bl in zip(recs, blocks):
        for k, i in zip(keys[int(x["complete_time_us"])], bl):
            assert key_of.setdefault(i, k) == k
    assert len(key_of) == len({k for ks in keys.values() for k in ks})
    # sessions inferred over the fleet: turn 2 on r1 continues turn 1 on r0
    by_done = {int(x["complete_time_us"]): x for x in recs}
    t1, t2 = by_done[200], by_done[350]
    assert t2["parent_chat_id"] == t1["chat_id"] and t2["session_id"] == t1["session_id"]
    assert t2["turn"] == 2
    assert [int(x["chat_id"]) for x in recs] == list(range(1, len(recs) + 1))


def test_stat_counts_requests_per_replica(tmp_path):
    segs = [record(tmp_path, "a.lcp.zst", "r0", R0), record(tmp_path, "b.lcp.zst", "r1", R1)]
    out = tmp_path / "fleet.lcp"
    assert bi.shadow("convert", *map(str, segs), str(out)).returncode == 0
    r = bi.shadow("stat", str(out))
    assert r.returncode == 0 and "replicas               r0 2, r1 2 requests" in r.stdout, r.stdout


def test_a_fleet_that_shares_no_block_warns_in_one_line(tmp_path):
    other = [(a, s, c, [k + 1000 for k in ks], i, o) for a, s, c, ks, i, o in R1]
    segs = [record(tmp_path, "a.lcp.zst", "r0", R0), record(tmp_path, "b.lcp.zst", "r1", other)]
    out = tmp_path / "fleet.lcp.zst"
    r = bi.shadow("convert", *map(str, segs), str(out))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "share no block" in lines[0] and "fleet_key" in lines[0], lines
    assert out.exists()


def test_one_replica_over_two_recordings_joins_by_keys(tmp_path):
    # a restart: the second process's id table starts at 1 again; the keys tell the blocks apart
    segs = [record(tmp_path, "a.lcp.zst", "r0", R0),
            record(tmp_path, "b.lcp.zst", "r0", R0_SEG2, first_id=1)]
    out = tmp_path / "j.lcp"
    r = bi.shadow("convert", *map(str, segs), str(out))
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    h, recs, blocks = read(out)
    assert h.replica_names == ["r0"]
    assert blocks[2][:2] == blocks[0][:2] and blocks[2][2] not in blocks[0] + blocks[1]


def test_different_block_sizes_are_refused(tmp_path):
    a = record(tmp_path, "a.lcp.zst", "r0", R0)
    b = record(tmp_path, "b.lcp.zst", "r1", R1, block_size=16)
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("convert", str(a), str(b), str(tmp_path / "o.lcp")),
                      [f"{b}: block size 16 tokens differs from {a}'s 32", "do not merge"])
    assert bi.listing(tmp_path) == before


def test_a_replica_name_clash_is_refused(tmp_path):
    # two engines both called "r0", serving at the same time
    a = record(tmp_path, "a.lcp.zst", "r0", R0)
    b = record(tmp_path, "b.lcp.zst", "r0", R1)
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("convert", str(a), str(b), str(tmp_path / "o.lcp.zst")),
                      ["replica name clash: 'r0'", str(a), str(b), "overlap in time"])
    assert bi.listing(tmp_path) == before


def test_keyed_with_unkeyed_inputs_are_refused(tmp_path):
    a = record(tmp_path, "a.lcp.zst", "r0", R0)
    b = record(tmp_path, "b.lcp.zst", "r1", R1, keys=False)
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("convert", str(a), str(b), str(tmp_path / "o.lcp")),
                      [f"{b}: has no block keys"])
    assert bi.listing(tmp_path) == before


def test_the_recorded_router_sends_each_request_where_the_merge_says(tmp_path):
    """shadow.sim.fleet's `recorded` router over a merged recording: each replica serves the
    requests of its own recording (the block lookups of each replica's share)."""
    from shadow.sim import CacheSpec
    from shadow.sim.fleet.router import parse_router
    from shadow.sim.fleet.run import FleetSetup, run_fleet

    segs = [record(tmp_path, "a.lcp.zst", "r0", R0 + R0_SEG2),
            record(tmp_path, "b.lcp.zst", "r1", R1)]
    out = tmp_path / "fleet.lcp.zst"
    assert bi.shadow("convert", *map(str, segs), str(out)).returncode == 0
    with open_trace(str(out)) as tr:
        (res,) = run_fleet([CacheSpec("lru", 64)], tr, 2, parse_router("recorded"),
                           FleetSetup({}, names=tr.header.replica_names))
    assert res.requests == [len(R0 + R0_SEG2), len(R1)]
    v1 = tmp_path / "v1.lcp"
    with LcpWriter(str(v1), block_size_tokens=B) as w:
        w.write_request({"complete_time_us": 5, "input_length": 40}, [1])
    with open_trace(str(v1)) as tr:
        with pytest.raises(ShadowError, match="router recorded needs a merged recording"):
            run_fleet([CacheSpec("lru", 64)], tr, 2, parse_router("recorded"), FleetSetup({}))
