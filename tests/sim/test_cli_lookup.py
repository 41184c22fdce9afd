"""``--lookup all|prompt|vllm`` (and ``Simulator(lookup=)``) on a hand-made recorded trace.

A recorded request holds its prompt blocks, then its generated-token blocks; ``input_length``
says where the prompt ends (block size B = 16 tokens here).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.sim.simulator import lookup_counts
from shadow.trace.batch import Batch
from shadow.trace.format import RECORD_DTYPE
from tests.sim._traces import random_trace

B = 16
# (input_length, blocks): prompt blocks then generated blocks
RECORDED = [
    (40, [1, 2, 3, 4, 5]),        # prompt 3 blocks (2 full + 8 tokens), 2 generated
    (48, [1, 2, 3, 6]),           # prompt exactly 3 blocks, 1 generated
    (80, [1, 2, 3, 4, 5, 7]),     # a follow-up turn: prompt = the first turn + its output
    (0, [8]),                     # nothing of the prompt: nothing looked up
]
# looked up per request: all = every block; prompt = input_length // B; vllm = (input_length-1)//B
EXPECT = {
    "all": ([5, 4, 6, 1], 16, 0 + 3 + 5 + 0),
    "prompt": ([2, 3, 5, 0], 10, 0 + 3 + 5 + 0),
    "vllm": ([2, 2, 4, 0], 8, 0 + 2 + 4 + 0),
}


def _records(inputs, lengths):
    rec = np.zeros(len(inputs), dtype=RECORD_DTYPE)
    for f in ("start_time_us", "complete_time_us", "chat_id", "parent_chat_id", "session_id",
              "session_next_req"):
        rec[f] = -1
    rec["input_length"] = inputs
    rec["n_blocks"] = lengths
    return rec


def _batch():
    reqs = [b for _, b in RECORDED]
    return Batch.from_lists(reqs, records=_records([i for i, _ in RECORDED], [len(r) for r in reqs]))


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_lookup_counts(mode):
    b = _batch()
    got = lookup_counts(b.records, np.diff(b.offsets), mode, B)
    assert (got is None) if mode == "all" else (got.tolist() == EXPECT[mode][0])


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_simulator_lookup_statistics(mode):
    sim = Simulator([CacheSpec("lru", 64)], lookup=mode, block_size_tokens=B)
    sim.feed(_batch())
    r = sim.results()[0]
    assert (r.n_blocks, r.n_hits) == EXPECT[mode][1:]
    assert r.hole_len_sum == r.n_blocks - r.n_hits
    # every block of the trace is resident, looked up or not
    assert sorted(sim.runs[0].policy.resident_ids()) == list(range(1, 9))


def test_unlooked_blocks_take_capacity_and_pins():
    # 5 slots: request 0 fills them all (2 looked up, 3 only inserted); request 1's missing block 6
    # must evict one, and with pinning its looked-up hits 1, 2, 3 are not candidates.
    sim = Simulator([CacheSpec("lru", 5)], lookup="prompt", block_size_tokens=B)
    sim.feed(_batch())
    r = sim.results()[0]
    assert sim.runs[0].policy.n_resident <= 5
    assert r.n_eviction >= 1 and r.n_self_eviction == 0 and r.error is None


def test_lookup_needs_block_size():
    with pytest.raises(ShadowError, match="block size"):
        Simulator([CacheSpec("lru", 8)], lookup="prompt")
    with pytest.raises(ShadowError, match="lookup mode"):
        Simulator([CacheSpec("lru", 8)], lookup="some")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", ["lru", "clock", "s3fifo", "vllm"])
def test_partial_lookup_same_as_reference_loop(name, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 150, n_roots=3, max_len=10, n_raw=4)
    lengths = [len(r) for r in trace]
    inputs = [int(rng.integers(0, B * n + 1)) for n in lengths]
    for mode in ("prompt", "vllm"):
        for cap in (6, 17):
            sim = Simulator([CacheSpec(name, cap)], lookup=mode, block_size_tokens=B,
                            cost_model="position")
            sim.feed(Batch.from_lists(trace, records=_records(inputs, lengths)))
            ref = RefCache(make_reference(name, cap), cap, cost_model="position")
            k = lookup_counts(_records(inputs, lengths), np.array(lengths), mode, B)
            for req, m in zip(trace, k):
                ref.serve(req, n_match=int(m))
            got = sim.results()[0]
            want = ref.stats()
            for key in ("n_req", "n_blocks", "n_hits", "n_prefix_hits", "n_eviction",
                        "n_self_eviction", "n_unexpected_eviction"):
                assert getattr(got, key) == want[key], (key, mode, cap)
            assert got.saved_cost == pytest.approx(want["saved_cost"])


def _write_recorded(path):
    from shadow.trace.writer import LcpWriter

    with LcpWriter(str(path), block_size_tokens=B) as w:
        for inp, blocks in RECORDED:
            w.write_request({"input_length": inp, "n_blocks": len(blocks)}, blocks)


@pytest.mark.parametrize("mode", ["all", "prompt", "vllm"])
def test_cli_lookup(tmp_path, mode):
    path = tmp_path / "recorded.lcp"
    _write_recorded(path)
    r = CliRunner().invoke(cli, ["simulate", "--trace", str(path), "-c", "64", "--algo", "lru",
                                 "--lookup", mode], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("RESULT"))
    kv = dict(p.split("=", 1) for p in line.split()[1:])
    n_blocks, n_hits = EXPECT[mode][1:]
    assert int(kv["n_blocks"]) == n_blocks
    assert float(kv["block_hit_ratio"]) == pytest.approx(n_hits / n_blocks, abs=1e-6)


def test_cli_lookup_without_block_size_is_one_line_error(tmp_path):
    from shadow.trace.writer import LcpWriter

    path = tmp_path / "nobs.lcp"
    with LcpWriter(str(path)) as w:
        w.write_request({"input_length": 16, "n_blocks": 1}, [1])
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "--trace", str(path), "-c", "8",
                        "--algo", "lru", "--lookup", "prompt"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "block size" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_help_mentions_lookup_and_threads():
    r = CliRunner().invoke(cli, ["simulate", "--help"])
    assert "--lookup" in r.output and "--threads" in r.output
