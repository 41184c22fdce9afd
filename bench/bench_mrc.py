"""The one-pass curve's speed and memory against one ``simulate -a lru --no-pin`` run, same run.

    python bench/bench_mrc.py [--min-accesses 10000000] [--size 8k] [--rounds 5]

Over the tiled trace (bench/tile.py, .lcp.zst), alternating in each round:
* e2e    end to end from the file, decode included, as the commands run: ``shadow simulate -a
         lru --no-pin -c SIZE`` (one cache, one thread) and ``shadow mrc`` (every size at once);
         CPU and wall seconds, medians over the rounds, and the speed ratio mrc / lru (>= 0.5 is
         the target: docs/performance.md);
* loop   the work alone on the trace decoded into arrays first, fed in the reader's batches:
         the lru serve loop (pins off) and the stack pass;
* memory the stack pass's arrays per distinct block (``StackPass.allocated_bytes``), and the
         peak RSS of each command in a child process;
* sampled the live curve (``SampledCurve``, SHARDS) on the two bundled traces at several rates
         and fixed sizes, seeds 0-4: its block hit ratio against the exact curve's at 1k-32k
         blocks (bins of 64 blocks), mean and largest absolute error, plain and SHARDS_adj; the
         rate reached, its bytes, and its CPU time per request (admission + release).
Writes bench/out/bench_mrc.json; no thresholds here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402

from _common import load_arrays, parse_size  # noqa: E402
from bench_sim import tiled_trace  # noqa: E402

#: requests per batch in the loop-only figures (about the reader's)
BATCH_REQUESTS = 16384


def e2e_lru(path: Path, size: int) -> tuple[float, float, float]:
    """(CPU s, wall s, block_hit_ratio) of ``simulate -a lru --no-pin -c SIZE`` in process."""
    from shadow.sim.core.simulator import run_trace, sim_decode_threads
    from shadow.sim.core.simulator import CacheSpec, Simulator
    from shadow.trace import open_trace
    c, t = time.process_time(), time.perf_counter()
    sim = Simulator([CacheSpec("lru", size)], pin=False, threads=1)
    with open_trace(str(path), decode_threads=sim_decode_threads()) as tr:
        run_trace(sim, tr, path)
    r = sim.results()[0]
    return time.process_time() - c, time.perf_counter() - t, r.block_hit_ratio


def e2e_mrc(path: Path, size: int) -> tuple[float, float, float, object]:
    """(CPU s, wall s, block_hit_ratio at SIZE, curve) of ``shadow mrc`` in process."""
    from shadow.sim.mrc.offline import curve_of_trace, curve_spec
    c, t = time.process_time(), time.perf_counter()
    spec = curve_spec()
    with spec.open_trace(str(path)) as tr:
        curve = curve_of_trace(tr, path, spec)
    ratio = curve.ratios(size)["block_hit_ratio"]
    return time.process_time() - c, time.perf_counter() - t, ratio, curve


def loop_lru(arrays, size: int) -> float:
    from shadow.sim.core.loop import CacheRun
    from shadow.sim.registry import make_policy
    off, ids, nxt = arrays
    n = len(off) - 1
    max_b = int(np.max(np.diff(off))) + 1
    ce, ci, ts = np.ones(max_b), np.ones(max_b, dtype=np.int64), np.full(n, -1.0)
    cr = CacheRun(make_policy("lru", size), False, "deepest-first", True)
    cr.reserve(max_b)
    c = time.process_time()
    for k in range(0, n, BATCH_REQUESTS):
        e = min(n, k + BATCH_REQUESTS)
        lo, hi = off[k], off[e]
        cr.serve_batch(off[k:e + 1] - lo, ids[lo:hi], nxt[lo:hi], ts[k:e], ce, ci, k)
    return time.process_time() - c


def loop_mrc(arrays) -> tuple[float, int, int]:
    """(CPU s, allocated bytes, distinct blocks) of the stack pass over the arrays."""
    from shadow.sim.mrc.stack import StackPass
    off, ids, _ = arrays
    n = len(off) - 1
    sp = StackPass(True, False)
    one = np.ones(1)
    c = time.process_time()
    for k in range(0, n, BATCH_REQUESTS):
        e = min(n, k + BATCH_REQUESTS)
        sp.feed(off[k:e + 1] - off[k], ids[off[k]:off[e]], None, None, one, k)
    t = time.process_time() - c
    return t, sp.allocated_bytes(), sp.n_distinct


SAMPLED_SIZES = [1 << k for k in range(10, 16)]
SAMPLED_SETTINGS = [("rate", 0.1), ("rate", 0.01), ("rate", 0.001), ("max_ids", 1024),
                    ("max_ids", 4096), ("max_ids", 16384)]


def requests_of(path: Path) -> list[np.ndarray]:
    from shadow.trace import open_trace
    out = []
    with open_trace(str(path)) as tr:
        for b in tr:
            off = np.asarray(b.offsets)
            out += [np.ascontiguousarray(b.block_ids[off[i]:off[i + 1]], dtype=np.int64)
                    for i in range(len(off) - 1)]
    return out


def sampled_errors(path: Path, seeds: int = 5) -> list[dict]:
    """One row per setting: errors of the sampled curve against the exact one (module doc)."""
    from shadow.sim.mrc.offline import curve_of_trace, curve_spec
    from shadow.sim.mrc.shards import SampledCurve
    spec = curve_spec()
    with spec.open_trace(str(path)) as tr:
        exact = curve_of_trace(tr, path, spec)
    want = np.array([exact.ratios(c)["block_hit_ratio"] for c in SAMPLED_SIZES])
    reqs = requests_of(path)
    rows = []
    for kind, value in SAMPLED_SETTINGS:
        errs = {False: [], True: []}
        rates, nbytes, cpu = [], [], []
        for seed in range(seeds):
            sc = (SampledCurve(64.0, 1024, value, 0, seed) if kind == "rate"
                  else SampledCurve(64.0, 1024, 1.0, int(value), seed))
            c = time.process_time()
            for r in reqs:
                sc.admit(r, len(r))
                sc.release(r, r[:0], 0)
            cpu.append(time.process_time() - c)
            for adj in (False, True):
                got = np.array([sc.ratio_at(x, adj) for x in SAMPLED_SIZES])
                errs[adj].append(np.abs(got - want))
            rates.append(sc.rate)
            nbytes.append(sc.allocated_bytes())
        rows.append({"trace": path.name, kind: value, "rate_reached": float(np.mean(rates)),
                     "bytes": int(np.mean(nbytes)),
                     "us_per_request": 1e6 * float(np.median(cpu)) / len(reqs),
                     **{f"{'adj' if adj else 'plain'}_{stat}": float(f(np.array(e)))
                        for adj, e in errs.items()
                        for stat, f in (("mean_abs", np.mean), ("max_abs", np.max))}})
    return rows


def peak_rss_kb(args: list[str]) -> int:
    """Peak RSS of one ``shadow`` command in a child process."""
    # NOTE: VmHWM, not ru_maxrss: the latter survives execve, so a child would report this
    # process's peak (the trace's arrays) when that is larger
    code = ("import sys; from shadow.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]\n"
            "print(hwm[0].split()[1], file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                       text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return int(r.stderr.strip().splitlines()[-1])


def speed(args) -> dict:
    """The e2e, loop and memory sections (module doc)."""
    size = parse_size(args.size)
    path = tiled_trace(args.min_accesses)
    rows: dict[str, list] = {"lru_cpu": [], "lru_wall": [], "mrc_cpu": [], "mrc_wall": [],
                             "lru_loop": [], "mrc_loop": []}
    arrays = load_arrays(path)
    n_acc = len(arrays[1])
    for k in range(args.rounds):
        order = (0, 1) if k % 2 == 0 else (1, 0)
        for which in order:
            if which == 0:
                c, w, r_lru = e2e_lru(path, size)
                rows["lru_cpu"].append(c)
                rows["lru_wall"].append(w)
                rows["lru_loop"].append(loop_lru(arrays, size))
            else:
                c, w, r_mrc, curve = e2e_mrc(path, size)
                rows["mrc_cpu"].append(c)
                rows["mrc_wall"].append(w)
                t, nbytes, distinct = loop_mrc(arrays)
                rows["mrc_loop"].append(t)
                del curve
    assert f"{r_lru:.6f}" == f"{r_mrc:.6f}", (r_lru, r_mrc)
    med = {k: statistics.median(v) for k, v in rows.items()}
    return {
        "trace": str(path.name), "block_accesses": n_acc, "distinct_blocks": distinct,
        "size": size, "rounds": args.rounds, "medians_s": med,
        "e2e_ratio_cpu": med["lru_cpu"] / med["mrc_cpu"],
        "e2e_ratio_wall": med["lru_wall"] / med["mrc_wall"],
        "loop_ratio": med["lru_loop"] / med["mrc_loop"],
        "mrc_e2e_m_per_s_cpu": n_acc / med["mrc_cpu"] / 1e6,
        "lru_e2e_m_per_s_cpu": n_acc / med["lru_cpu"] / 1e6,
        "mrc_loop_m_per_s": n_acc / med["mrc_loop"] / 1e6,
        "lru_loop_m_per_s": n_acc / med["lru_loop"] / 1e6,
        "mrc_bytes_per_distinct_block": nbytes / distinct,
        "peak_rss_kb": {
            "simulate": peak_rss_kb(["simulate", "-t", str(path), "-a", "lru", "--no-pin", "-c",
                                     str(size), "--threads", "1"]),
            "mrc": peak_rss_kb(["mrc", "-t", str(path), "--at", str(size)]),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-accesses", type=int, default=10_000_000)
    ap.add_argument("--size", default="8k")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--skip", default="", help="comma list of sections to skip: speed, sampled")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    res = {}
    if "sampled" not in skip:
        res["sampled"] = [row for p in (ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl",
                                        ROOT / "tests" / "data" / "mooncake_conversation.jsonl")
                          for row in sampled_errors(p)]
        for row in res["sampled"]:
            print(json.dumps(row))
    if "speed" not in skip:
        res.update(speed(args))
    print(json.dumps({k: v for k, v in res.items() if k != "sampled"}, indent=1))
    (OUT / "bench_mrc.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
