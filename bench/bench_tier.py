"""An offload tier behind lru against lru alone, same recording, same run.

    python bench/bench_tier.py [--requests 135000] [--rounds 3]

Uses bench_timing's synthetic recording (``bench/out/recording-<requests>.lcp``; 135,000 requests
are ~1M block accesses), then times, rounds alternated, CPU time (decode included in both):
``run_trace_recorded`` on one lru cache of 8k blocks, and ``run_with_tiers`` on the same cache
with one host tier (lru, 32k blocks), and with that host tier and an lru disk tier of 128k blocks
behind it (a chain).  Prints the medians and the ratios tier / alone and chain / alone, and the
bytes per tier slot an lru and an arc tier of 1M chunks allocate.  No thresholds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_timing import make_recording  # noqa: E402
from shadow.sim import CacheSpec, Simulator  # noqa: E402
from shadow.sim.cost.models import parse_cost_model  # noqa: E402
from shadow.sim.tiers.model import parse_tier, parse_tiers  # noqa: E402
from shadow.sim.tiers.run import run_with_tiers  # noqa: E402
from shadow.sim.timing.run import run_trace_recorded  # noqa: E402
from shadow.trace import open_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=135_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    path = out / f"recording-{args.requests}.lcp"
    if not path.exists():
        make_recording(path, args.requests)
    tiers = parse_tier("cpu:32kblk:lru")
    chain = parse_tiers("cpu:32kblk:lru>disk:128kblk:lru")
    cost = parse_cost_model("uniform")

    def sim() -> Simulator:
        return Simulator([CacheSpec("lru", 8192)], lookup="vllm", block_size_tokens=16)

    def alone() -> float:
        c = time.process_time()
        with open_trace(str(path)) as tr:
            run_trace_recorded(sim(), tr, str(path), 16)
        return time.process_time() - c

    def tiered(specs) -> float:
        c = time.process_time()
        with open_trace(str(path)) as tr:
            run_with_tiers(sim(), tr, str(path), 16, specs, None, cost)
        return time.process_time() - c

    a, t, ch = [], [], []
    for _ in range(args.rounds):
        a.append(alone())
        t.append(tiered(tiers))
        ch.append(tiered(chain))
    ma, mt, mc = statistics.median(a), statistics.median(t), statistics.median(ch)
    print(f"lru 8k alone (recorded timing):  {ma:.3f} s CPU")
    print(f"lru 8k + cpu tier 32k blocks:    {mt:.3f} s CPU")
    print(f"lru 8k + cpu 32k > disk 128k:    {mc:.3f} s CPU")
    print(f"tier / alone: x{mt / ma:.2f} of the time (target <= x1.5)")
    print(f"chain / alone: x{mc / ma:.2f} of the time")
    from shadow.sim.tiers.loop import ChunkTier
    n = 1 << 20
    for policy in ("lru", "arc"):
        b = ChunkTier(n, policy).allocated_bytes()
        print(f"{policy} tier of {n} chunks: {b / n:.1f} B per tier slot allocated")


if __name__ == "__main__":
    main()
