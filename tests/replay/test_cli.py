"""The replay command line without a vLLM server: every --help, one-line errors, a refused server,
and `replay report` on a results directory written by hand from the bundled trace."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from replay.cli import cli
from replay.results import RequestResult, read_results, summarize, write_results
from replay.workload import load_requests
from tests.vllm_support import REPO_ROOT, free_port
from tests.tiers import by_name, unit_rows

BUNDLED = str(REPO_ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "replay", *args], cwd=str(REPO_ROOT), env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [["--help"], ["report", "--help"], ["-h"]])
def test_every_help(args):
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output
    assert "Usage: " in r.output
    if args == ["report", "--help"]:
        assert "RESULTS" in r.output and "--num-gpu-blocks" in r.output
    else:
        for opt in ("--trace", "--endpoint", "--launch", "--tokens-per-block", "--speedup", "--rate",
                    "--burstiness", "--concurrency", "--max-requests", "--duration",
                    "--max-output-tokens", "--validate", "--vocab-size"):
            assert opt in r.output, opt


def test_console_script_help():
    r = _run("--help")
    assert r.returncode == 0 and "report" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args,msg", [
    (["--trace", "/nonexistent.jsonl", "--endpoint", "http://127.0.0.1:9"], "no such trace file"),
    (["--trace", BUNDLED, "--endpoint", "http://127.0.0.1:9", "--rate", "0"], "'--rate': '0' must be > 0"),
    (["--trace", BUNDLED, "--endpoint", "http://127.0.0.1:9", "--rate", "1", "--speedup", "2"],
     "exclude each other"),
    (["--trace", BUNDLED, "--endpoint", "http://127.0.0.1:9", "--max-output-tokens", "0"],
     "'--max-output-tokens': '0' must be >= 1"),
])
def test_bad_input_is_one_line(args, msg):
    _one_line(_run(*args), msg)


def _one_line(r, msg):
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("replay: error: ") and msg in lines[0], r.stderr


def test_a_bad_profile_is_one_line_before_any_request(tmp_path):
    """--validate and `replay report` with a profile the loader refuses: its one line (file and
    line), exit 2, before any server is contacted or any report written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"cached": 0, "new": 100, "s": 0.01}\n{"cached": 0, "new": 200, "s": -1}\n')
    want = f"{bad}:2: s is -1, not a finite number of seconds > 0"
    _one_line(_run("--trace", BUNDLED, "--endpoint", "http://127.0.0.1:9", "--validate",
                   "--cost-model", f"profile:{bad}", "-o", str(tmp_path / "out")), want)
    assert not (tmp_path / "out").exists()
    d = tmp_path / "res"
    write_results(d, [], {"tokens_per_block": 32, "engine_block_size": 32, "num_gpu_blocks": 257},
                  summarize([]))
    _one_line(_run("report", str(d), "--cost-model", f"profile:{bad}"), want)
    assert not (d / "report.json").exists()


@pytest.mark.slow
def test_server_down_is_one_line():
    port = free_port()
    r = _run("--trace", BUNDLED, "--endpoint", f"http://127.0.0.1:{port}")
    assert r.returncode == 2
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("replay: error: ") and f"127.0.0.1:{port}/v1/models" in line
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_usage_errors():
    r = _run("--endpoint", "http://127.0.0.1:9")
    assert r.returncode == 2 and "--trace is required" in r.stderr
    r = _run("--trace", BUNDLED)
    assert r.returncode == 2 and "exactly one of --endpoint and --launch" in r.stderr
    r = _run("--trace", BUNDLED, "--launch", "--model x --port 5")
    assert r.returncode == 2 and "do not pass --port" in r.stderr


def test_refused_requests_are_counted(tmp_path):
    """The client records every refused request and still writes results and a summary."""
    import asyncio

    from replay.client import ClientConfig, run_requests
    from replay.timing import make_timing
    from replay.tokens import TokenSynth, Vocab

    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, max_requests=4, max_output_tokens=2)
    synth = TokenSynth(Vocab(1000))
    cfg = ClientConfig(endpoint=f"http://127.0.0.1:{free_port()}", model="m", request_timeout_s=5)
    timing = make_timing(speedup=None, rate=None, burstiness=1, concurrency=2, duration_s=None)
    results, interrupted = asyncio.run(run_requests(
        cfg, specs, [0.0] * 4, timing, lambda s: synth.prompt(s.blocks, 32, s.index, s.tail)))
    assert not interrupted and len(results) == 4
    assert all(r.error and r.error.startswith("connect:") and not r.reached_engine for r in results)
    s = summarize(results)
    assert s["n_errors"] == 4 and s["errors"] == {"connect": 4} and s["n_ok"] == 0
    write_results(tmp_path, results, {"tokens_per_block": 32}, s)
    d, run, back = read_results(tmp_path)
    assert [r.seq for r in back] == [r.seq for r in results] and run == {"tokens_per_block": 32}


@pytest.mark.slow
def test_report_from_results_written_by_hand(tmp_path):
    """`replay report` on records shaped like a one-at-a-time run: numbers, files, plots."""
    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, skip_requests=3965, max_requests=25,
                                max_output_tokens=8)
    from replay.engine_model import BlockPoolModel, engine_request, unique_keys

    pool, fresh = BlockPoolModel(257, 32), unique_keys()
    results = []
    for i, s in enumerate(specs):
        hit = pool.admit(i, engine_request(s.blocks, s.tail, 32, 32, s.max_tokens, fresh)) * 32
        pool.release(i)
        u = s.prompt_tokens - hit
        results.append(RequestResult(
            index=s.index, seq=i, blocks=list(s.blocks), tail=s.tail, prompt_tokens=s.prompt_tokens,
            max_tokens=s.max_tokens, sent_s=float(i), end_s=i + 0.5, reached_engine=True,
            output_tokens=s.max_tokens, cached_tokens=hit, ttft_s=0.01 + 2e-5 * u + 1e-9 * u * u,
            e2e_s=0.4, first_token_s=i + 0.1, itl_s=[0.01] * (s.max_tokens - 1), status=200))
    results[3].cached_tokens += 32  # one request the prediction must flag
    write_results(tmp_path, results, {"tokens_per_block": 32, "engine_block_size": 32,
                                      "num_gpu_blocks": 257}, summarize(results))
    r = CliRunner().invoke(cli, ["report", str(tmp_path), "--policies", "lru,fifo"])
    assert r.exit_code == 0, r.output
    assert "24 of 25 requests match" in r.output
    rep = json.loads((tmp_path / "report.json").read_text())
    v = rep["validation"]
    assert v["n_compared"] == 25 and v["n_match"] == 24 and v["match_rate"] == pytest.approx(0.96)
    assert [d["seq"] for d in v["differing"]] == [3]
    assert rep["prefill_model"]["r2"] > 0.999 and len(rep["prefill_model"]["coef"]) == 3
    pol = {p["policy"]: p for p in rep["policies"]}
    assert set(pol) == {"measured", "vllm", "lru", "fifo"}
    total = sum(s.prompt_tokens for s in specs)
    assert pol["vllm"]["hit_ratio"] == pytest.approx((sum(x.cached_tokens for x in results) - 32) / total)
    assert pol["vllm"]["prefill_saving"] > 0
    for name in rep["plots"]:
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")
    assert len(rep["plots"]) == 3
    assert (tmp_path / "report.md").read_text().startswith("# Replay validation report")
    # missing capacity: a clear one-line error
    os.remove(tmp_path / "run.json")
    r = _run("report", str(tmp_path))
    assert r.returncode == 2 and "--num-gpu-blocks" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_report_predicts_ttft_from_a_profile(tmp_path):
    """`replay report --cost-model profile:FILE`: each request's TTFT from the profile at the
    predicted hit and at the measured one, errors per request and in total, by hand."""
    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, skip_requests=3965, max_requests=6,
                                max_output_tokens=4)
    from replay.engine_model import BlockPoolModel, engine_request, unique_keys
    from shadow.sim.cost.profile import load_profile

    prof = tmp_path / "prof.jsonl"
    prof.write_text("".join(json.dumps({"cached": c, "new": n, "s": 0.01 + 1e-5 * n + 2e-9 * c * n})
                            + "\n" for c in (0, 2048, 8192) for n in (1, 512, 4096, 8192)))
    t = load_profile(str(prof)).seconds
    pool, fresh = BlockPoolModel(257, 32), unique_keys()
    results = []
    for i, s in enumerate(specs):
        hit = pool.admit(i, engine_request(s.blocks, s.tail, 32, 32, s.max_tokens, fresh)) * 32
        pool.release(i)
        results.append(RequestResult(
            index=s.index, seq=i, blocks=list(s.blocks), tail=s.tail, prompt_tokens=s.prompt_tokens,
            max_tokens=s.max_tokens, sent_s=float(i), end_s=i + 0.5, reached_engine=True,
            output_tokens=s.max_tokens, cached_tokens=hit, ttft_s=0.02 + 0.001 * i,
            e2e_s=0.4, first_token_s=i + 0.1, status=200))
    results[2].cached_tokens += 32          # the engine hit one block more than predicted
    d = tmp_path / "res"
    write_results(d, results, {"tokens_per_block": 32, "engine_block_size": 32,
                               "num_gpu_blocks": 257, "timing": {"concurrency": 1}},
                  summarize(results))
    r = CliRunner().invoke(cli, ["report", str(d), "--policies", "lru", "--cost-model",
                                 f"profile:{prof}"])
    assert r.exit_code == 0, r.output
    assert "## TTFT from the profile" in r.output
    tp = json.loads((d / "report.json").read_text())["ttft_prediction"]
    assert tp["n"] == 6 and tp["one_at_a_time"]
    pred, meas, at_meas = [], [], []
    for res, row in zip(results, tp["requests"]):
        c = row["predicted_cached"]
        n = res.prompt_tokens
        assert c == (res.cached_tokens - (32 if res.seq == 2 else 0))
        assert row["predicted_s"] == float(t(c, n - c))
        assert row["at_measured_hit_s"] == float(t(res.cached_tokens, n - res.cached_tokens))
        assert row["error_s"] == pytest.approx(row["predicted_s"] - res.ttft_s)
        pred.append(row["predicted_s"])
        meas.append(res.ttft_s)
        at_meas.append(row["at_measured_hit_s"])
    e = tp["at_predicted_hit"]
    assert e["total_predicted_s"] == pytest.approx(sum(pred))
    assert e["total_measured_s"] == pytest.approx(sum(meas))
    assert e["total_error"] == pytest.approx(sum(pred) / sum(meas) - 1)
    rel = [(p - m) / m for p, m in zip(pred, meas)]
    assert e["mean_abs_rel_error"] == pytest.approx(sum(abs(x) for x in rel) / 6)
    assert e["largest_abs_rel_error"] == pytest.approx(max(abs(x) for x in rel))
    assert tp["at_measured_hit"]["total_predicted_s"] == pytest.approx(sum(at_meas))
    assert tp["at_measured_hit"]["total_predicted_s"] < e["total_predicted_s"]   # one more hit
    # without a profile: no TTFT prediction
    r = CliRunner().invoke(cli, ["report", str(d), "--policies", "lru"])
    assert json.loads((d / "report.json").read_text())["ttft_prediction"] is None


@pytest.mark.slow
def test_report_on_a_non_results_dir(tmp_path):
    r = _run("report", str(tmp_path))
    assert r.returncode == 2 and "not a replay results directory" in r.stderr
    (tmp_path / "requests.jsonl").write_text('{"index": 1}\nnot json\n')
    r = _run("report", str(tmp_path), "--num-gpu-blocks", "10", "--engine-block-size", "32",
             "--tokens-per-block", "32")
    assert r.returncode == 2 and "requests.jsonl:1:" in r.stderr


def test_console_script_declared():
    import importlib
    import tomllib

    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, attr = scripts["replay"].split(":")
    assert getattr(importlib.import_module(module), attr) is __import__("replay.cli").cli.main


def test_summary_says_how_to_enable_cached_tokens():
    from replay.results import summary_text

    rs = [RequestResult(index=i, seq=i, blocks=[1], tail=0, prompt_tokens=32, max_tokens=2, sent_s=0.0,
                        end_s=1.0, ttft_s=0.1, e2e_s=0.5, output_tokens=2, reached_engine=True)
          for i in range(3)]
    s = summarize(rs)
    assert s["cached_tokens_reported"] is False and s["hit_ratio"] is None
    assert "--enable-prompt-tokens-details" in summary_text(s)
    rs[0].cached_tokens, rs[1].cached_tokens, rs[2].cached_tokens = 0, 16, 32
    s = summarize(rs)
    assert s["hit_ratio"] == pytest.approx(48 / 96) and "hit ratio 0.5000" in summary_text(s)
    assert s["ttft_s"]["p50"] == pytest.approx(0.1) and s["throughput_req_s"] == pytest.approx(3.0)


def test_progress_bar_draws_only_when_enabled(capsys):
    from replay.client import Progress

    p = Progress(2, enabled=True)
    p.update(True)
    p.update(False)
    p.close()
    err = capsys.readouterr().err
    assert "2/2 errors 1" in err and err.endswith("\n")
    q = Progress(2, enabled=False)
    q.update(True)
    q.close()
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("args,words", [
    (["--rate", "nan"], "'--rate': 'nan' is not a finite number"),
    (["--speedup", "inf"], "'--speedup': 'inf' is not a finite number"),
    (["--tokens-per-block", "0"], "'--tokens-per-block': '0' must be >= 1"),
    (["--request-timeout", "-1"], "'--request-timeout': '-1' must be > 0"),
    (["--skip-requests", "-3"], "'--skip-requests': '-3' must be >= 0"),
    (["--concurrency", "x"], "'--concurrency': 'x' is not an integer"),
])
def test_bad_option_values_are_refused_before_connecting(args, words, tmp_path):
    """Checked when the command line is parsed: one line, exit 2, nothing written."""
    out = tmp_path / "out"
    r = _run("--trace", BUNDLED, "--endpoint", "http://127.0.0.1:9", "-o", str(out), *args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("replay: error: ") and words in lines[0], lines[0]
    assert not out.exists()


def _damaged_lcp(d):
    from tests.trace.bad_inputs import LCP_DAMAGE, damaged, make_base

    path, _ = damaged(d, make_base(d), dict(LCP_DAMAGE)["type id past the table"], "t.lcp")
    return path


def _damaged_jsonl(d):
    from tests.trace.bad_inputs import jsonl_file

    return jsonl_file(d, b'{"timestamp": -5, "hash_ids": [1]}')


#: (name, the trace from a directory, options, words): refused before any server is launched or
#: contacted, so the line names the trace or the option, never the connection.
BEFORE_THE_SERVER = [
    ("damaged lcp", _damaged_lcp, [], "type id 9 beyond the header's 2 request types"),
    ("damaged JSONL", _damaged_jsonl, [], "t.jsonl:2: timestamp -5 is negative"),
    ("--skip-requests past the end", None, ["--skip-requests", "99999999"],
     "no requests to send (check --skip-requests/--max-requests)"),
    ("--tokens-per-block not a multiple of --engine-block-size", None,
     ["--tokens-per-block", "48", "--engine-block-size", "32"],
     "--tokens-per-block 48 is not a multiple of the engine's block size 32"),
    ("--validate with a bad --cost-model", None, ["--validate", "--cost-model", "linear:1"],
     "expected linear:A,B"),
    ("--validate with a missing --recording", None,
     ["--validate", "--recording", "/nonexistent/rec"],
     "--recording /nonexistent/rec: no such file or directory"),
]


@pytest.mark.parametrize("server", unit_rows(["--endpoint", "--launch"], 2))
@pytest.mark.parametrize("name,trace,args,words", unit_rows(BEFORE_THE_SERVER, 3, ids=by_name))
def test_the_trace_and_options_are_checked_before_the_server(name, trace, args, words, server,
                                                             tmp_path):
    path = trace(tmp_path) if trace else BUNDLED
    out = tmp_path / "out"
    # NOTE: a launch that replay refuses itself (--port), so that no server starts even if the
    # order of the checks regresses
    where = (f"http://127.0.0.1:{free_port()}" if server == "--endpoint"
             else "--model /nonexistent --port 5")
    r = _run("--trace", str(path), server, where, "-o", str(out), *args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("replay: error: ") and words in lines[0], lines[0]
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.parametrize("args,words", [
    (["--profile-cached", "0,abc"], "bad --profile-cached value 'abc': expected an integer >= 0"),
    (["--profile-new", "0"], "bad --profile-new value '0': expected an integer >= 1"),
    (["--profile-new", ","], "empty --profile-new list"),
    (["--profile-repeats", "0"], "'--profile-repeats': '0' must be >= 1"),
    (["--trace", BUNDLED], "--measure-profile measures a grid, not a trace: no --trace"),
    (["--validate"], "--validate is for a trace's replay, not --measure-profile"),
])
def test_measure_profile_bad_options_before_connecting(args, words, tmp_path):
    out = tmp_path / "out"
    r = _run("--measure-profile", "--endpoint", "http://127.0.0.1:9", "-o", str(out), *args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
    assert len([ln for ln in lines if ln.startswith(("replay: error: ", "Error: "))]) == 1


def test_measure_profile_grid():
    from replay.measure import Grid, check_grid, parse_token_list

    g = Grid(parse_token_list("0,1k,64", "--profile-cached", 0), parse_token_list("32,32", "x", 1))
    assert g.cached == (0, 64, 1024) and g.new == (32,)
    assert g.points() == [(0, 32), (0, 96), (0, 1056), (64, 32), (1024, 32)]
    check_grid(g, 32, 1057)
    from shadow.errors import ShadowError
    with pytest.raises(ShadowError, match="cached 0, new 1056 needs 1057 tokens"):
        check_grid(g, 32, 1056)
    with pytest.raises(ShadowError, match="--profile-cached 64: not a multiple of the engine's "
                                          "block size 48"):
        check_grid(g, 48, None)
