"""Trace -> requests (scaling, tail, output cap) and the send schedules."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from replay.timing import make_timing, send_times
from replay.workload import check_tokens_per_block, load_requests, scale_tail
from shadow.errors import ShadowError
from tests.vllm_support import REPO_ROOT

BUNDLED = str(REPO_ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")


@pytest.mark.parametrize("n,L,S,T,expect", [
    (79, 40160, 512, 32, (78, 14)),    # 224 of 512 tail tokens -> 14 of 32
    (79, 40160, 512, 512, (78, 224)),  # unscaled: the trace's own tail
    (2, 1024, 512, 32, (2, 0)),        # a multiple of the block size: no tail
    (3, 0, 512, 32, (3, 0)),           # no input length: all blocks full
    (3, 5000, 512, 32, (3, 0)),        # longer than the blocks: inconsistent, all full
    (1, 5, 512, 32, (0, 1)),           # a tiny tail rounds up to one token
    (1, 511, 512, 32, (0, 31)),        # never a whole block
    (0, 0, 512, 32, (0, 0)),
])
def test_scale_tail(n, L, S, T, expect):
    assert scale_tail(n, L, S, T) == expect


def test_load_bundled_slice():
    tbs, tpb, specs = load_requests(BUNDLED, tokens_per_block=32, skip_requests=2, max_requests=5,
                                    max_output_tokens=50)
    assert (tbs, tpb) == (512, 32)
    rows = [json.loads(x) for x in open(BUNDLED).read().splitlines()[2:7]]
    assert [s.index for s in specs] == [2, 3, 4, 5, 6]
    assert specs[0].arrival_s == 0.0
    assert [s.arrival_s for s in specs] == pytest.approx([(r["timestamp"] - rows[0]["timestamp"]) / 1e3 for r in rows])
    for s, r in zip(specs, rows):
        assert s.prompt_tokens == len(s.blocks) * 32 + s.tail and 0 <= s.tail < 32
        assert len(s.blocks) in (len(r["hash_ids"]), len(r["hash_ids"]) - 1)
        assert s.max_tokens == min(50, r["output_length"])
        assert s.trace_input_length == r["input_length"]


def test_shared_prefix_gives_equal_block_ids():
    # requests whose hash_ids share a prefix get equal interned ids over that prefix
    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, skip_requests=3965, max_requests=25)
    seen: set[int] = set()
    shared = 0
    for s in specs:
        shared += sum(1 for b in s.blocks if b in seen)
        seen.update(s.blocks)
    assert shared > 300


def test_tokens_per_block_must_divide():
    check_tokens_per_block(64, 32)
    with pytest.raises(ShadowError, match="multiple of the engine's block size 32"):
        check_tokens_per_block(48, 32)
    with pytest.raises(ShadowError, match="must be positive"):
        check_tokens_per_block(0, 32)


def test_timing_modes():
    assert make_timing(speedup=None, rate=None, burstiness=1, concurrency=None, duration_s=None).mode == "trace"
    assert make_timing(speedup=None, rate=None, burstiness=1, concurrency=1, duration_s=None).mode == "closed"
    assert make_timing(speedup=2, rate=None, burstiness=1, concurrency=3, duration_s=None).mode == "trace"
    assert make_timing(speedup=None, rate=5, burstiness=1, concurrency=None, duration_s=None).mode == "rate"
    assert make_timing(speedup=None, rate=math.inf, burstiness=1, concurrency=None, duration_s=None).mode == "closed"
    for bad in (dict(speedup=0), dict(rate=-1), dict(burstiness=0), dict(concurrency=0), dict(duration_s=0),
                dict(speedup=1, rate=1)):
        kw = dict(speedup=None, rate=None, burstiness=1, concurrency=None, duration_s=None)
        kw.update(bad)
        with pytest.raises(ShadowError):
            make_timing(**kw)


def test_trace_times_with_speedup():
    t = make_timing(speedup=4, rate=None, burstiness=1, concurrency=None, duration_s=None)
    assert send_times(t, [10.0, 10.0, 14.0, 30.0]).tolist() == [0.0, 0.0, 1.0, 5.0]


def test_closed_loop_all_ready():
    t = make_timing(speedup=None, rate=None, burstiness=1, concurrency=2, duration_s=None)
    assert send_times(t, [0.0, 5.0, 9.0]).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_rate_mean_and_burstiness(burstiness):
    t = make_timing(speedup=None, rate=20.0, burstiness=burstiness, concurrency=None, duration_s=None, seed=3)
    times = send_times(t, np.zeros(20001))
    gaps = np.diff(times)
    assert times[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    # gamma(shape k): coefficient of variation 1/sqrt(k); Poisson (k = 1) has CV 1
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.08)
    assert np.array_equal(times, send_times(t, np.zeros(20001)))  # deterministic per seed


@pytest.mark.slow
def test_lcp_zst_gives_the_same_requests(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "m.lcp.zst"
    subprocess.run([sys.executable, "-m", "shadow", "convert", BUNDLED, str(out)], cwd=str(REPO_ROOT),
                   check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    a = load_requests(str(out), tokens_per_block=32, skip_requests=3960, max_requests=30)
    b = load_requests(BUNDLED, tokens_per_block=32, skip_requests=3960, max_requests=30)
    assert a == b and len(a[2]) == 30
