"""The PrefixSim article's two comparisons on a trace with sessions (docs/experiments.md).

    .venv/bin/python bench/seed_experiments.py [--sessions 400] [--seed 0]

1. Session-level against block-level eviction: lru / session_lru and random_compute /
   session_random_compute at a small and a large cache (1/16 and 1/2 of the trace's distinct
   prompt blocks), hit ratio and compute saving under the block-16 Qwen3-Coder cost model.
2. asym_cache against lru under a position cost model (and under the uniform one, where
   asym_cache is documented to equal lru), at four cache sizes.

The trace is `shadow synth --seed SEED --sessions N` (16-token blocks; sessions, types, turns and
arrival times); `--lookup prompt` counts each request's prompt blocks (the generated ones are
inserted).  Prints Markdown tables; each run is one `shadow simulate` pass per comparison.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COST = "qwen3coder30b_blksz_16"


def shadow(*args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                       cwd=ROOT)
    if p.returncode:
        raise SystemExit(f"shadow {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def results(out: str) -> dict[tuple[str, int], dict[str, str]]:
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            kv = dict(f.split("=", 1) for f in line.split()[1:])
            res[(kv["algo"], int(kv["cache_size"]))] = kv
    return res


def distinct_prompt_blocks(trace: Path) -> int:
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from shadow.trace import open_trace
    seen: set[int] = set()
    with open_trace(str(trace)) as tr:
        B = tr.header.block_size_tokens
        for b in tr:
            off = np.asarray(b.offsets)
            ids = np.asarray(b.block_ids)
            inp = np.asarray(b.records["input_length"])
            for i in range(len(off) - 1):
                n = min(int(inp[i]) // B, int(off[i + 1] - off[i]))
                seen.update(ids[off[i]:off[i] + n].tolist())
    return len(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(exist_ok=True)
    trace = out_dir / f"synth-{args.seed}-{args.sessions}.lcp.zst"
    if not trace.exists():
        shadow("synth", "--seed", str(args.seed), "--sessions", str(args.sessions), str(trace))
    n = distinct_prompt_blocks(trace)
    small, large = max(n // 16, 64), max(n // 2, 128)
    print(f"trace: shadow synth --seed {args.seed} --sessions {args.sessions}: {n} distinct "
          f"prompt blocks; small cache {small}, large {large} blocks\n")

    pol = ["lru", "session_lru", "random_compute", "session_random_compute"]
    r = results(shadow("simulate", "-t", str(trace), "-a", ",".join(pol), "-c",
                       f"{small},{large}", "--lookup", "prompt", "--cost-model", COST))
    print(f"| policy | hit ratio, {small} blocks | compute saving, {small} | "
          f"hit ratio, {large} blocks | compute saving, {large} |")
    print("|---|---:|---:|---:|---:|")
    for p in pol:
        a, b = r[(p, small)], r[(p, large)]
        print(f"| {p} | {float(a['block_hit_ratio']):.4f} | {float(a['compute_saving_ratio']):.4f} "
              f"| {float(b['block_hit_ratio']):.4f} | {float(b['compute_saving_ratio']):.4f} |")
    print()

    sizes = [max(n // d, 64) for d in (32, 16, 8, 2)]
    print("| cost model | cache (blocks) | lru compute saving | asym_cache compute saving | "
          "lru hit ratio | asym_cache hit ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for cost in ("position", "uniform"):
        r = results(shadow("simulate", "-t", str(trace), "-a", "lru,asym_cache", "-c",
                           ",".join(str(s) for s in sizes), "--lookup", "prompt",
                           "--cost-model", cost))
        for s in sizes:
            a, b = r[("lru", s)], r[("asym_cache", s)]
            print(f"| {cost} | {s} | {float(a['compute_saving_ratio']):.4f} | "
                  f"{float(b['compute_saving_ratio']):.4f} | {float(a['block_hit_ratio']):.4f} | "
                  f"{float(b['block_hit_ratio']):.4f} |")


if __name__ == "__main__":
    main()
