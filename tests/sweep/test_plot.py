"""`shadow plot`: PNGs from a sweep CSV (here made with the stand-in cell function)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shadow.errors import ShadowError
from shadow.sweep.commands import plot
from shadow.sweep.executors import SerialExecutor
from shadow.sweep.plan import plan_cells
from shadow.sweep.plot import is_oracle, plot_sweep
from shadow.sweep.runner import run_sweep
from tests.sweep.standin import standin_cell

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _assert_png(path, min_w=600):
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    img = matplotlib.image.imread(path)
    assert img.ndim == 3 and img.shape[1] >= min_w and img.shape[0] >= 300
    assert img.std() > 0.01  # not a blank canvas


@pytest.fixture
def sweep_dir(tmp_path):
    traces = []
    for name, n in (("a.jsonl", 4), ("b.jsonl", 7)):
        p = tmp_path / name
        p.write_text("{}\n" * n)
        traces.append(str(p))
    cells = plan_cells(traces, [("lru", ""), ("s3fifo", ""), ("belady", "")], [1024, 2048, 8192, 65536],
                       ["uniform", "position"])
    out = tmp_path / "sweep"
    assert run_sweep(cells, out, SerialExecutor(), standin_cell, progress=False).ok
    return out


@pytest.mark.slow
def test_one_png_per_trace_and_cost_model(sweep_dir, tmp_path):
    paths = plot_sweep(sweep_dir / "results.csv", tmp_path / "plots", bytes_per_block=1536 * 1024)
    assert sorted(p.name for p in paths) == ["a.jsonl__position.png", "a.jsonl__uniform.png",
                                             "b.jsonl__position.png", "b.jsonl__uniform.png"]
    for p in paths:
        _assert_png(p)
    assert sorted(x.name for x in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)


@pytest.mark.slow
def test_plot_cli_default_out_dir_and_output(sweep_dir):
    res = CliRunner().invoke(plot, [str(sweep_dir), "--bytes-per-block", "1536k", "--dpi", "60"])
    assert res.exit_code == 0, res.output
    written = res.output.split()
    assert len(written) == 4 and all(w.startswith(str(sweep_dir / "plots")) for w in written)
    for w in written:
        _assert_png(__import__("pathlib").Path(w), min_w=300)


def test_plot_without_results_is_a_clear_error(tmp_path):
    (tmp_path / "results.csv").write_text("trace,algo,params,cache_size,cost_model\n")
    with pytest.raises(ShadowError, match="no results to plot"):
        plot_sweep(tmp_path / "results.csv", tmp_path / "plots")


def test_oracles_are_known():
    assert is_oracle("belady") and is_oracle("belady_compute")
    assert not is_oracle("lru") and not is_oracle("s3fifo")
