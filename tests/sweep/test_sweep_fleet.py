"""``shadow sweep --router R[,R...] --replicas N[,N...]``: the router and the replica count are
cell parameters; a fleet cell gives what ``shadow simulate --router --replicas`` gives for its
cache, results.csv carries both as columns that read back, a second run resumes every cell, and
``shadow plot`` draws the routers side by side, one PNG per replica count."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

pytest.importorskip("shadow.sim.core.loop")
from shadow.cli import cli  # noqa: E402
from shadow.sweep.plan import Cell, plan_cells  # noqa: E402
from shadow.sweep.plot import ROUTER_STYLES, _series, plot_sweep, series_styles  # noqa: E402
from shadow.sweep.store import parse_result_line, read_csv  # noqa: E402
from tests.sim._traces import synth  # noqa: E402
from tests.sweep.test_plot import _assert_png  # noqa: E402

ROUTERS = ["round_robin", "kv_aware:ttl=1"]


@pytest.fixture(scope="module")
def synth_trace(tmp_path_factory) -> str:
    return synth(tmp_path_factory.mktemp("fleet-sweep") / "synth.lcp", "--sessions", "40",
                 "--rate", "4", "--seed", "5")


def invoke(*args: str) -> str:
    r = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture(scope="module")
def fleet_sweep(synth_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet-sweep") / "sw"
    args = ["sweep", "-t", synth_trace, "-a", "lru,arc", "-c", "300,1200", "--timing", "model",
            "--router", "round_robin,kv_aware", "--router-params", "kv_aware:ttl=1",
            "--replicas", "1,3", "--out", str(out), "-j", "2"]
    first = invoke(*args)
    return out, args, first


def _untraced(line: str) -> dict[str, str]:
    """A RESULT line's keys but the trace's name (simulate names it as given, a cell by its file
    name)."""
    keys = parse_result_line(line)
    del keys["trace"]
    return keys


@pytest.mark.slow
def test_fleet_cells_are_simulate_lines(synth_trace, fleet_sweep):
    out, _, first = fleet_sweep
    assert first.startswith("16 cells: 0 already done, 16 run, 0 failed")
    rows = read_csv(out / "results.csv")
    assert len(rows) == 16
    assert {(r["router"], r["replicas"]) for r in rows} == {(x, n) for x in ROUTERS
                                                            for n in ("1", "3")}
    cells = [_untraced(p.read_text().splitlines()[1]) for p in (out / "cells").iterdir()]
    for n in ("1", "3"):
        sim = invoke("simulate", "-t", synth_trace, "-a", "lru,arc", "-c", "300,1200", "--timing",
                     "model", "--router", "round_robin,kv_aware", "--router-params",
                     "kv_aware:ttl=1", "--replicas", n, "--threads", "1")
        lines = [_untraced(x) for x in sim.splitlines() if x.startswith("RESULT ")]
        assert len(lines) == 8 and all(line in cells for line in lines), n
    for r in rows:
        # the cell's own columns, and the fleet keys of its RESULT line beside them
        assert r["timing"] == "model" and float(r["req_imbalance"]) >= 1.0
        assert float(r["replica_hit_min"]) <= float(r["block_hit_ratio"]) <= float(
            r["replica_hit_max"])
        assert (int(r["router_index_peak_blocks"]) > 0) == r["router"].startswith("kv_aware")


@pytest.mark.slow
def test_a_second_run_resumes_every_fleet_cell(fleet_sweep):
    out, args, _ = fleet_sweep
    before = (out / "results.csv").read_bytes()
    assert invoke(*args).startswith("16 cells: 16 already done, 0 run, 0 failed")
    assert (out / "results.csv").read_bytes() == before


@pytest.mark.slow
def test_plot_draws_the_routers_side_by_side(fleet_sweep, tmp_path):
    out, _, _ = fleet_sweep
    paths = plot_sweep(out / "results.csv", tmp_path / "plots", dpi=50)
    assert sorted(p.name for p in paths) == ["synth.lcp__uniform__timing-model.png",
                                             "synth.lcp__uniform__timing-model__3-replicas.png"]
    for p in paths:
        _assert_png(p, min_w=300)
    rows = [r for r in read_csv(out / "results.csv") if r["replicas"] == "3"]
    styles = series_styles(_series(rows))
    assert sorted(styles) == [(p, r) for p in ("arc", "lru") for r in sorted(ROUTERS)]
    for (policy, router), (colour, style, _marker, label) in styles.items():
        assert style == ROUTER_STYLES[sorted(ROUTERS).index(router)]
        assert colour == ("arc", "lru").index(policy) and label == f"{policy}, {router}"


def test_without_routers_the_styles_are_as_before():
    rows = [{"algo": a, "params": "", "cache_size": "8", "router": ""} for a in ("lru", "belady")]
    styles = series_styles(_series(rows))
    assert styles[("lru", "")][1:] == ("-", "o", "lru")
    assert styles[("belady", "")][1:] == ("--", "o", "belady (oracle)")


def test_a_cell_without_a_router_keeps_its_key():
    plain = Cell("/t/x.lcp", "lru", 8)
    assert "router" not in plain.key() and "replicas" not in plain.key()
    fleet = Cell("/t/x.lcp", "lru", 8, router="kv_aware:ttl=1", replicas=4)
    assert '"router":"kv_aware:ttl=1"' in fleet.key() and '"replicas":4' in fleet.key()
    assert Cell.from_key(fleet.key()) == fleet and fleet.digest != plain.digest
    assert "x4 behind kv_aware:ttl=1" in fleet.label()
    cells = plan_cells(["/t/x.lcp"], [("lru", "")], [8, 16], ["uniform"],
                       routers=["round_robin", "random"], replicas=[2, 4])
    assert [(c.router, c.replicas, c.capacity) for c in cells] == [
        (r, n, c) for r in ("round_robin", "random") for n in (2, 4) for c in (8, 16)]
