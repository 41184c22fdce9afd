"""The sweep driver and the executors, with a stand-in cell function (the simulator is tested in tests/sim)."""

from __future__ import annotations

import os

import pytest

from shadow.sweep.executors import LocalExecutor, SerialExecutor, guarded, one_line_error
from shadow.sweep.plan import plan_cells
from shadow.sweep.runner import run_sweep
from shadow.errors import ShadowError
from tests.sweep.standin import standin_cell


@pytest.fixture
def traces(tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text("{}\n" * 5)
    b.write_text("{}\n" * 9)
    return [str(a), str(b)]


@pytest.fixture
def calls(tmp_path, monkeypatch):
    d = tmp_path / "calls"
    d.mkdir()
    monkeypatch.setenv("SHADOW_TEST_CALLS", str(d))
    return d


def _ran(calls_dir) -> list[str]:
    return sorted(p.name.split(".")[0] for p in calls_dir.iterdir())


def _cells(traces, caps=(1024, 4096, 16384)):
    return plan_cells(traces, [("lru", ""), ("s3fifo", ""), ("belady", "")], caps, ["uniform", "position"])


@pytest.mark.slow
def test_serial_and_process_pool_give_identical_csvs(tmp_path, traces, calls):
    cells = _cells(traces)
    r1 = run_sweep(cells, tmp_path / "serial", SerialExecutor(), standin_cell, progress=False)
    r2 = run_sweep(cells, tmp_path / "pool", LocalExecutor(2), standin_cell, progress=False)
    assert r1.ok and r2.ok and r1.n_run == r2.n_run == len(cells) == 36
    assert r1.csv_path.read_bytes() == r2.csv_path.read_bytes()
    assert len(r1.csv_path.read_text().splitlines()) == 1 + len(cells)
    pids = {p.name.split(".")[1] for p in calls.iterdir()}
    assert str(os.getpid()) in pids and len(pids) >= 2  # the pool really ran elsewhere


@pytest.mark.slow
def test_resume_runs_only_the_missing_cells(tmp_path, traces, calls):
    out = tmp_path / "out"
    first = _cells(traces, caps=(1024, 4096))
    rep = run_sweep(first, out, LocalExecutor(2), standin_cell, progress=False)
    assert rep.n_run == len(first) == 24
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    for p in calls.iterdir():
        p.unlink()

    full = _cells(traces, caps=(1024, 4096, 16384))
    rep = run_sweep(full, out, LocalExecutor(2), standin_cell, progress=False)
    assert (rep.n_cells, rep.n_skipped, rep.n_run) == (36, 24, 12)
    assert _ran(calls) == sorted(c.digest for c in full if c.capacity == 16384)
    assert all((out / "cells" / n).stat().st_mtime_ns == t for n, t in stamps.items())

    fresh = run_sweep(full, tmp_path / "fresh", SerialExecutor(), standin_cell, progress=False)
    assert rep.csv_path.read_bytes() == fresh.csv_path.read_bytes()

    for p in calls.iterdir():
        p.unlink()
    rep = run_sweep(full, out, LocalExecutor(2), standin_cell, progress=False)
    assert (rep.n_skipped, rep.n_run) == (36, 0) and _ran(calls) == []


@pytest.mark.slow
def test_a_failing_cell_is_reported_and_the_others_complete(tmp_path, traces, calls):
    cells = _cells([*traces, str(tmp_path / "missing.jsonl")], caps=(1024,))
    lines: list[str] = []
    rep = run_sweep(cells, tmp_path / "out", LocalExecutor(2), standin_cell, progress=False, echo=lines.append)
    assert len(rep.failed) == 6 and rep.n_run == 12 and not rep.ok
    assert all(o.cell.trace.endswith("missing.jsonl") for o in rep.failed)
    assert all(o.error.startswith("FileNotFoundError: [Errno 2] No such file or directory") for o in rep.failed)
    assert len(lines) == 6 and all(ln.startswith("cell failed: missing.jsonl ") and "\n" not in ln
                                   for ln in lines)
    csv_lines = rep.csv_path.read_text().splitlines()
    assert len(csv_lines) == 1 + 12 and "missing.jsonl" not in rep.csv_path.read_text()


@pytest.mark.slow
def test_a_crashing_worker_fails_only_its_own_cell(tmp_path, traces, calls):
    crash = tmp_path / "crash.jsonl"
    crash.write_text("crash\n")
    cells = _cells([traces[0], str(crash)], caps=(1024, 2048))
    rep = run_sweep(cells, tmp_path / "out", LocalExecutor(2), standin_cell, progress=False, echo=lambda s: None)
    failed = sorted((o.cell.algo, o.cell.cost_model) for o in rep.failed)
    assert all(o.cell.trace == str(crash) and o.cell.capacity == 2048 for o in rep.failed)
    assert len(failed) == 6 and all("worker process died" in o.error for o in rep.failed)
    assert rep.n_run == len(cells) - 6


def test_guarded_turns_exceptions_into_one_line():
    def boom(cell):
        raise ShadowError("x.lcp: byte offset 12: bad\nmagic")

    out = guarded(boom, _cells(["/a"], caps=(1,))[0])
    assert not out.ok and out.error == "x.lcp: byte offset 12: bad magic"
    assert one_line_error(KeyError("k")) == "KeyError: 'k'"
    assert one_line_error(RuntimeError()) == "RuntimeError"


def test_progress_bar_over_cells_when_asked(tmp_path, traces, capsys):
    cells = _cells(traces[:1], caps=(1024,))
    run_sweep(cells, tmp_path / "p", SerialExecutor(), standin_cell, progress=True)
    assert "cells" in capsys.readouterr().err
    run_sweep(cells, tmp_path / "q", SerialExecutor(), standin_cell)  # default: stderr is no tty here
    assert capsys.readouterr().err == ""
