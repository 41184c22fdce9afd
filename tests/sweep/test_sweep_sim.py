"""`shadow sweep` end to end with the real simulator on the bundled trace (converted to lcp once)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("shadow.sim.core.loop")
from shadow.sweep.store import parse_result_line  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PEER = ROOT / "tests" / "data" / "peer_results_synthetic.txt"


def shadow(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def read_rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_unpinned_sweep_reproduces_the_peer_results(trace, tmp_path):
    algos = ["lru", "fifo", "clock", "sieve"]
    proc = shadow("sweep", "-t", trace, "-a", ",".join(algos), "-c", "2k,8k,32k", "--no-pin",
                  "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{len(algos) * 3} cells: 0 already done, {len(algos) * 3} run, 0 failed")
    peer = {}
    for line in PEER.read_text().splitlines():
        if line.startswith("RESULT ") and "cost_model=uniform" in line:
            d = parse_result_line(line)
            peer[(d["algo"], d["cache_size"])] = d
    rows = read_rows(tmp_path / "s" / "results.csv")
    assert len(rows) == len(algos) * 3
    for r in rows:
        ref = peer[(r["algo"], r["cache_size"])]
        for key in ("n_req", "n_blocks", "block_hit_ratio", "n_eviction", "n_self_eviction"):
            assert r[key] == ref[key], (r["algo"], r["cache_size"], key)
        assert r["pin"] == "off" and r["trace"] == "synthetic.lcp.zst" and r["trace_path"] == trace


@pytest.mark.slow
def test_a_missing_trace_fails_its_cells_only(trace, tmp_path):
    missing = tmp_path / "gone.lcp.zst"
    proc = shadow("sweep", "-t", trace, "-t", str(missing), "-a", "lru", "-c", "1k,4k",
                  "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 2
    err = proc.stderr.splitlines()
    assert sorted(err[:2]) == [f"cell failed: gone.lcp.zst lru {c} uniform: {missing}: no such trace file "
                               f"(with --executor ray the path must exist on every node)" for c in (1024, 4096)]
    assert err[2:] == ["shadow: error: 2 of 4 cells failed (listed above); run the same command again to retry them"]
    assert proc.stdout.startswith("4 cells: 0 already done, 2 run, 2 failed")
    rows = read_rows(tmp_path / "s" / "results.csv")
    assert [(r["trace"], r["cache_size"]) for r in rows] == [("synthetic.lcp.zst", "1024"),
                                                            ("synthetic.lcp.zst", "4096")]


@pytest.mark.slow
def test_an_unknown_policy_or_cost_model_fails_before_any_cell(trace, tmp_path):
    proc = shadow("sweep", "-t", trace, "-a", "lru,nosuch", "-c", "1k", "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "unknown policy 'nosuch'" in proc.stderr
    proc = shadow("sweep", "-t", trace, "-a", "lru", "-c", "1k", "--cost-model", "linear:x",
                  "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_killed_sweep_resumes_with_only_the_missing_cells(trace, tmp_path):
    algos = ",".join(["lru", "fifo", "clock", "sieve", "belady", "s3fifo", "arc"])
    n = len(algos.split(",")) * 8
    out = tmp_path / "s"
    args = [sys.executable, "-m", "shadow", "sweep", "-t", trace, "-a", algos, "-c", "512:64k:log8",
            "--cost-model", "position", "--out", str(out), "-j", "1"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    cells = out / "cells"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if cells.is_dir() and any(p.suffix == ".result" for p in cells.iterdir()):
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    done = {p.name: p.stat().st_mtime_ns for p in cells.iterdir() if p.suffix == ".result"}
    assert 0 < len(done) < n, "the sweep was not stopped mid-run"

    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"{n} cells: {len(done)} already done, {n - len(done)} run, 0 failed")
    assert all((cells / name).stat().st_mtime_ns == t for name, t in done.items())
    assert not [p for p in cells.iterdir() if p.name.startswith(".")]

    fresh = shadow(*args[3:-4], "--out", str(tmp_path / "fresh"), "-j", "2")
    assert fresh.returncode == 0, fresh.stderr
    assert (out / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()


@pytest.mark.slow
def test_plot_a_real_sweep(trace, tmp_path):
    import matplotlib.image

    algos = ",".join(["lru", "fifo", "belady"])
    proc = shadow("sweep", "-t", trace, "-a", algos, "-c", "1k:16k:log3", "--cost-model", "uniform",
                  "--cost-model", "linear:865,2", "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    proc = shadow("plot", str(tmp_path / "s"), "--bytes-per-block", "1536k", "--out", str(tmp_path / "png"))
    assert proc.returncode == 0, proc.stderr
    names = sorted(Path(p).name for p in proc.stdout.split())
    assert len(names) == 2 and all(n.startswith("synthetic.lcp.zst__") and n.endswith(".png") for n in names)
    for p in proc.stdout.split():
        data = Path(p).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        img = matplotlib.image.imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 600 and img.std() > 0.01


@pytest.mark.slow
def test_sweep_cells_equal_shadow_simulate(trace, tmp_path):
    algos = ",".join(["lru", "s3fifo", "belady"])
    common = ["-t", trace, "-a", algos, "--cost-model", "position", "--algo-params", "lru:"]
    # NOTE: 256 blocks is below the trace's largest request (374): skipped requests, and the
    # oracle then plans without them.
    sim = shadow("simulate", *common, "-c", "256,1k,4k", "--format", "result")
    assert sim.returncode == 0, sim.stderr
    expected = {}
    for line in sim.stdout.splitlines():
        if line.startswith("RESULT "):
            d = parse_result_line(line)
            expected[(d.pop("algo"), d.pop("cache_size"))] = d
    proc = shadow("sweep", *common, "-c", "256,1k:4k:log2", "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(tmp_path / "s" / "results.csv")
    assert len(rows) == len(expected) == 3 * len(algos.split(","))
    assert all(int(r["n_req_skipped"]) > 0 for r in rows if r["cache_size"] == "256")
    for r in rows:
        ref = expected[(r["algo"], r["cache_size"])]
        for key, value in ref.items():
            if key != "trace":
                assert r[key] == value, (r["algo"], r["cache_size"], key)


@pytest.mark.slow
def test_ctrl_c_stops_promptly_and_keeps_the_completed_cells(trace, tmp_path):
    algos = ",".join(["lru", "fifo", "clock", "sieve", "belady", "s3fifo", "arc"])
    out = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-m", "shadow", "sweep", "-t", trace, "-a", algos,
                             "-c", "512:64k:log8", "--out", str(out), "-j", "2"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "cells").is_dir() and any(p.suffix == ".result" for p in (out / "cells").iterdir()):
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the driver and its workers
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    files = [p for p in (out / "cells").iterdir() if p.suffix == ".result"]
    assert 0 < len(files) < len(algos.split(",")) * 8
    assert len(read_rows(out / "results.csv")) == len(files)  # the CSV was rebuilt on the way out
