"""The fault suite: outputs that cannot be written, and signals at chosen points, for every
command (docs/faults.md lists the guarantees; this module holds them).

Every case runs shadow as a child process and checks what a user sees: the exit status, stderr
(one line, never a traceback), the output directory (no output, no temporary or partial file),
and the processes the command started (none left).

* Unwritable outputs: a directory that does not exist (ENOENT), a path under a regular file
  (ENOTDIR), a read-only directory (EACCES; as root the child runs without CAP_DAC_OVERRIDE,
  through setpriv, or the case is skipped: chmod does not stop root), a full
  disk (EFBIG: RLIMIT_FSIZE in the child; Python ignores SIGXFSZ, so writes past it fail).
* Signals: the child is frozen (SIGSTOP) at a point (reading its input, writing its output, cells
  running), gets SIGINT, SIGTERM or SIGKILL there and is resumed.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TEST_DATA
from tests.fault_support import (ROOT, SHADOW, SLOW_SWEEP, descendants, finish, open_files, run,
                                 signal_at, start, stray_files, wait_gone, without_dac_override)
from tests.tiers import unit_rows

pytest.importorskip("shadow.sim.core.loop")

CONVERSATION = TEST_DATA / "mooncake_conversation.jsonl"
#: Copies of the conversation trace in the large input: big enough that reading and writing it
#: take a while (~0.5 s to convert here), small enough to make in a moment.
TILES = 8
#: RLIMIT_FSIZE of the "disk full" cases: every output of these commands is larger.
FULL = 100
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_SKIP = ("running as root where capabilities cannot be dropped (setpriv): chmod does not stop "
             "root from writing (the path-under-a-file cases cover an unwritable directory here)")


@dataclass(frozen=True)
class Data:
    small: Path        # the conversation trace as lcp.zst (12k requests)
    big_jsonl: Path    # TILES copies of it as JSONL
    big: Path          # the same as lcp.zst
    sweep: Path        # a finished sweep directory (for plot)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Data:
    from shadow.sweep.executors import SerialExecutor
    from shadow.sweep.plan import plan_cells
    from shadow.sweep.runner import run_sweep
    from shadow.trace import convert_file

    d = tmp_path_factory.mktemp("fault-data")
    small = d / "conv.lcp.zst"
    convert_file(str(CONVERSATION), str(small))
    big_jsonl = d / "big.jsonl"
    text = CONVERSATION.read_bytes()
    with open(big_jsonl, "wb") as f:
        for _ in range(TILES):
            f.write(text)
    big = d / "big.lcp.zst"
    convert_file(str(big_jsonl), str(big))
    sweep = d / "sweep"
    rep = run_sweep(plan_cells([str(small)], [("lru", "")], [1024, 4096], ["uniform"]), sweep,
                    SerialExecutor(), progress=False)
    assert rep.ok
    return Data(small, big_jsonl, big, sweep)


def one_line(stderr: str) -> str:
    """stderr's only line (asserts there is exactly one and no traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# -- outputs that cannot be written ----------------------------------------------------------
#: command -> (argv, the output it writes); OUT is the place under test (a file or a directory
#: name, as the command takes it).
def _argv(command: str, data: Data, out: Path) -> list[str]:
    return {
        "convert jsonl->lcp": ["convert", str(CONVERSATION), str(out / "t.lcp.zst")],
        "convert lcp->lcp": ["convert", str(data.small), str(out / "t.lcp")],
        "convert lcp->jsonl": ["convert", str(data.small), str(out / "t.jsonl")],
        "simulate -o": ["simulate", "-t", str(data.small), "-c", "1k", "-a", "lru", "-o",
                        str(out / "r.txt")],
        "simulate --dump-holes": ["simulate", "-t", str(data.small), "-c", "1k", "-a", "lru",
                                  "--dump-holes", str(out)],
        "mrc -o": ["mrc", "-t", str(data.small), "-o", str(out / "curve.csv")],
        "sweep --out": ["sweep", "-t", str(data.small), "-a", "lru", "-c", "1k", "--out",
                        str(out / "sw"), "-j", "1"],
        "plot --out": ["plot", str(data.sweep), "--out", str(out / "plots")],
    }[command]


COMMANDS = ["convert jsonl->lcp", "convert lcp->lcp", "convert lcp->jsonl", "simulate -o",
            "simulate --dump-holes", "mrc -o", "sweep --out", "plot --out"]
#: Commands that create a missing output directory (so a missing one is no fault for them).
CREATE_DIRS = {"sweep --out", "plot --out"}
FAULTS = ["missing directory", "under a regular file", "read-only directory", "disk full"]


@pytest.mark.parametrize("fault", unit_rows(FAULTS, 4, first=1))
@pytest.mark.parametrize("command", unit_rows(COMMANDS, 4, first=3))
def test_an_unwritable_output_is_one_line_and_leaves_nothing(data, tmp_path, command, fault):
    if command == "plot --out":
        pytest.importorskip("matplotlib")
    if fault == "missing directory" and command in CREATE_DIRS:
        pytest.skip(f"{command} creates its directory")
    prefix: list[str] = []
    if fault == "read-only directory" and AS_ROOT:
        # NOTE: root writes through chmod; without CAP_DAC_OVERRIDE it is stopped like a user
        prefix = without_dac_override() or pytest.skip(ROOT_SKIP)
    work = tmp_path / "work"
    work.mkdir()
    (work / "file").write_text("x")
    fsize = None
    if fault == "missing directory":
        out = work / "missing"
    elif fault == "under a regular file":
        out = work / "file" / "sub"
    elif fault == "read-only directory":
        out = work / "ro"
        out.mkdir()
        out.chmod(0o555)
    else:
        out = work / "full"
        out.mkdir()
        fsize = FULL
    before = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    try:
        r = run(prefix + SHADOW + _argv(command, data, out), cwd=tmp_path, fsize=fsize)
        after = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    finally:
        if fault == "read-only directory":
            out.chmod(0o755)
    line = one_line(r.stderr)
    assert r.returncode == 2, r.stderr
    assert line.startswith("shadow: error: "), line
    assert str(out) in line, line
    assert ("cannot" in line or "does not exist" in line), line
    if command in CREATE_DIRS and fault == "disk full":
        # the directories are made; no file but a sweep's CSV of the cells stored (none: the
        # header alone, shorter than the size limit)
        files = [p for p in out.rglob("*") if p.is_file()]
        assert [p.name for p in files] in ([], ["results.csv"]), after
        assert all(len(p.read_text().splitlines()) == 1 for p in files)
    else:
        assert after == before, after


@pytest.mark.slow
def test_simulate_appends_and_keeps_the_mode(data, tmp_path):
    out = tmp_path / "r.txt"
    out.write_text("RESULT old line\n")
    out.chmod(0o640)
    argv = SHADOW + ["simulate", "-t", str(data.small), "-c", "1k,2k", "-a", "lru", "-o", str(out)]
    r = run(argv, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "RESULT old line" and len(lines) == 3
    assert all(line.startswith("RESULT ") for line in lines)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


@pytest.mark.slow
def test_simulate_on_a_full_disk_leaves_the_results_file_as_it_was(data, tmp_path):
    out = tmp_path / "r.txt"
    old = "RESULT old line\n" * 20                         # larger than the size limit
    out.write_text(old)
    argv = SHADOW + ["simulate", "-t", str(data.small), "-c", "1k", "-a", "lru", "-o", str(out)]
    r = run(argv, cwd=tmp_path, fsize=FULL)
    assert r.returncode == 2
    assert one_line(r.stderr) == (f"shadow: error: {out}: cannot write: file too large (past the "
                                  f"file-size limit, `ulimit -f`)")
    assert out.read_text() == old and sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]


@pytest.mark.slow
def test_dump_holes_on_a_full_disk_says_why(data, tmp_path):
    argv = SHADOW + ["simulate", "-t", str(data.small), "-c", "1k", "-a", "lru", "--dump-holes",
                     str(tmp_path)]
    r = run(argv, cwd=tmp_path, fsize=FULL)
    assert r.returncode == 2 and list(tmp_path.iterdir()) == []
    assert one_line(r.stderr).endswith("cannot write: file too large (past the file-size limit,"
                                       " `ulimit -f`)"), r.stderr


@pytest.mark.slow
def test_a_device_output_is_refused_not_replaced(data, tmp_path):
    r = run(SHADOW + ["simulate", "-t", str(data.small), "-c", "1k", "-a", "lru", "-o",
                      os.devnull], cwd=tmp_path)
    assert r.returncode == 2
    assert one_line(r.stderr).startswith(f"shadow: error: {os.devnull}: cannot write: not a "
                                         f"regular file")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.slow
def test_stdout_on_a_full_device_is_one_line(data, tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run(SHADOW + ["stat", str(data.small)], cwd=str(tmp_path), stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2
    assert one_line(r.stderr) == "shadow: error: standard output: no space left on device"


# -- signals -----------------------------------------------------------------------------------
EXPECTED = {signal.SIGINT: (130, "shadow: interrupted"),
            signal.SIGTERM: (143, "shadow: terminated (SIGTERM)"),
            signal.SIGKILL: (-signal.SIGKILL, None)}


def _temporaries(directory: Path, *, written: bool = True) -> list[Path]:
    """The temporaries in ``directory`` (``written``: only those with content)."""
    out = []
    for p in directory.iterdir():
        if p.name.startswith(".tmp-"):
            try:
                if not written or p.stat().st_size > 0:
                    out.append(p)
            except FileNotFoundError:
                pass
    return out


def _check_signal_outcome(proc, sig: int, kids: dict[int, int], *,
                          worker_start_up: bool = False) -> None:
    """Exit status, stderr, no process left.  ``worker_start_up``: a SIGKILL that may land while
    the driver hands a new worker its start-up data (see docs/faults.md)."""
    _, err = finish(proc)
    status, line = EXPECTED[sig]
    assert proc.returncode == status, err
    if line is None and worker_start_up:
        # NOTE: that worker reads EOF where its start-up data should be; multiprocessing prints
        # it, and the worker exits
        assert not err or err.rstrip().endswith("EOFError: Ran out of input"), err
    elif line is None:
        assert err == "", err
    else:
        assert one_line(err) == line
    assert wait_gone(kids) == [], "processes left running"


def _strays_ok(directory: Path, sig: int) -> None:
    strays = stray_files(directory)
    if sig == signal.SIGKILL:
        # NOTE: only a SIGKILL can leave a temporary, and it is a .tmp- name (docs/faults.md)
        assert all(Path(s).name.startswith(".tmp-") for s in strays), strays
    else:
        assert strays == [], strays


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("point", ["reading", "writing"])
def test_convert_stopped_by_a_signal_leaves_no_output(data, tmp_path, point, sig):
    out = tmp_path / "out.lcp.zst"
    proc = start(SHADOW + ["convert", str(data.big_jsonl), str(out)], cwd=tmp_path)
    if point == "reading":
        def at() -> bool:
            return str(data.big_jsonl) in open_files(proc.pid) and not _temporaries(
                tmp_path, written=False)
    else:
        def at() -> bool:
            return bool(_temporaries(tmp_path))
    kids = signal_at(proc, at, sig)
    _check_signal_outcome(proc, sig, kids)
    assert not out.exists()
    _strays_ok(tmp_path, sig)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_convert_to_jsonl_stopped_while_writing_leaves_no_output(data, tmp_path, sig):
    out = tmp_path / "out.jsonl"
    proc = start(SHADOW + ["convert", str(data.big), str(out)], cwd=tmp_path)
    kids = signal_at(proc, lambda: bool(_temporaries(tmp_path)), sig)
    _check_signal_outcome(proc, sig, kids)
    assert not out.exists()
    _strays_ok(tmp_path, sig)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_stat_stopped_by_a_signal_is_one_line(data, tmp_path, sig):
    proc = start(SHADOW + ["stat", str(data.big)], cwd=tmp_path)
    kids = signal_at(proc, lambda: str(data.big) in open_files(proc.pid), sig)
    _check_signal_outcome(proc, sig, kids)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_simulate_stopped_mid_run_changes_nothing(data, tmp_path, sig):
    holes = tmp_path / "holes"
    holes.mkdir()
    results = tmp_path / "r.txt"
    results.write_text("RESULT old line\n")
    argv = SHADOW + ["simulate", "-t", str(data.big), "-c", "1k,4k,16k", "-a", "lru,s3fifo,arc",
                     "--dump-holes", str(holes), "-o", str(results)]
    proc = start(argv, cwd=tmp_path)
    kids = signal_at(proc, lambda: bool(_temporaries(holes)), sig)
    _check_signal_outcome(proc, sig, kids)
    assert results.read_text() == "RESULT old line\n"
    assert not [p for p in holes.iterdir() if not p.name.startswith(".tmp-")]
    _strays_ok(tmp_path, sig)


def _sweep(data: Data, out: Path):
    return start(SLOW_SWEEP + ["sweep", "-t", str(data.small), "-a", "lru", "-c", "1k,2k,4k",
                               "--out", str(out), "-j", "2"], cwd=ROOT)


def _cells(out: Path) -> list[Path]:
    d = out / "cells"
    return [p for p in d.iterdir() if p.suffix == ".result"] if d.is_dir() else []


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("point", ["starting workers", "cells running"])
def test_sweep_stopped_by_a_signal_leaves_no_worker(data, tmp_path, point, sig):
    """SIGINT goes to the whole process group (a terminal's Ctrl-C); SIGTERM and SIGKILL to the
    driver alone (kill PID): its workers must not outlive it either way."""
    out = tmp_path / "sw"
    proc = _sweep(data, out)
    if point == "starting workers":
        def at() -> bool:
            return bool(descendants(proc.pid)) and not _cells(out)
    else:
        def at() -> bool:
            # two workers and the resource tracker; the 1k cell done, the others sleeping
            return bool(_cells(out)) and len(descendants(proc.pid)) >= 3
    kids = signal_at(proc, at, sig, group=sig == signal.SIGINT)
    _check_signal_outcome(proc, sig, kids, worker_start_up=point == "starting workers")
    cells = _cells(out)
    assert [p.name for p in cells] == [p.name for p in cells if "lru.1024." in p.name]
    if point == "cells running":
        assert len(cells) == 1
    if sig != signal.SIGKILL:
        csv_rows = (out / "results.csv").read_text().splitlines()
        assert len(csv_rows) == 1 + len(cells)     # rebuilt on the way out
    _strays_ok(out, sig)


@pytest.mark.slow
def test_a_sweep_killed_by_sigkill_resumes(data, tmp_path):
    out = tmp_path / "sw"
    proc = _sweep(data, out)
    kids = signal_at(proc, lambda: bool(_cells(out)), signal.SIGKILL)
    _check_signal_outcome(proc, signal.SIGKILL, kids)
    r = run(SHADOW + ["sweep", "-t", str(data.small), "-a", "lru", "-c", "1k,2k", "--out",
                      str(out), "-j", "1"], cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "2 cells: 1 already done, 1 run, 0 failed" in r.stdout
    assert stray_files(out) == []
