"""Trace-layer benchmark: read speed vs the zstd decode ceiling, convert speed and memory.

    python bench/bench_trace.py [--min-accesses 10000000] [--repeat 3]

Builds (once) a tiled JSONL trace of >= 10M block accesses from the bundled Mooncake traces
(bench/tile.py), then measures, in this one run:

* convert  JSONL -> .lcp.zst in a child process: wall and CPU time, block accesses/s, and peak
  memory (VmHWM of the child minus its VmHWM after imports), per block access / unique block;
  baseline: ``orjson.loads`` of every line and nothing else (the floor of any JSONL reader
  written in Python).
* read     LcpReader over the .lcp.zst (batches of arrays, next access decoded) vs the zstd
  decode ceiling (python-zstandard stream_reader decoding the same file into one reused buffer,
  output dropped), alternating; and LcpReader over the plain .lcp.

CPU time counts every thread of the process (the reader decodes in a prefetch thread, the
converter interns in a worker thread), so a CPU-time rate is what one core would do.

Each figure is the best of ``--repeat`` runs (the machine is shared); results go to stdout and
bench/out/bench_trace.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

_CHILD_CONVERT = r"""
import json, sys, time
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) * 1024
import shadow.trace.convert as cv
from shadow.trace import jsonl
phase = {}
def timed(name, fn):
    def g(*a, **k):
        c = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            phase[name] = phase.get(name, 0.0) + time.process_time() - c
    return g
jsonl.JsonlReader.read = timed("parse_intern", jsonl.JsonlReader.read)
cv.annotate = timed("sort_annotate", cv.annotate)
cv.write_lcp = timed("pack_compress", cv.write_lcp)
base = hwm()
t = time.perf_counter(); c = time.process_time()
s = cv.convert_file(sys.argv[1], sys.argv[2], level=int(sys.argv[3]))
print(json.dumps({"wall": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "hwm": hwm(), "base_hwm": base, "phases_cpu": phase, **s}))
"""


def best(fn, repeat: int) -> dict:
    runs = [fn() for _ in range(repeat)]
    return min(runs, key=lambda r: r["cpu"])


def bench_convert(jsonl: Path, out: Path, level: int) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD_CONVERT, str(jsonl), str(out), str(level)],
                       capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(r.stdout)


def bench_orjson(jsonl: Path) -> dict:
    import orjson

    t, c = time.perf_counter(), time.process_time()
    n = 0
    with open(jsonl, "rb") as f:
        for line in f:
            n += len(orjson.loads(line)["hash_ids"])
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "accesses": n}


def bench_zstd_ceiling(path: Path) -> dict:
    """Decode the whole file into one reused 1 MiB buffer (no allocation, output dropped)."""
    import zstandard

    t, c = time.perf_counter(), time.process_time()
    n = 0
    buf = bytearray(1 << 20)
    with open(path, "rb") as f:
        r = zstandard.ZstdDecompressor(max_window_size=1 << 31).stream_reader(
            f, read_across_frames=True)
        while True:
            k = r.readinto(buf)
            if not k:
                break
            n += k
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "bytes": n}


def plain_copy(path: Path, out: Path) -> None:
    import zstandard

    with open(path, "rb") as f, open(out, "wb") as o:
        zstandard.ZstdDecompressor(max_window_size=1 << 31).copy_stream(f, o)


def bench_read(path: Path, batch_entries: int | None = None) -> dict:
    from shadow.trace import LcpReader

    kw = {"batch_entries": batch_entries} if batch_entries else {}
    t, c = time.perf_counter(), time.process_time()
    m = 0
    with LcpReader(str(path), **kw) as r:
        for b in r:
            m += b.n_blocks
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c, "entries": m}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-accesses", type=int, default=10_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--level", type=int, default=1)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    jsonl = OUT / f"tiled-{a.min_accesses}.jsonl"
    if not jsonl.exists():
        from tile import tile
        tile(a.min_accesses, str(jsonl))
    lcp = OUT / f"tiled-{a.min_accesses}.lcp.zst"

    conv = best(lambda: bench_convert(jsonl, lcp, a.level), a.repeat)
    n_acc, n_uniq = conv["n_block_accesses"], conv["n_unique_blocks"]
    peak = conv["hwm"] - conv["base_hwm"]
    base = best(lambda: bench_orjson(jsonl), a.repeat)
    plain = OUT / f"tiled-{a.min_accesses}.lcp"
    plain_copy(lcp, plain)
    # NOTE: ceiling and reader alternate, so a burst of load from other users hits both
    ceils, reads = [], []
    for _ in range(a.repeat):
        ceils.append(bench_zstd_ceiling(lcp))
        reads.append(bench_read(lcp))
    ceil = min(ceils, key=lambda r: r["cpu"])
    read = min(reads, key=lambda r: r["cpu"])
    read_plain = best(lambda: bench_read(plain), a.repeat)
    n_entries_ceiling = (ceil["bytes"] - 8192 - 68 * conv["n_requests"]) / 16
    res = {
        "trace": {"requests": conv["n_requests"], "block_accesses": n_acc,
                  "unique_blocks": n_uniq, "jsonl_bytes": jsonl.stat().st_size,
                  "lcp_zst_bytes": lcp.stat().st_size, "zstd_level": a.level},
        "convert": {"wall_s": conv["wall"], "cpu_s": conv["cpu"],
                    "phases_cpu_s": conv["phases_cpu"],
                    "accesses_per_s_wall": n_acc / conv["wall"],
                    "accesses_per_s_cpu": n_acc / conv["cpu"],
                    "peak_bytes": peak,
                    "budget_bytes": 32 * n_acc + 64 * n_uniq,
                    "peak_per_access_if_all_per_access": peak / n_acc},
        "convert_baseline_orjson_only": {"cpu_s": base["cpu"],
                                         "accesses_per_s_cpu": base["accesses"] / base["cpu"]},
        "read": {"wall_s": read["wall"], "cpu_s": read["cpu"],
                 "entries_per_s_wall": read["entries"] / read["wall"],
                 "entries_per_s_cpu": read["entries"] / read["cpu"]},
        "read_plain_lcp": {"cpu_s": read_plain["cpu"],
                           "entries_per_s_cpu": read_plain["entries"] / read_plain["cpu"]},
        "zstd_ceiling": {"wall_s": ceil["wall"], "cpu_s": ceil["cpu"],
                         "entries_per_s_wall": n_entries_ceiling / ceil["wall"],
                         "entries_per_s_cpu": n_entries_ceiling / ceil["cpu"],
                         "decompressed_MB_per_s_cpu": ceil["bytes"] / ceil["cpu"] / 1e6},
    }
    res["ratios"] = {
        "read_vs_zstd_ceiling_cpu": res["read"]["entries_per_s_cpu"]
        / res["zstd_ceiling"]["entries_per_s_cpu"],
        "convert_vs_orjson_only_cpu": res["convert"]["accesses_per_s_cpu"]
        / res["convert_baseline_orjson_only"]["accesses_per_s_cpu"],
        "convert_peak_vs_budget": peak / res["convert"]["budget_bytes"],
    }
    (OUT / "bench_trace.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
