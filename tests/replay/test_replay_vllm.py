"""replay against a real vLLM OpenAI server on the CPU (tiny model, 127.0.0.1).

Run under ``flock /tmp/vllm.lock`` on a shared machine.  Two server start-ups in all, one at a
time: first a ``--launch``-ed server that is killed mid-run, then one shared (module fixture) by
the one-at-a-time, the concurrent and the Ctrl-C replays.  Each of those uses its own ``--seed``,
so its tokens are new to the cache: the earlier runs' blocks are never hit and sit ahead of every
new block in vLLM's free queue, which is exactly a cold cache of the same capacity.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.vllm_support import REPO_ROOT, parse_prometheus, metric_sum, start_openai_server, \
    tiny_model_path, vllm_available

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

BUNDLED = str(REPO_ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")
# NOTE: trace requests 3965..3989 share heavily (674 of 1305 block accesses) and their working set
# (631 unique blocks at 32 tokens/block) is well above the 256-block cache, so it evicts.
SLICE = ["--skip-requests", "3965", "--max-requests", "25"]
NUM_GPU_BLOCKS = 257  # 256 usable + vLLM's null block
MAX_MODEL_LEN = 4608  # the slice's longest prompt is 4154 tokens
SERVER_ARGS = ["--num-gpu-blocks-override", str(NUM_GPU_BLOCKS), "--max-model-len", str(MAX_MODEL_LEN),
               "--enable-prompt-tokens-details"]
# NOTE: the tiny model's max_position_embeddings is 4096; rope extrapolates fine for a random model.
ENV = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    env.update(ENV)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _replay(args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "replay", *args], cwd=str(REPO_ROOT), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # replay stops a server it launched on SIGTERM
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"replay timed out; stderr:\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def server():
    with start_openai_server(tiny_model_path(), extra_args=SERVER_ARGS, env=ENV,
                             startup_timeout_s=600) as url:
        yield url


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or len(data) < 1000:
        return False
    import matplotlib.image as mpimg

    img = mpimg.imread(path)
    return img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


def _launched(log: Path, deadline: float) -> tuple[int, int]:
    """(pid, port) of the server replay launched, from the line replay writes into its log."""
    while time.monotonic() < deadline:
        if log.is_file():
            m = re.search(r"server http://127\.0\.0\.1:(\d+) pid (\d+)", log.read_text(errors="replace"))
            if m:
                return int(m.group(2)), int(m.group(1))
        time.sleep(0.5)
    raise AssertionError(f"no launched-server line in {log}")


def test_server_dies_mid_run(tmp_path):
    out = tmp_path / "dies"
    model = tiny_model_path()
    launch = (f"--model {model} --dtype float32 --enforce-eager --block-size 32 "
              f"--enable-prefix-caching --max-model-len {MAX_MODEL_LEN} --max-num-seqs 4")
    args = ["--trace", BUNDLED, "--launch", launch, "--tokens-per-block", "32",
            "--max-requests", "60", "--skip-requests", "5", "--max-output-tokens", "24",
            "--concurrency", "1", "--validate", "-o", str(out), "--no-progress",
            "--launch-timeout", "600"]
    proc = subprocess.Popen([sys.executable, "-m", "replay", *args], cwd=str(REPO_ROOT), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = False
    try:
        deadline = time.monotonic() + 700
        pid, port = _launched(out / "server.log", deadline)
        while time.monotonic() < deadline and proc.poll() is None:
            if port:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                        done = metric_sum(parse_prometheus(r.read().decode()), "vllm:request_success_total")
                    if done >= 3:
                        os.killpg(pid, signal.SIGKILL)  # the server dies mid-run
                        killed = True
                        break
                except OSError:
                    pass
            time.sleep(0.2)
        assert killed, "the server never served 3 requests"
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    summ = json.loads((out / "summary.json").read_text())
    assert summ["n_requests"] == 60  # every request is accounted for
    assert summ["n_ok"] >= 3 and summ["n_errors"] >= 1
    assert summ["n_ok"] + summ["n_errors"] == 60
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert sum(1 for x in recs if x["error"]) == summ["n_errors"]
    assert all(x["error"].split(":")[0] in ("connect", "connection", "stream", "timeout", "http")
               for x in recs if x["error"])
    rep = json.loads((out / "report.json").read_text())
    assert rep["validation"]["n_compared"] == summ["n_ok"]
    assert rep["validation"]["match_rate"] == 1.0  # one at a time: exact up to the crash


def test_one_at_a_time_cached_tokens_equal_prediction(server, tmp_path):
    out = tmp_path / "seq"
    r = _replay(["--trace", BUNDLED, "--endpoint", server, *SLICE, "--tokens-per-block", "32",
                 "--max-output-tokens", "8", "--concurrency", "1", "--seed", "1", "--validate",
                 "-o", str(out), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["block_size"] == 32 and rep["num_gpu_blocks"] == NUM_GPU_BLOCKS  # read from the server
    rows = rep["requests"]
    assert len(rows) == 25
    for row in rows:
        assert row["error"] is None, row
        assert row["measured"] is not None, "the server did not report cached tokens"
        assert row["measured"] == row["predicted"], row  # the key property, per request
        assert row["measured"] == row["engine_model"], row
    assert rep["validation"]["match_rate"] == 1.0 and rep["validation"]["n_compared"] == 25
    measured = [row["measured"] for row in rows]
    assert sum(measured) > 0
    # the capacity matters: an unbounded cache would have hit more, so eviction was exercised
    from replay.engine_model import BlockPoolModel, engine_request, unique_keys
    from replay.results import read_results

    _, _, results = read_results(out)
    big, fresh, unbounded = BlockPoolModel(100_000, 32), unique_keys(), 0
    for res in sorted(results, key=lambda x: x.seq):
        er = engine_request(res.blocks, res.tail, 32, 32, res.output_tokens, fresh)
        unbounded += big.admit(res.seq, er) * 32
        big.release(res.seq)
    assert unbounded > sum(measured)
    # the summary agrees with the records
    summ = json.loads((out / "summary.json").read_text())
    assert summ["cached_tokens"] == sum(measured)
    assert summ["n_ok"] == 25 and summ["n_errors"] == 0
    assert summ["prompt_tokens"] == sum(row["prompt_tokens"] for row in rows)


def test_concurrent_replay_and_report(server, tmp_path):
    out = tmp_path / "conc"
    r = _replay(["--trace", BUNDLED, "--endpoint", server, *SLICE, "--tokens-per-block", "32",
                 "--max-output-tokens", "16", "--concurrency", "4", "--seed", "2",
                 "-o", str(out), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "TTFT p50" in r.stdout
    r2 = _replay(["report", str(out), "--policies", "lru,fifo,s3fifo"])
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "match rate" in r2.stdout
    rep = json.loads((out / "report.json").read_text())
    for name in ("ttft_cdf.png", "cached_pred_vs_measured.png", "hit_ratio_over_time.png"):
        assert _is_png(out / name), name
    assert sorted(rep["plots"]) == sorted(["ttft_cdf.png", "cached_pred_vs_measured.png",
                                           "hit_ratio_over_time.png"])
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 25
    recs = [json.loads(x) for x in lines]
    assert all(x["error"] is None and x["ttft_s"] > 0 and x["e2e_s"] >= x["ttft_s"] for x in recs)
    assert all(x["output_tokens"] == x["max_tokens"] for x in recs)  # ignore_eos + max_tokens
    assert all(len(x["itl_s"]) >= 1 for x in recs if x["max_tokens"] > 2)
    # numbers consistent across files
    summ = rep["summary"]
    assert summ["n_requests"] == 25
    assert summ["cached_tokens"] == sum(x["cached_tokens"] for x in recs)
    assert summ["hit_ratio"] == pytest.approx(summ["cached_tokens"] / summ["prompt_tokens"])
    v = rep["validation"]
    assert v["n_compared"] == 25
    assert v["match_rate"] == pytest.approx(v["n_match"] / 25)
    assert len(v["differing"]) == 25 - v["n_match"]
    pol = {p["policy"]: p for p in rep["policies"]}
    assert {"measured", "vllm", "lru", "fifo", "s3fifo"} <= set(pol)
    assert pol["measured"]["hit_ratio"] == pytest.approx(summ["hit_ratio"])
    pm = rep["prefill_model"]
    assert pm is not None and pm["n"] == 25 and len(pm["coef"]) >= 2
    for p in pol.values():
        assert p["ttft_mean_s"] > 0 and p["ttft_p50_s"] <= p["ttft_p90_s"] + 1e-12


def test_ctrl_c_writes_what_was_measured(server, tmp_path):
    out = tmp_path / "intr"
    args = ["--trace", BUNDLED, "--endpoint", server, "--tokens-per-block", "32", "--max-requests", "200",
            "--max-output-tokens", "64", "--concurrency", "2", "--seed", "3", "-o", str(out), "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "replay", *args], cwd=str(REPO_ROOT), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        before = metric_sum(parse_prometheus(urllib.request.urlopen(server + "/metrics").read().decode()),
                            "vllm:request_success_total")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            text = urllib.request.urlopen(server + "/metrics", timeout=5).read().decode()
            if metric_sum(parse_prometheus(text), "vllm:request_success_total") >= before + 3:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-2000:]
    summ = json.loads((out / "summary.json").read_text())
    assert summ["interrupted"] is True
    assert 3 <= summ["n_ok"] < 200 and summ["n_requests"] < 200
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == summ["n_requests"]
    assert all(x["error"] is None or x["error"].startswith("interrupted") for x in recs)


def test_http_errors_and_timeouts_are_counted(server, tmp_path):
    # at 64 tokens per block trace request 0 (79 blocks) is longer than max_model_len: HTTP 400
    out = tmp_path / "toolong"
    r = _replay(["--trace", BUNDLED, "--endpoint", server, "--tokens-per-block", "64",
                 "--max-requests", "4", "--max-output-tokens", "4", "--concurrency", "1", "--seed", "4",
                 "--validate", "-o", str(out), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "exceed the server's max_model_len" in r.stderr
    recs = {x["seq"]: x for x in map(json.loads, (out / "requests.jsonl").read_text().splitlines())}
    assert recs[0]["error"].startswith("http 400") and not recs[0]["reached_engine"]
    assert recs[2]["error"] is None and recs[3]["error"] is None
    rep = json.loads((out / "report.json").read_text())
    assert rep["validation"]["match_rate"] == 1.0
    assert all(row["predicted"] is None for row in rep["requests"] if row["error"])
    # a timeout far below one prefill: every request times out, the run still finishes
    out2 = tmp_path / "timeout"
    r = _replay(["--trace", BUNDLED, "--endpoint", server, "--tokens-per-block", "32", "--skip-requests", "2",
                 "--max-requests", "3", "--max-output-tokens", "200", "--concurrency", "1", "--seed", "5",
                 "--request-timeout", "0.001", "-o", str(out2), "--no-progress"])
    assert r.returncode == 0, r.stderr[-3000:]
    summ = json.loads((out2 / "summary.json").read_text())
    assert summ["errors"] == {"timeout": 3} and summ["n_ok"] == 0
