"""``replay --measure-profile`` and ``replay --validate`` with the profile it measured, against a
real vLLM server on the CPU (tiny model, 127.0.0.1).

Run under ``flock /tmp/vllm.lock`` on a shared machine: one server start-up for the module, with
the replay tests' engine (256 usable blocks of 32 tokens, so the bundled slice evicts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shadow.sim.cost.profile import load_profile
from tests.vllm_support import REPO_ROOT, start_openai_server, tiny_model_path, vllm_available

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

MAX_MODEL_LEN = 4608
NUM_GPU_BLOCKS = 257
SERVER_ARGS = ["--num-gpu-blocks-override", str(NUM_GPU_BLOCKS), "--max-model-len",
               str(MAX_MODEL_LEN), "--enable-prompt-tokens-details"]
BUNDLED = str(REPO_ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")
# NOTE: trace requests 3965..3989 at 32 tokens per block: prompts of 1,960 to 4,150 tokens, hits
# of up to about 4,000 (tests/replay/test_replay_vllm.py); the profile's grid covers them
VALIDATE_GRID = ["--profile-cached", "0,1024,2048,3072", "--profile-new", "32,128,1024",
                 "--profile-repeats", "3"]
ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}
# NOTE: the cached-0 row's points lie 900+ tokens apart (about 20 ms of the tiny model's prefill
# on the CPU): a shared machine's noise stays below the profile's monotone tolerance
GRID = ["--profile-cached", "0,2048", "--profile-new", "64,1024", "--profile-repeats", "3"]


def _replay(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "replay", *args], cwd=str(REPO_ROOT), env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server():
    with start_openai_server(tiny_model_path(), extra_args=SERVER_ARGS, env=ENV,
                             startup_timeout_s=600) as url:
        yield url


def test_measure_profile_writes_a_profile(server, tmp_path):
    out = tmp_path / "prof"
    r = _replay(["--measure-profile", "--endpoint", server, "-o", str(out), "--no-progress",
                 *GRID])
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "profile.jsonl").read_text().splitlines()]
    env, pts = lines[0], lines[1:]
    assert env["env"] is True and env["engine"] == "vllm" and env["block_size"] == 32
    assert env["repeats"] == 3 and env["version"]
    got = sorted((p["cached"], p["new"]) for p in pts)
    # the grid, and the cached-0 row at every cached + new
    want = sorted({(c, n) for c in (0, 2048) for n in (64, 1024)}
                  | {(0, 2048 + n) for n in (64, 1024)})
    assert got == want
    for p in pts:
        assert p["repeats"] >= 3 and 0 < p["min_s"] <= p["s"] <= p["max_s"]
    # every measured request hit exactly its point's cached tokens; each prefix missed
    log = [json.loads(x) for x in (out / "measurements.jsonl").read_text().splitlines()]
    measured = [x for x in log if x["part"] == "measured"]
    assert len(measured) == sum(p["repeats"] for p in pts) + len(pts)   # + a warm-up each
    for x in log:
        assert x["error"] is None and x["ttft_s"] > 0
        assert x["cached_tokens"] == (x["cached"] if x["part"] == "measured" else 0), x
    # it loads as a cost model's profile, and reads its own points back
    prof = load_profile(str(out / "profile.jsonl"))
    for p in pts:
        assert float(prof.seconds(p["cached"], p["new"])) == p["s"]


def test_measure_profile_refuses_what_the_server_cannot_do(server, tmp_path):
    out = tmp_path / "bad"
    r = _replay(["--measure-profile", "--endpoint", server, "-o", str(out), "--no-progress",
                 "--profile-cached", "0,48", "--profile-new", "32"])
    assert r.returncode == 2 and "--profile-cached 48: not a multiple of the engine's block " \
                                 "size 32" in r.stderr, r.stderr
    r = _replay(["--measure-profile", "--endpoint", server, "-o", str(out), "--no-progress",
                 "--profile-cached", "4096", "--profile-new", "1024"])
    assert r.returncode == 2 and f"more than the server's max_model_len {MAX_MODEL_LEN}" \
        in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_validate_predicts_ttft_from_the_measured_profile(server, tmp_path):
    prof_dir = tmp_path / "prof"
    r = _replay(["--measure-profile", "--endpoint", server, "-o", str(prof_dir), "--no-progress",
                 *VALIDATE_GRID])
    assert r.returncode == 0, r.stderr[-3000:]
    profile = prof_dir / "profile.jsonl"
    out = tmp_path / "val"
    r = _replay(["--trace", BUNDLED, "--endpoint", server, "--skip-requests", "3965",
                 "--max-requests", "25", "--tokens-per-block", "32", "--max-output-tokens", "8",
                 "--concurrency", "1", "--seed", "7", "--validate", "--cost-model",
                 f"profile:{profile}", "-o", str(out), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "## TTFT from the profile" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["validation"]["match_rate"] == 1.0
    tp = rep["ttft_prediction"]
    assert tp["n"] == 25 and tp["one_at_a_time"]
    prof = load_profile(str(profile))
    for row in tp["requests"]:
        # one at a time the predicted hit is the engine's, so both predictions agree
        assert row["predicted_cached"] == row["measured_cached"]
        c, n = row["predicted_cached"], row["prompt_tokens"]
        assert row["predicted_s"] == float(prof.seconds(c, n - c))
        assert row["at_measured_hit_s"] == row["predicted_s"] and row["measured_s"] > 0
    e = tp["at_predicted_hit"]
    assert e == tp["at_measured_hit"]
    assert e["total_measured_s"] == pytest.approx(sum(x["measured_s"] for x in tp["requests"]))
    print("\nTTFT from the profile:", json.dumps(e))
