"""`shadow simulate` refuses bad input with one line naming the problem, exit status 2, no
traceback and no output file (a table: one row per case)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.sim._traces import ROOT
from tests.tiers import by_name, unit_rows

CASES = [
    (["-c", "9223372036854775808", "-a", "lru"], "cache size 9223372036854775808 blocks is too large"),
    (["-c", "4g", "-a", "lru"], "cache size 4294967296 blocks is too large"),
    (["-c", "0", "-a", "lru"], "bad cache size '0': must be positive"),
    (["-c", "8k", "-a", "nosuch"], "unknown policy 'nosuch'"),
    (["-c", "8k", "-a", "clock", "--algo-params", "clock:n-bit-counter=0"],
     "policy clock: n-bit-counter must be 1..8"),
    (["-c", "8k", "-a", "s3fifo", "--algo-params", "s3fifo:small-size-ratio=2"],
     "small-size-ratio must be in (0, 1)"),
    (["-c", "8k", "-a", "s3fifo_compute", "--algo-params", "s3fifo_compute:move-to-main-threshold=0"],
     "policy s3fifo_compute: move-to-main-threshold must be in [1, 255], got 0"),
    (["-c", "8k", "-a", "asym_cache", "--algo-params", "asym_cache:reuse-prob=1.5"],
     "policy asym_cache: reuse-prob must be in (0, 1), got 1.5"),
    (["-c", "8k", "-a", "asym_cache", "--algo-params", "asym_cache:slope-ratio=1"],
     "policy asym_cache: slope-ratio must be a finite number > 1, got 1"),
    (["-c", "8k", "-a", "asym_cache_time", "--algo-params", "asym_cache_time:default-lifespan=-5"],
     "policy asym_cache_time: default-lifespan must be a finite number >= 0, got -5"),
    (["-c", "8k", "-a", "workload_aware", "--algo-params", "workload_aware:life=3"],
     "policy workload_aware: unknown parameter 'life' (known: none)"),
    (["-c", "8k", "-a", "partial_node_random_compute_small_queue", "--algo-params",
      "partial_node_random_compute_small_queue:small-size-ratio=1.5"],
     "policy partial_node_random_compute_small_queue: small-size-ratio must be in (0, 1), got 1.5"),
    (["-c", "8k", "-a", "lirs", "--algo-params", "lirs:hirs-ratio=1"],
     "policy lirs: hirs-ratio must be in (0, 1)"),
    (["-c", "8k", "-a", "lru", "--cost-model", "linear:1"], "expected linear:A,B"),
    (["-c", "8k", "-a", "lru", "--threads", "0"], "--threads must be at least 1"),
    (["-c", "8k", "-a", "lecar", "--algo-params", "lecar:learning-rate=-0.1"],
     "policy lecar: learning-rate must be finite and >= 0, got -0.1"),
    (["-c", "8k", "-a", "lecar", "--algo-params", "lecar:lru-weight=1.5"],
     "policy lecar: lru-weight must be in [0, 1], got 1.5"),
    (["-c", "8k", "-a", "cacheus", "--algo-params", "cacheus:seed=-1"],
     "policy cacheus: seed must be in 0..2**64-1, got -1"),
    (["-c", "8k", "-a", "lru", "-t", "/nonexistent.lcp.zst"], "/nonexistent.lcp.zst: no such file"),
    (["-c", "", "-a", "lru"], "-c/--cache-size is empty"),
    (["-c", "1k,,2k", "-a", "lru"], "bad cache size list '1k,,2k': item 2 is empty"),
    (["-c", "1k,2k,", "-a", "lru"], "bad cache size list '1k,2k,': item 3 is empty"),
    (["-c", "8k", "-a", " "], "-a/--algo is empty"),
    (["--bogus"], "No such option '--bogus' (see `shadow simulate --help`)"),
    (["-c", "8k", "stray"], "Got unexpected extra argument (stray) (see `shadow simulate --help`)"),
]


@pytest.mark.parametrize("args,message", unit_rows(CASES, 8, first=4, ids=lambda c: " ".join(c[0])))
def test_simulate_refuses_bad_input_in_one_line(args, message, tmp_path):
    out = tmp_path / "results.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", *args, "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert message in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists()


#: (name, the bytes of FILE in ``--cost-model table:FILE``, words of the one line after FILE).
COST_TABLES = [
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xd8", ":1: not UTF-8 text (byte offset 0)"),
    ("Latin-1 on line 3", b"1\n2\n3\xe9\n", ":3: not UTF-8 text (byte offset 5)"),
    ("NUL bytes", b"\x00\x00\x00\n", ":1: '\\x00\\x00\\x00' is not a number"),
    ("empty", b"", ": the cost table is empty"),
    ("a gap", b"1\n\n2\n", ":2: empty line inside the cost table"),
    ("negative", b"1\n-2\n", ":2: cost '-2' is negative"),
    ("nan", b"nan\n", ":1: 'nan' is not a finite number"),
]


@pytest.mark.parametrize("name,data,words", unit_rows(COST_TABLES, 7, ids=by_name))
def test_a_bad_cost_table_is_named_with_its_line(name, data, words, tmp_path):
    table = tmp_path / "costs.txt"
    table.write_bytes(data)
    test_simulate_refuses_bad_input_in_one_line(
        ["-c", "8k", "-a", "lru", "--cost-model", f"table:{table}"], f"{table}{words}", tmp_path)


#: (options, words): the fleet's refusals (docs/fleet.md, Refusals); ``{untimed}`` is a JSONL
#: trace whose requests have no times, ``{blockless}`` one whose block size is unknown, ``{tmp}``
#: the test's directory.
FLEET_CASES = [
    (["--replicas", "0", "--router", "random"], "--replicas must be between 1 and 4096, got 0"),
    (["--replicas", "4097", "--router", "random"],
     "--replicas must be between 1 and 4096, got 4097"),
    (["--replicas", "x"], "Invalid value for '--replicas': 'x' is not a valid integer"),
    (["--replicas", "2"], "--replicas 2 needs a router to spread the requests"),
    (["--router", "nope"], "unknown router 'nope'"),
    (["--router", ""], "--router is empty"),
    (["--router", "random,random"], "--router lists a router twice"),
    (["--router", "kv_aware:ttl=1"], "--router names routers (R[,R...])"),
    (["--router", "cache_aware", "--router-params", "nope=1"],
     "router cache_aware: unknown parameter 'nope'"),
    (["--router", "kv_aware", "--router-params", "ttl=-1"], "ttl must be >= 0"),
    (["--router", "cache_aware", "--router-params", "cache_threshold=x"],
     "bad value 'x' for cache_threshold"),
    (["--router", "random", "--router-params", "dynamo:seed=1"],
     "--router-params 'dynamo:seed=1': dynamo is not in --router"),
    (["--router-params", "seed=1"], "--router-params without --router"),
    (["--router", "least_load"], "router least_load routes by load, which a time model gives"),
    (["-a", "belady", "--replicas", "2", "--router", "random"],
     "belady (an oracle) cannot run in a fleet of 2"),
    (["--replicas", "2", "--router", "random", "--dump-holes", "{tmp}/holes"],
     "--dump-holes names its files by cache alone"),
    (["--router", "round_robin", "--tier", "cpu:8kblk:lru"], "--tier runs behind one engine"),
    (["--router", "recorded"], "router recorded needs a merged recording"),
    (["-t", "{blockless}", "--router", "dynamo"],
     "blockless.jsonl: router dynamo needs the block size in tokens"),
    (["-t", "{untimed}", "--replicas", "2", "--router", "cache_aware"],
     "untimed.jsonl: request 0 has no time, and router cache_aware needs one"),
    (["-t", "{untimed}", "--router", "round_robin", "--timing", "model"],
     "untimed.jsonl: request 0 has no arrival time"),
]


@pytest.mark.parametrize("args,message", unit_rows(FLEET_CASES, 5, first=1,
                                                   ids=lambda c: " ".join(c[0])))
def test_a_bad_fleet_is_refused_in_one_line(args, message, tmp_path):
    untimed = tmp_path / "untimed.jsonl"
    untimed.write_text('{"hash_ids": [1, 2, 3], "input_length": 48}\n'
                       '{"hash_ids": [1, 2, 4], "input_length": 48}\n')
    blockless = tmp_path / "blockless.jsonl"
    blockless.write_text('{"timestamp": 1, "hash_ids": [1, 2, 3]}\n')
    args = [a.format(untimed=untimed, blockless=blockless, tmp=tmp_path) for a in args]
    if "-a" not in args:
        args = ["-a", "lru", *args]
    test_simulate_refuses_bad_input_in_one_line(["-c", "8k", *args], message, tmp_path)
    assert not (tmp_path / "holes").exists()
