"""`shadow sweep --mrc`: the lru and vllm cells from one exact curve per trace and setting, equal
to the cells simulated one by one; the curves it keeps, and plot drawing them."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("shadow.sim.mrc.stack")
from shadow.sim.mrc.offline import CURVE_ALGOS  # noqa: E402
from shadow.sweep import curves  # noqa: E402
from tests.tiers import unit_rows

ROOT = Path(__file__).resolve().parents[2]
COMPARED = ("n_req", "n_req_skipped", "n_blocks", "block_hit_ratio", "compute_saving_ratio",
            "prefix_hit_ratio", "prefix_compute_saving_ratio")


def shadow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def rows(d: Path) -> dict[tuple, dict[str, str]]:
    with open(d / "results.csv", newline="") as f:
        return {(r["algo"], r["cost_model"], r["replay_order"], int(r["cache_size"])): r
                for r in csv.DictReader(f)}


def test_the_curve_algos_are_the_passes():
    assert curves.CURVE_ALGOS == CURVE_ALGOS


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--no-pin", "--replay-order", "prefix-order"]],
                         ids=["default", "no-pin-prefix-order"])
def test_cells_from_the_curve_equal_the_simulated_cells(trace, tmp_path, extra):
    args = ["-t", trace, "-a", "lru,vllm,fifo", "-c", "256,1k:32k:log5", "--cost-model",
            "uniform", "--cost-model", "position", "-j", "2", *extra]
    a = shadow("sweep", *args, "--out", str(tmp_path / "a"), "--mrc")
    b = shadow("sweep", *args, "--out", str(tmp_path / "b"))
    assert a.returncode == 0 and b.returncode == 0, (a.stderr, b.stderr)
    # 2 cost models x (lru, vllm) x 5 sizes from curves; 256 (below the largest request's 374
    # blocks) and fifo simulated
    assert a.stdout.startswith("36 cells: 0 already done, 20 from curves, 16 run, 0 failed")
    ra, rb = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert ra.keys() == rb.keys()
    for k, r in ra.items():
        assert {f: r[f] for f in COMPARED} == {f: rb[k][f] for f in COMPARED}, k
        from_curve = k[0] in ("lru", "vllm") and k[3] >= 374
        assert (r["source"] == "mrc") == from_curve, k
        assert (r["n_eviction"] == "") == from_curve, k
    # the curves kept: one per cost model and recency order (vllm ranks deepest first)
    orders = {"deepest-first"} | ({"prefix-order"} if extra else set())
    stored = curves.read_curves(tmp_path / "a")
    assert {(i.cost_model, i.order) for i, _ in stored} == {(c, o) for c in ("uniform", "position")
                                                            for o in orders}
    # the same CSV as `shadow mrc -o`
    info = next(i for i, _ in stored if i.cost_model == "position" and i.order == "deepest-first")
    out = tmp_path / "mrc.csv"
    m = shadow("mrc", "-t", trace, "--cost-model", "position", "-o", str(out))
    assert m.returncode == 0, m.stderr
    assert (tmp_path / "a" / "curves" / f"{info.name}.csv").read_text() == out.read_text()
    assert info.exact_from == 374
    # resuming finds every cell done
    again = shadow("sweep", *args, "--out", str(tmp_path / "a"), "--mrc")
    assert again.returncode == 0 and again.stdout.startswith("36 cells: 36 already done, 0 run")


def _drawn_curves(d: Path, monkeypatch) -> dict[str, list]:
    """Plot the sweep ``d`` in this process; the exact curves on its block-hit-ratio panel, by
    label: (x, y) of each step line as drawn."""
    from shadow.sweep import plot

    figs = []
    monkeypatch.setattr(plot, "_save", lambda fig, path, dpi: figs.append(fig) or path)
    plot.plot_sweep(d / "results.csv", d / "plots")
    (fig,) = figs
    ax = fig.axes[0]
    return {ln.get_label(): list(zip(ln.get_xdata(), ln.get_ydata())) for ln in ax.get_lines()
            if ln.get_label().endswith("exact curve")}


@pytest.mark.slow
def test_plot_draws_the_stored_curves(trace, tmp_path, monkeypatch):
    """The lru curve over the sweep's points: a step line through every lru cell's block hit
    ratio (the curve holds its value until its next change point); none without the curves."""
    pytest.importorskip("matplotlib")
    d = tmp_path / "s"
    r = shadow("sweep", "-t", trace, "-a", "lru,fifo", "-c", "1k,8k", "--out", str(d), "--mrc",
               "-j", "1")
    assert r.returncode == 0, r.stderr
    p = shadow("plot", str(d))
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.split()[0]).stat().st_size > 10_000
    stored = curves.read_curves(d)
    assert len(stored) == 1 and stored[0][1][0][0] == 374
    drawn = _drawn_curves(d, monkeypatch)
    assert list(drawn) == ["lru, exact curve"]
    line = drawn["lru, exact curve"]
    assert len(line) > 10
    cells = [r for r in rows(d).values() if r["algo"] == "lru"]
    assert sorted(int(r["cache_size"]) for r in cells) == [1024, 8192]
    for cell in cells:
        size = int(cell["cache_size"])
        y = [y for x, y in line if x <= size][-1]
        assert f"{y:.6f}" == cell["block_hit_ratio"], size
    shutil.rmtree(d / "curves")
    assert _drawn_curves(d, monkeypatch) == {}


@pytest.mark.parametrize("damage,words", unit_rows([
    ("csv:cache_size,block_hit_ratio\n10,0.5\n5,0.6\n", "cache_size '5' is not a size above the last"),
    ("csv:cache_size,block_hit_ratio\n10,1.5\n", "block_hit_ratio '1.5' is out of range"),
    ("csv:cache_size,block_hit_ratio\n10\n", "1 fields, the header has 2"),
    ("csv:size,x\n", "not a curve CSV"),
    ("json:{\"trace\": 1}", "not a curve description"),
    ("json:not json", "not a curve description"),
], 6))
def test_plot_refuses_a_damaged_curve_in_one_line(trace, tmp_path, damage, words):
    d = tmp_path / "s"
    r = shadow("sweep", "-t", trace, "-a", "lru", "-c", "1k", "--out", str(d), "--mrc", "-j", "1")
    assert r.returncode == 0, r.stderr
    (info, _), = curves.read_curves(d)
    kind, _, text = damage.partition(":")
    (d / "curves" / f"{info.name}.{kind}").write_text(text)
    p = shadow("plot", str(d))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shadow: error: ") and words in lines[0], p.stderr
    assert not (d / "plots").exists() or not any((d / "plots").iterdir())


def test_a_damaged_trace_fails_its_cells_as_without_curves(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hash_ids": [1, 2], "input_length": 10}\nnot json\n')
    r = shadow("sweep", "-t", str(bad), "-a", "lru", "-c", "1k,4k", "--out", str(tmp_path / "s"),
               "--mrc", "-j", "1")
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("cell failed: bad.jsonl lru ") for e in err[:2])
    assert err[2].startswith("shadow: error: 2 of 2 cells failed")
    assert not (tmp_path / "s" / "curves").exists()
