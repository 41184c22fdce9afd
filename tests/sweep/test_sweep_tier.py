"""`shadow sweep --tier`: GPU size x tier size cells give what `shadow simulate --tier` gives,
older sweeps keep their keys, `shadow plot` draws the tier family, bad input in one line."""

from __future__ import annotations

import csv

import pytest

pytest.importorskip("shadow.sim.core.loop")
from shadow.sim.tiers.run import TIER_KEYS  # noqa: E402
from shadow.sweep.plan import Cell  # noqa: E402
from shadow.sweep.store import parse_result_line  # noqa: E402
from tests.sim.test_timing import _overlapping, _recording  # noqa: E402
from tests.sweep.test_sweep_timing import shadow  # noqa: E402
from tests.tiers import unit_rows


@pytest.mark.slow
def test_tier_cells_equal_simulate_and_plot(tmp_path):
    trace = _recording(tmp_path / "r.lcp", _overlapping(200, 7))
    tier = "cpu:4k,16k:lru:chunk=2"              # bytes: 4 KiB, 16 KiB of 256-byte blocks
    proc = shadow("sweep", "-t", trace, "-a", "lru,arc", "-c", "8,16", "--tier", tier,
                  "--bytes-per-block", "256", "--timing", "recorded",
                  "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "s" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 2                       # policies x GPU sizes x tier sizes
    sim = shadow("simulate", "-t", trace, "-a", "lru,arc", "-c", "8,16", "--tier", tier,
                 "--bytes-per-block", "256", "--timing", "recorded")
    assert sim.returncode == 0, sim.stderr
    want = {(d["algo"], d["cache_size"], d["tier"]): d for d in
            (parse_result_line(x) for x in sim.stdout.splitlines() if x.startswith("RESULT"))}
    assert len(want) == 8
    for r in rows:
        ref = want[(r["algo"], r["cache_size"], r["tier"])]
        for key in ("n_blocks", "prefix_hit_ratio", "n_eviction") + TIER_KEYS:
            assert r[key] == ref[key], (r["algo"], r["cache_size"], key)
    assert {r["tier_chunks"] for r in rows} == {str(4096 // 512), str(16384 // 512)}
    plot = shadow("plot", str(tmp_path / "s"))
    assert plot.returncode == 0, plot.stderr
    pngs = sorted(p.split("/")[-1] for p in plot.stdout.split())
    assert [p for p in pngs if "__tier-cpu-lru" in p] == [
        "r.lcp__uniform__timing-recorded__arc__tier-cpu-lru.png",
        "r.lcp__uniform__timing-recorded__lru__tier-cpu-lru.png"]


def test_a_cell_without_a_tier_keeps_its_key():
    cell = Cell("/t/x.lcp", "lru", 8)
    assert "tier" not in cell.key() and "kv_bytes" not in cell.key()
    tiered = Cell("/t/x.lcp", "lru", 8, tier="cpu:8kblk:lru:bw=50,chunk=1,threshold=0,"
                  "tracker=64000", kv_bytes="256")
    assert tiered.digest != cell.digest and Cell.from_key(tiered.key()) == tiered


@pytest.mark.parametrize("args,words", unit_rows([
    (["-a", "belady", "--tier", "cpu:8kblk:lru"], "--tier cannot run belady"),
    (["-a", "lru", "--tier", "cpu:1g:lru"], "needs the bytes of a KV block"),
    (["-a", "lru", "--tier", "cpu:3blk:lru:chunk=4"], "smaller than one offload chunk"),
    (["-a", "lru", "--bytes-per-block", "100"], "no --tier given"),
    (["-a", "lru", "--tier", "ssd:1g:lru"], "unknown medium"),
    (["-a", "lru", "--tier", "cpu:1g:lru", "--kv-config", "/nonexistent/c.json"], "no such file"),
], 6))
def test_bad_tier_refused_before_any_cell(tmp_path, args, words):
    trace = _recording(tmp_path / "r.lcp", _overlapping(20, 7))
    proc = shadow("sweep", "-t", trace, "-c", "8", *args, "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert words in proc.stderr and not (tmp_path / "s").exists()
