"""`shadow sweep --timing`: the timing is a cell parameter; a recorded or model cell gives what
`shadow simulate --timing recorded|model` gives for its cache, and sweeps stored before the
parameter existed resume unchanged."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("shadow.sim.core.loop")
from shadow.sweep.plan import Cell  # noqa: E402
from shadow.sweep.store import parse_result_line  # noqa: E402
from tests.sim.test_timing import _overlapping, _recording  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def shadow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)


@pytest.mark.slow
def test_timing_cells_equal_simulate(tmp_path):
    trace = _recording(tmp_path / "r.lcp", _overlapping(200, 7))
    svc = "prefill=2000,decode=50,concurrency=3"
    proc = shadow("sweep", "-t", trace, "-a", "lru,arc", "-c", "8,16", "--timing", "serial",
                  "--timing", "recorded", "--timing", "model", "--service", svc,
                  "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "s" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted({r["timing"] for r in rows}) == ["model:" + svc, "recorded", "serial"]
    for timing, args in (("serial", []), ("recorded", ["--timing", "recorded"]),
                         ("model:" + svc, ["--timing", "model", "--service", svc])):
        sim = shadow("simulate", "-t", trace, "-a", "lru,arc", "-c", "8,16", *args)
        assert sim.returncode == 0, sim.stderr
        want = {(d["algo"], d["cache_size"]): d for d in
                (parse_result_line(x) for x in sim.stdout.splitlines() if x.startswith("RESULT"))}
        got = [r for r in rows if r["timing"] == timing]
        assert len(got) == 4
        for r in got:
            ref = want[(r["algo"], r["cache_size"])]
            for key in ("n_req", "n_req_skipped", "n_blocks", "block_hit_ratio", "n_eviction",
                        "prefix_hit_ratio"):
                assert r[key] == ref[key], (timing, r["algo"], r["cache_size"], key)
    # the serial and recorded figures differ on this overlapping recording
    assert ({r["block_hit_ratio"] for r in rows if r["timing"] == "serial"}
            != {r["block_hit_ratio"] for r in rows if r["timing"] == "recorded"})


def test_a_serial_cell_keeps_the_key_it_had_before_timing():
    cell = Cell("/t/x.lcp", "lru", 8)
    assert "timing" not in cell.key() and Cell.from_key(cell.key()) == cell
    timed = Cell("/t/x.lcp", "lru", 8, timing="recorded")
    assert '"timing":"recorded"' in timed.key() and timed.digest != cell.digest
    assert Cell.from_key(timed.key()) == timed


@pytest.mark.slow
@pytest.mark.parametrize("args,words", [
    (["-a", "belady", "--timing", "recorded"], "--timing recorded and model cannot run belady"),
    (["-a", "lru", "--service", "decode=2"], "--service is --timing model's"),
    (["-a", "lru", "--timing", "model", "--service", "decode=0"],
     "--service: decode must be a positive number, got '0'"),
])
def test_bad_timing_refused_before_any_cell(tmp_path, args, words):
    trace = _recording(tmp_path / "r.lcp", _overlapping(20, 7))
    proc = shadow("sweep", "-t", trace, "-c", "8", *args, "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr and not (tmp_path / "s").exists()
