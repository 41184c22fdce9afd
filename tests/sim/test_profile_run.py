"""``--cost-model profile:FILE`` through run() and the commands: at the bundled H200 table's own
points a trace built to hit them gives ``prefill_s_saved`` equal to the table's
``t(0, c + n) - t(c, n)`` summed over its requests, under every driver; the RESULT keys; sweep's
CSV; the block-size binding; the refusals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.core.results import EXTRA_KEYS, RESULT_KEYS, CacheSpec
from shadow.sim.cost.models import parse_cost_model
from shadow.sim.core.prefill import PREFILL_KEYS
from shadow.sim.cost.profile import load_profile
from shadow.sim.run import RunSpec, run
from shadow.sweep.store import parse_result_line
from shadow.trace.writer import LcpWriter
from tests.sim.test_cost_profile import BAD_PROFILES
from tests.tiers import unit_rows

ROOT = Path(__file__).resolve().parents[2]
H200 = str(ROOT / "shadow" / "data" / "h200_prefill.jsonl")
B = 256        # divides every cached and new count of the table


def _hit_trace(path: Path, model: str, block_size: int = B, times: bool = False) -> float:
    """Per measured point (c > 0, n): a request of the c-token prefix alone, then one of the
    prefix and n new tokens (its first c tokens cached by the one before).  Returns the table's
    sum of t(0, c + n) - t(c, n) over the second requests; every t(0, c + n) is itself a
    measured point of the table (asserted), so nothing in it is interpolated."""
    pts = load_profile(H200, model).points()
    want = 0.0
    nid = 1
    t = 0
    with LcpWriter(str(path), block_size_tokens=block_size) as w:
        for (c, n), s in sorted(pts.items()):
            if c == 0:
                continue
            assert (0, c + n) in pts
            want += pts[(0, c + n)] - s
            prefix = list(range(nid, nid + c // B))
            nid += c // B
            suffix = list(range(nid, nid + n // B))
            nid += n // B
            for ids, inp in ((prefix, c), (prefix + suffix, c + n)):
                rec = {"input_length": inp, "output_length": 1}
                if times:
                    rec.update(start_time_us=t, complete_time_us=t + 10)
                    t += 20
                w.write_request(rec, ids)
    return want


def _run(path, cost, **kw):
    spec = RunSpec.from_options([CacheSpec("lru", 100_000), CacheSpec("vllm", 100_000)],
                                cost_model=cost, **kw)
    with spec.open_trace(path) as tr:
        return run(spec, tr)


@pytest.mark.parametrize("model", ["llama3_8b", "qwen25_7b"])
@pytest.mark.parametrize("how", [dict(), dict(lookup="vllm"), dict(timing="recorded"),
                                 dict(tiers=["cpu:1g:lru"], bytes_per_block=1024)])
def test_saved_seconds_are_the_tables_at_its_own_points(tmp_path, model, how):
    path = tmp_path / "hits.lcp"
    want = _hit_trace(path, model, times=True)
    res = _run(path, f"profile:{H200},model={model}", **how)
    assert len(res.prefill) == 2
    prof = load_profile(H200, model)
    pts = prof.points()
    # NOTE: the prefix requests' own prefill, t(0, c), hits nothing; for c = 28,672 it is
    # interpolated (the table has 20,480 and 28,928), the only value here that is not measured
    no_hit = sum(float(prof.seconds(0, c)) + pts[(0, c + n)] for (c, n) in pts if c)
    for tot in res.prefill:
        assert tot.n_req == 30
        assert tot.saved_s == pytest.approx(want, rel=1e-12)
        assert tot.no_hit_s == pytest.approx(no_hit, rel=1e-12)
        assert tot.ratio == pytest.approx(want / no_hit, rel=1e-12)
    for r in res.caches:
        for line in res.result_lines(r):
            f = parse_result_line(line)
            assert f["prefill_s_saved"] == f"{want:.6f}"
            assert f["ttft_saving_ratio"] == f"{want / no_hit:.6f}"
            assert f["prefill_s"] == f"{no_hit - want:.6f}"
            assert list(f)[-3:] == list(PREFILL_KEYS)


def test_the_existing_keys_stay_as_they_are(tmp_path):
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "llama3_8b")
    prof = _run(path, f"profile:{H200},model=llama3_8b")
    uni = _run(path, "uniform")
    assert not uni.prefill
    for a, b in zip(prof.caches, uni.caches):
        fa = parse_result_line(prof.result_lines(a)[0])
        fb = parse_result_line(uni.result_lines(b)[0])
        assert list(fa) == list(RESULT_KEYS + EXTRA_KEYS + PREFILL_KEYS)
        assert list(fb) == list(RESULT_KEYS + EXTRA_KEYS)
        for k in ("n_req", "n_blocks", "block_hit_ratio", "prefix_hit_ratio", "n_eviction"):
            assert fa[k] == fb[k]
        assert fa["cost_model"] == f"profile:{H200},model=llama3_8b"


def test_block_costs_are_bound_to_the_traces_block_size(tmp_path):
    cost = parse_cost_model(f"profile:{H200},model=qwen25_7b")
    assert cost.unit == "s" and cost.profile is not None
    with pytest.raises(ShadowError, match="block costs need the block size in tokens"):
        cost.costs(4)
    a, b, d = cost.profile.coef
    bound = cost.for_block_size(16)
    assert bound.costs(3) == pytest.approx([b * 16 + d * 256 * (p + 0.5) for p in range(3)])
    # policies see microseconds
    assert bound.int_costs(3).tolist() == [round(x * 1e6) for x in bound.costs(3)]
    assert bound.for_block_size(16) is bound and bound.profile is cost.profile
    assert parse_cost_model("uniform").for_block_size(16).name == "uniform"
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "qwen25_7b")
    spec = RunSpec.from_options([CacheSpec("gdsf", 1000)], cost_model=cost)
    with spec.open_trace(path) as tr:
        bound_spec = spec.bind(tr.header, path)
    assert bound_spec.cost.block_tokens == B and spec.cost.block_tokens == 0


def test_a_trace_without_block_size_or_prompt_lengths_is_refused(tmp_path):
    path = tmp_path / "nob.lcp"
    _hit_trace(path, "llama3_8b", block_size=0)
    with pytest.raises(ShadowError, match=r"nob\.lcp: --cost-model profile:.* needs the block "
                                          r"size in tokens"):
        _run(path, f"profile:{H200},model=llama3_8b")
    path = tmp_path / "nolen.lcp"
    with LcpWriter(str(path), block_size_tokens=16) as w:
        w.write_request({"input_length": 32}, [1, 2])
        w.write_request({"input_length": 0}, [1, 2, 3])
    with pytest.raises(ShadowError, match=r"nolen\.lcp: request 1 has no prompt length"):
        _run(path, f"profile:{H200},model=llama3_8b")


def test_live_spec_binds_the_engines_block_size():
    cost = parse_cost_model(f"profile:{H200},model=llama3_8b")
    spec = RunSpec.live([CacheSpec("lru", 64)], cost=cost, block_size=32)
    assert spec.cost.unit == "s" and spec.cost.block_tokens == 32


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_simulate_and_sweep_print_the_keys(tmp_path):
    path = tmp_path / "hits.lcp"
    want = _hit_trace(path, "llama3_8b")
    cm = f"profile:{H200},model=llama3_8b"
    r = _cli("simulate", "-t", str(path), "-a", "lru,s3fifo", "-c", "100k", "--cost-model", cm)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 2
    for ln in lines:
        assert parse_result_line(ln)["prefill_s_saved"] == f"{want:.6f}"
    out = tmp_path / "sw"
    r = _cli("sweep", "-t", str(path), "-a", "lru", "-c", "50k,100k", "--cost-model", cm,
             "--out", str(out), "-j", "1")
    assert r.returncode == 0, r.stderr
    import csv
    rows = list(csv.DictReader((out / "results.csv").open()))
    assert len(rows) == 2
    assert all(row["prefill_s_saved"] == f"{want:.6f}" for row in rows)
    assert set(PREFILL_KEYS) <= set(rows[0])


@pytest.mark.parametrize("cm, words", [
    (f"profile:{H200}", "points of several models (llama3_8b, qwen25_7b)"),
    (f"profile:{H200},model=gpt", "no point of model 'gpt'"),
    ("profile:/nonexistent.jsonl", "cannot read it"),
    (f"profile:{H200},block=16", "unknown parameter 'block=16'"),
])
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_bad_profiles_on_the_command_line(tmp_path, cm, words, command):
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "llama3_8b")
    out = tmp_path / "sw"
    extra = ["--out", str(out)] if command == "sweep" else []
    r = _cli(command, "-t", str(path), "-a", "lru", "-c", "1k", "--cost-model", cm, *extra)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and words in lines[0], r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


def test_a_fleet_with_a_profile_is_refused(tmp_path):
    """A fleet meters no prefill seconds: refused in one line rather than printed without."""
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "llama3_8b")
    with pytest.raises(ShadowError, match=r"--cost-model profile:.* meters one engine's prefill "
                                          r"seconds: a fleet \(--router\) does not report them"):
        RunSpec.from_options([CacheSpec("lru", 1000)],
                             cost_model=f"profile:{H200},model=llama3_8b", replicas=2,
                             router="random")
    r = _cli("simulate", "-t", str(path), "-a", "lru", "-c", "1k", "--cost-model",
             f"profile:{H200},model=llama3_8b", "--replicas", "2", "--router", "random")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "a fleet (--router)" in lines[0], r.stderr


@pytest.mark.parametrize("rows, match", unit_rows(BAD_PROFILES, 4))
def test_every_bad_profile_is_one_line_and_exit_2(tmp_path, rows, match):
    """Each refusal of the profile loader, through simulate: one line naming the file (and its
    line), exit 2, no traceback, nothing written."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "llama3_8b")
    out = tmp_path / "out.json"
    r = _cli("simulate", "-t", str(path), "-a", "lru", "-c", "1k", "--cost-model",
             f"profile:{bad}", "-o", str(out))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and str(bad) in lines[0], r.stderr
    assert re.search(match, lines[0]) and "Traceback" not in r.stderr and not out.exists()


def test_a_non_monotone_file_is_named_with_its_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps({"cached": 0, "new": n, "s": s}) + "\n"
                           for n, s in ((256, 0.1), (512, 0.2), (1024, 0.05))))
    path = tmp_path / "hits.lcp"
    _hit_trace(path, "llama3_8b")
    r = _cli("simulate", "-t", str(path), "-a", "lru", "-c", "1k", "--cost-model",
             f"profile:{bad}")
    assert r.returncode == 2 and f"{bad}:3: not monotone in new tokens" in r.stderr, r.stderr


def test_the_trace_is_read_once_per_cache_group(tmp_path):
    """The meter adds each batch once (several batches, several caches, several threads)."""
    path = tmp_path / "big.lcp"
    rng = np.random.default_rng(5)
    with LcpWriter(str(path), block_size_tokens=16) as w:
        for _ in range(3000):
            root = int(rng.integers(1, 50))
            k = int(rng.integers(1, 12))
            ids = [root * 1000 + j for j in range(k)]
            w.write_request({"input_length": 16 * k - int(rng.integers(0, 16))}, ids)
    cm = f"profile:{H200},model=llama3_8b"
    caches = [CacheSpec(p, c) for c in (8, 64, 4096) for p in ("lru", "arc")]
    got = []
    for threads in (1, 4):
        spec = RunSpec.from_options(caches, cost_model=cm, threads=threads)
        with spec.open_trace(path) as tr:
            got.append([(t.prefill_s, t.no_hit_s, t.n_req) for t in run(spec, tr).prefill])
    assert got[0] == got[1]
    # the largest cache saves the largest share; a cache that skips requests counts fewer
    share = [1 - p / t for p, t, _n in got[0]]
    assert share[4] > share[2] > share[0] > 0
    assert got[0][0][2] < 3000 and got[0][4][2] == 3000
