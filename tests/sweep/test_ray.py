"""The Ray executor against a local Ray instance started here (2 CPUs, no dashboard)."""

from __future__ import annotations

import pytest

from shadow.sweep.executors import LocalExecutor, RayExecutor
from shadow.sweep.plan import plan_cells
from shadow.sweep.runner import run_sweep
from tests.sweep.standin import standin_cell

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_and_local_give_identical_csvs_and_failures(tmp_path, local_ray):
    t = tmp_path / "t.jsonl"
    t.write_text("{}\n" * 6)
    cells = plan_cells([str(t), str(tmp_path / "missing.jsonl")], [("lru", ""), ("belady", "")],
                       [1024, 8192], ["uniform"])
    lines: list[str] = []
    r_ray = run_sweep(cells, tmp_path / "ray", RayExecutor(), standin_cell, progress=False, echo=lines.append)
    r_loc = run_sweep(cells, tmp_path / "loc", LocalExecutor(2), standin_cell, progress=False, echo=lambda s: None)
    assert r_ray.n_run == r_loc.n_run == 4
    assert sorted(o.cell.key() for o in r_ray.failed) == sorted(o.cell.key() for o in r_loc.failed)
    assert len(lines) == 4 and all("FileNotFoundError" in ln and "\n" not in ln for ln in lines)
    assert r_ray.csv_path.read_bytes() == r_loc.csv_path.read_bytes()
    assert local_ray.is_initialized()  # a caller's Ray is left running


def test_cli_ray_and_local_executors_give_identical_csvs(trace, tmp_path, local_ray):
    from click.testing import CliRunner

    from shadow.sweep.commands import sweep

    algos = "lru,fifo,clock,belady"
    common = ["-t", trace, "-a", algos, "-c", "1k:32k:log3", "--cost-model", "uniform",
              "--cost-model", "position"]
    r_ray = CliRunner().invoke(sweep, [*common, "--executor", "ray", "--out", str(tmp_path / "ray")])
    assert r_ray.exit_code == 0, (r_ray.output, r_ray.exception)
    r_loc = CliRunner().invoke(sweep, [*common, "--executor", "local", "-j", "2", "--out", str(tmp_path / "loc")])
    assert r_loc.exit_code == 0, (r_loc.output, r_loc.exception)
    n = len(algos.split(",")) * 3 * 2
    assert r_ray.output.startswith(f"{n} cells: 0 already done, {n} run, 0 failed")
    a = (tmp_path / "ray" / "results.csv").read_bytes()
    assert a == (tmp_path / "loc" / "results.csv").read_bytes()
    assert len(a.splitlines()) == 1 + n
    ray_cells = sorted(p.name for p in (tmp_path / "ray" / "cells").iterdir())
    assert ray_cells == sorted(p.name for p in (tmp_path / "loc" / "cells").iterdir())
    for name in ray_cells:  # cell for cell
        assert (tmp_path / "ray" / "cells" / name).read_bytes() == (tmp_path / "loc" / "cells" / name).read_bytes()


def test_fleet_cells_on_ray_equal_the_local_ones(trace, tmp_path, local_ray):
    """Router and replica count travel with the cell to a Ray task: the same cell files."""
    from click.testing import CliRunner

    from shadow.sweep.commands import sweep

    common = ["-t", trace, "-a", "lru", "-c", "1k,4k", "--router", "round_robin,kv_aware",
              "--router-params", "kv_aware:speculative=false", "--replicas", "1,2"]
    r_ray = CliRunner().invoke(sweep, [*common, "--executor", "ray", "--out", str(tmp_path / "ray")])
    assert r_ray.exit_code == 0, (r_ray.output, r_ray.exception)
    r_loc = CliRunner().invoke(sweep, [*common, "-j", "2", "--out", str(tmp_path / "loc")])
    assert r_loc.exit_code == 0, (r_loc.output, r_loc.exception)
    assert r_ray.output.startswith("8 cells: 0 already done, 8 run, 0 failed")
    a = (tmp_path / "ray" / "results.csv").read_bytes()
    assert a == (tmp_path / "loc" / "results.csv").read_bytes()
    assert b",kv_aware:speculative=false,2," in a
