"""`shadow mrc` equals `shadow simulate` to the printed digits, at many sizes, on both bundled
traces and a `shadow synth` trace; its CSV, targets, help and bad input.

The simulation side is the real serve loop (:class:`shadow.sim.core.simulator.Simulator`, every size
one cache in one pass, as `simulate -c S1,S2,...` runs them); the comparison is of the four
ratios as RESULT prints them and of the counts behind them.
"""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.sim.core.simulator import run_trace
from shadow.sim.mrc.curve import CSV_COLUMNS, METRICS, TARGET_METRICS
from shadow.sim.mrc.offline import curve_of_trace, curve_spec
from shadow.sim.core.simulator import CacheSpec, Simulator
from shadow.trace import open_trace
from shadow.trace.synth import SynthParams, write_synth
from tests.sim._traces import CONVERSATION, ROOT, SYNTHETIC
from tests.tiers import unit_rows


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("mrc") / "synth.lcp.zst"
    write_synth(str(path), SynthParams(seed=7, sessions=300))
    return path


def curve(path, **kw):
    with open_trace(str(path)) as tr:
        spec = curve_spec(kw.pop("algo", "lru"), cost_model=kw.pop("cost", "uniform"), **kw)
        return curve_of_trace(tr, path, spec)


def sizes_to_test(c, n_log: int = 24, n_points: int = 12) -> list[int]:
    """The first exact size and the next, log-spaced sizes up to the top and past it, and change
    points with the size just below each (where a ratio steps)."""
    top = max(c.top, c.exact_from + 1)
    out = {c.exact_from, c.exact_from + 1, top, top + 1, top + 1000}
    out.update(int(x) for x in np.geomspace(c.exact_from, top, n_log))
    pts = c.change_points()
    rng = np.random.default_rng(0)
    for p in rng.choice(pts[1:], min(n_points, len(pts) - 1), replace=False):
        out.update((int(p), int(p) - 1))
    return sorted(s for s in out if s >= c.exact_from)


def simulate(path, sizes, *, algo="lru", pin=False, lookup="all", replay_order="deepest-first",
             cost="uniform"):
    with open_trace(str(path)) as tr:
        sim = Simulator([CacheSpec(algo, s) for s in sizes], cost_model=cost, pin=pin,
                        replay_order=replay_order, lookup=lookup,
                        block_size_tokens=tr.header.block_size_tokens or 0)
        run_trace(sim, tr, path)
    return {r.spec.capacity: r for r in sim.results()}


CONFIGS = [
    dict(),
    dict(pin=True),
    dict(replay_order="prefix-order"),
    dict(cost="position"),
    dict(algo="vllm", lookup="vllm", pin=True),
    dict(algo="vllm", lookup="vllm", replay_order="prefix-order"),
    dict(lookup="prompt", cost="qwen3coder30b_blksz_16"),
]


@pytest.mark.parametrize("config", unit_rows(CONFIGS, 4), ids=lambda c: ",".join(f"{k}={v}" for k, v in
                                                                  c.items()) or "default")
@pytest.mark.parametrize("which", unit_rows(["synthetic", "conversation", "synth"], 3, first=2))
def test_curve_equals_simulate_at_many_sizes(which, config, synth_trace):
    path = {"synthetic": SYNTHETIC, "conversation": CONVERSATION, "synth": synth_trace}[which]
    kw = {k: v for k, v in config.items() if k != "pin"}
    c = curve(path, **kw)
    sizes = sizes_to_test(c)
    assert len(sizes) >= 30
    got = simulate(path, sizes, **config)
    for s in sizes:
        r = got[s]
        assert r.error is None and r.n_req_skipped == 0 and r.n_unexpected_eviction == 0
        want = {k: v for k, v in r.fields().items() if k in METRICS}
        mine = {k: f"{v:.6f}" for k, v in c.ratios(s).items()}
        assert mine == want, s
        k = c.counts(s)
        assert (k["n_hits"], k["n_prefix_hits"], c.n_blocks) == (r.n_hits, r.n_prefix_hits,
                                                                 r.n_blocks), s
        assert k["saved_cost"] == pytest.approx(r.saved_cost, rel=1e-12)


def _printed(args: list[str], prefix: str) -> dict[int, dict[str, str]]:
    """The ``prefix`` lines (``MRC``, ``RESULT``) a ``shadow`` command prints, by cache size."""
    r = subprocess.run([sys.executable, "-m", "shadow", *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [dict(kv.split("=", 1) for kv in ln.split()[1:]) for ln in r.stdout.splitlines()
            if ln.startswith(prefix + " ")]
    return {int(row["cache_size"]): row for row in rows}


@pytest.mark.parametrize("which", unit_rows(["synth", "synthetic", "conversation"], 3))
def test_cli_at_prints_what_simulate_no_pin_prints(which, synth_trace):
    """`shadow mrc --at SIZES` and `shadow simulate -a lru --no-pin -c SIZES`, both run as a user
    runs them: the same ratios, digit for digit, at every size (30 or more a trace)."""
    path = {"synthetic": SYNTHETIC, "conversation": CONVERSATION, "synth": synth_trace}[which]
    sizes = sizes_to_test(curve(path))
    assert len(sizes) >= 30
    at = ",".join(map(str, sizes))
    mine = _printed(["mrc", "-t", str(path), "--at", at], "MRC")
    theirs = _printed(["simulate", "-t", str(path), "-a", "lru", "--no-pin", "-c", at], "RESULT")
    assert sorted(mine) == sorted(theirs) == sizes
    for s in sizes:
        assert set(mine[s]) == {"cache_size", *METRICS}
        assert theirs[s]["n_req_skipped"] == "0", s
        assert mine[s] == {k: theirs[s][k] for k in mine[s]}, s


@pytest.mark.slow
def test_csv_holds_every_change_point(tmp_path):
    out = tmp_path / "curve.csv"
    r = CliRunner().invoke(cli, ["mrc", "-t", str(SYNTHETIC), "-o", str(out), "--cost-model",
                                 "position"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = list(csv.reader(out.open()))
    assert tuple(rows[0]) == CSV_COLUMNS
    c = curve(SYNTHETIC, cost="position")
    assert [int(x[0]) for x in rows[1:]] == c.change_points().tolist()
    sizes = [int(x[0]) for x in rows[1:]]
    assert sizes[0] == c.exact_from == 374
    prev = None
    for row in rows[1:]:
        vals = dict(zip(CSV_COLUMNS, row))
        cur = tuple(float(vals[k]) for k in CSV_COLUMNS[1:])
        assert prev is None or all(a >= b for a, b in zip(cur, prev))
        prev = cur
    # a few rows against the loop itself
    picked = sizes[:: max(1, len(sizes) // 6)]
    got = simulate(SYNTHETIC, picked, cost="position")
    for row in rows[1:]:
        if int(row[0]) in got:
            f = got[int(row[0])].fields()
            assert row[1:] == [f[k] for k in CSV_COLUMNS[1:]]


def test_targets_in_blocks_and_gib():
    r = CliRunner().invoke(cli, ["mrc", "-t", str(SYNTHETIC), "--target", "0.5,0.9,0.995",
                                 "--bytes-per-block", str(64 << 20)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.startswith("target ")]
    assert len(lines) == 3 * len(TARGET_METRICS)
    c = curve(SYNTHETIC)
    full = c.counts(10**9)
    for ln in lines:
        _, share, metric, blocks, unit, gib = ln.split()[:6]
        n = int(blocks.replace(",", ""))
        assert unit == "blocks" and gib == f"({n * 64 / 1024:.2f}"
        key = "n_hits" if metric == "block_hit_ratio" else "n_prefix_hits"
        assert c.counts(n)[key] >= float(share) * full[key] > c.counts(n - 1)[key]
    assert "target 0.90 block_hit_ratio" in r.output and "target 0.995 " in r.output
    # the smallest capacity, checked by the loop on both sides of it
    n = int(lines[2].split()[3].replace(",", ""))
    got = simulate(SYNTHETIC, [n - 1, n])
    assert got[n].n_hits >= 0.9 * full["n_hits"] > got[n - 1].n_hits


def test_targets_with_a_model_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,'
                   ' "hidden_size": 512, "head_dim": 64}')
    r = CliRunner().invoke(cli, ["mrc", "-t", str(SYNTHETIC), "--target", "0.8", "--kv-config",
                                 str(cfg)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    # 512 tokens x 4 layers x 2 (k, v) x 2 heads x 64 x 2 bytes = 1 MiB a block
    ln = next(x for x in r.output.splitlines() if x.startswith("target 0.80 block_hit_ratio"))
    n = int(ln.split()[3].replace(",", ""))
    assert ln.endswith(f"({n / 1024:.2f} GiB)")


def test_default_sizes_and_help():
    r = CliRunner().invoke(cli, ["mrc"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    sizes = [int(ln.split()[1].split("=")[1]) for ln in r.output.splitlines()
             if ln.startswith("MRC ")]
    assert sizes[0] == 374 and sizes[1:-1] == [1 << k for k in range(9, 16)] and sizes[-1] > 32768
    h = CliRunner().invoke(cli, ["mrc", "--help"])
    assert h.exit_code == 0
    for opt in ("--trace", "--algo", "--at", "--output", "--target", "--cost-model", "--lookup",
                "--replay-order", "--bytes-per-block", "--kv-config", "--allow-truncated",
                "--block-id"):
        assert opt in h.output


BAD = [
    (["--at", "100"], "--at 100: below 374 blocks, the room the largest request needs"),
    (["--at", "0"], "bad --at size '0': must be positive"),
    (["--at", "8k,3g"], "--at 3221225472: above 2147483646 blocks (2**31 - 2)"),
    (["--at", "8k,x"], "bad --at size 'x'"),
    (["--at", " "], "--at is empty"),
    (["--target", "0"], "--target 0: a share of the infinite cache's ratio is in (0, 1]"),
    (["--target", "1.01"], "is in (0, 1]"),
    (["--target", "abc"], "--target 'abc': not a number"),
    (["--bytes-per-block", "1024"], "no --target given"),
    (["--target", "0.9", "--bytes-per-block", "0"], "--bytes-per-block 0 is not a positive"),
    (["--target", "0.9", "--bytes-per-block", "5", "--kv-config", "x.json"], "one only"),
    (["--target", "0.9", "--kv-config", "/nonexistent.json"], "cannot read it"),
    (["-a", "fifo"], "'fifo' is not one of 'lru', 'vllm'"),
    (["--cost-model", "linear:1"], "expected linear:A,B"),
    (["-t", "/nonexistent.lcp.zst"], "/nonexistent.lcp.zst: no such file"),
    (["-t", "EMPTY"], "empty file (neither lcp nor JSONL)"),
    (["-t", "BLANK"], "no requests (empty JSONL trace)"),
    (["-t", "NOBLOCKS"], "no block is looked up in its 1 requests (--lookup all): no curve"),
    (["-t", "NOBLOCKSIZE", "--lookup", "vllm"], "needs the block size in tokens"),
]


@pytest.mark.parametrize("args,message", unit_rows(BAD, 8), ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line(args, message, tmp_path):
    out = tmp_path / "curve.csv"
    files = {"EMPTY": "", "BLANK": "\n\n",
             "NOBLOCKS": '{"hash_ids": [], "input_length": 3, "output_length": 1}\n',
             "NOBLOCKSIZE": '{"hash_ids": [1, 2], "input_length": 10, "output_length": 1}\n'}
    for name, text in files.items():
        (tmp_path / f"{name}.jsonl").write_text(text)
    args = [str(tmp_path / f"{a}.jsonl") if a in files else a for a in args]
    r = subprocess.run([sys.executable, "-m", "shadow", "mrc", *args, "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert message in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists()


def test_the_run_options_are_simulate_s():
    """mrc declares the run settings a curve has through the shared decorator: the same flags,
    names and defaults as simulate's."""
    import click

    from shadow.sim.options import run_options
    from shadow.sim.mrc.commands import MRC_RUN_OPTIONS

    @run_options()
    def every(**_kw) -> None:
        pass
    shared = {tuple(p.opts): p for p in every.__click_params__}
    mine = {tuple(p.opts): p for p in cli.get_command(click.Context(cli), "mrc").params}
    picked = [k for k in shared if k[0] in MRC_RUN_OPTIONS]
    assert len(picked) == len(MRC_RUN_OPTIONS)
    for k in picked:
        assert (mine[k].name, mine[k].default, mine[k].help) == (shared[k].name, shared[k].default,
                                                                 shared[k].help)
    for flag in ("--no-pin", "--timing", "--tier", "--service", "--category"):
        assert not any(flag in k for k in mine)
