"""Leaf-only eviction's cost: each policy with and without ``leaf-only``, in the same run.

    python bench/bench_leaf.py [--min-accesses 4000000] [--size 8k,128k] [--policies lru,vllm]

The serve loop alone (the trace decoded into arrays first), one cache per (policy, size, replay
order), pins on, verify on, best of 2 CPU times (``_common.loop_only``'s conditions, with the
replay order as a parameter).  Reports block accesses/s, the ratio of leaf-only to the policy
itself, and the extra CPU time per eviction, ``(t_leaf - t_plain) / evictions``: leaf-only's
bookkeeping runs once per insert and once per eviction (there are as many of each, once the
cache is full), plus the policy's walk past held blocks.  ``sglang`` (always leaf-only) is
measured against lru.  Writes bench/out/bench_leaf.json; no thresholds (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
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


def loop_run(arrays, policy: str, params: str, size: int, order: str,
             reps: int = 2) -> tuple[float, int, int]:
    """(best CPU seconds, block accesses, evictions) of one cache over arrays in memory."""
    from shadow.sim.core.loop import CacheRun
    from shadow.sim.registry import make_policy
    off, ids, nxt = arrays
    n = len(off) - 1
    max_b = int(np.max(np.diff(off))) + 1
    ce, ci, ts = np.ones(max_b), np.ones(max_b, dtype=np.int64), np.full(n, -1.0)
    best, evictions = float("inf"), 0
    for _ in range(reps):
        cr = CacheRun(make_policy(policy, size, params or None), True, order, True)
        cr.reserve(max_b)
        c = time.process_time()
        cr.serve_batch(off, ids, nxt, ts, ce, ci, 0)
        best = min(best, time.process_time() - c)
        assert cr.failed == 0, cr.failed
        evictions = cr.n_eviction
    return best, len(ids), evictions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-accesses", type=int, default=4_000_000)
    ap.add_argument("--size", default="8k,128k")
    ap.add_argument("--policies", default="lru,fifo,vllm,s3fifo")
    ap.add_argument("--orders", default="deepest-first,prefix-order")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    arrays = load_arrays(tiled_trace(args.min_accesses))
    rows = []
    for order in args.orders.split(","):
        for size in (parse_size(s) for s in args.size.split(",")):
            base = {}
            for name in args.policies.split(","):
                t0, n, e0 = loop_run(arrays, name, "", size, order)
                t1, _, e1 = loop_run(arrays, name, "leaf-only=1", size, order)
                base[name] = (t0, e0)
                rows.append(dict(order=order, size=size, policy=name, plain_s=t0, leaf_s=t1,
                                 accesses=n, plain_evictions=e0, leaf_evictions=e1,
                                 ratio=t0 / t1, extra_ns_per_eviction=1e9 * (t1 - t0) / max(e1, 1)))
            if "lru" in base:
                t1, n, e1 = loop_run(arrays, "sglang", "", size, order)
                t0, e0 = base["lru"]
                rows.append(dict(order=order, size=size, policy="sglang (vs lru)", plain_s=t0,
                                 leaf_s=t1, accesses=n, plain_evictions=e0, leaf_evictions=e1,
                                 ratio=t0 / t1,
                                 extra_ns_per_eviction=1e9 * (t1 - t0) / max(e1, 1)))
            for r in rows[-len(base) - ("lru" in base):]:
                print(f"{r['order']:14s} {r['size']:>7d} {r['policy']:16s} "
                      f"plain {r['accesses'] / r['plain_s'] / 1e6:6.1f} M/s  "
                      f"leaf {r['accesses'] / r['leaf_s'] / 1e6:6.1f} M/s  "
                      f"ratio {r['ratio']:.2f}  +{r['extra_ns_per_eviction']:.0f} ns/eviction  "
                      f"evictions {r['plain_evictions']} / {r['leaf_evictions']}", flush=True)
    (OUT / "bench_leaf.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
