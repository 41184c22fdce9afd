"""A/B of built source trees: the same caches stepped by each tree, rounds interleaved.

    python bench/ab_builds.py TREE_A TREE_B [...] --policies arc,s3fifo --size 8k,512k
        [--rounds 5] [--mode loop|e2e] [--trace bench/out/tiled-10000000.lcp.zst]

Each TREE is a checkout with its extensions built in place (``git worktree add /tmp/base REV``
then ``python setup.py build_ext --inplace`` there).  One worker process per tree imports
``shadow`` from it (``PYTHONPATH``) and serves one (policy, size) cache per request:

* ``loop``: the serve loop alone over the whole trace decoded into arrays first (CPU seconds of
  the worker: block accesses / s), pins on, deepest first, verify on, uniform cost;
* ``e2e``: ``Simulator`` fed from the ``.lcp.zst`` with the reader one batch ahead (wall).

Every round runs each (policy, size) once per tree, the trees' order reversed on odd rounds, so
a change in the machine's load hits every tree alike.  Printed per (policy, size): the median
rate of each tree (and its best) and the median of the per-round ratios to the first tree,
which is the figure to quote on this shared machine (single runs spread +-30%).  No thresholds.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))   # NOTE: _common only; ``shadow`` comes from PYTHONPATH

from _common import load_arrays, loop_only, parse_size  # noqa: E402
DEFAULT_TRACE = ROOT / "bench" / "out" / "tiled-10000000.lcp.zst"


def worker(mode: str, trace: str) -> None:
    """Serve ``policy size`` lines from stdin, one rate (M block accesses/s) per line."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from shadow.sim import CacheSpec, Simulator
    try:
        from shadow.sim.core.simulator import prefetched
    except ImportError:  # NOTE: a tree from before shadow/sim's sub-packages
        from shadow.sim.simulator import prefetched
    from shadow.trace import open_trace

    arrays = load_arrays(trace) if mode == "loop" else None
    open_kw = {}
    try:
        # NOTE: decoded as the tree's `shadow simulate` decodes it (trees older than
        # sim_decode_threads use the reader's default)
        try:
            from shadow.sim.core.simulator import sim_decode_threads
        except ImportError:  # NOTE: a tree with shadow/sim/drive.py (or its alias)
            from shadow.sim.drive import sim_decode_threads
        open_kw["decode_threads"] = sim_decode_threads()
    except ImportError:
        pass
    print("ready", flush=True)
    for line in sys.stdin:
        policy, size = line.split()
        if mode == "loop":
            dt, n = loop_only(arrays, policy, int(size), reps=1)
        else:
            sim = Simulator([CacheSpec(policy, int(size))])
            n = 0
            t = time.perf_counter()
            with open_trace(trace, **open_kw) as tr:
                for b in prefetched(tr):
                    sim.feed(b)
                    n += b.n_blocks
            dt = time.perf_counter() - t
            sim.close()
            for r in sim.results():
                assert r.error is None, r.error
        print(n / dt / 1e6, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="*", help="built source trees; the first is the baseline")
    ap.add_argument("--policies", help="comma-separated policy names (required)")
    ap.add_argument("--size", default="8k,128k,512k")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=("loop", "e2e"), default="loop")
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--json", help="also write every rate here")
    ap.add_argument("--worker", choices=("loop", "e2e"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.trace)
        return
    if len(args.trees) < 2:
        ap.error("give at least two trees")
    if not args.policies:
        ap.error("--policies is required")
    if not Path(args.trace).exists():
        ap.error(f"{args.trace}: no such trace (bench/bench_sim.py builds the default one)")
    trees = [str(Path(t).resolve()) for t in args.trees]
    if len(set(trees)) != len(trees):
        ap.error("a tree is given twice (each tree gets one worker and one column)")
    policies = args.policies.split(",")
    sizes = [parse_size(s) for s in args.size.split(",")]
    workers = {}
    for t in trees:
        env = dict(os.environ, PYTHONPATH=t)
        workers[t] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", args.mode,
             "--trace", args.trace],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        if workers[t].stdout.readline().strip() != "ready":
            sys.exit(f"worker for {t} did not start")
    rates: dict[tuple[str, int], dict[str, list[float]]] = {}
    for r in range(args.rounds):
        for size in sizes:
            for policy in policies:
                for t in (trees if r % 2 == 0 else trees[::-1]):
                    w = workers[t]
                    w.stdin.write(f"{policy} {size}\n")
                    w.stdin.flush()
                    rates.setdefault((policy, size), {}).setdefault(t, []).append(
                        float(w.stdout.readline()))
    for w in workers.values():
        w.stdin.close()
        w.wait()
    base = trees[0]
    print(f"{args.mode}: M block accesses/s, median (best) of {args.rounds} rounds; "
          f"last columns: median per-round ratio to {base}")
    for (policy, size), d in rates.items():
        cols = " ".join(f"{statistics.median(d[t]):7.2f} ({max(d[t]):5.1f})" for t in trees)
        ratios = " ".join(f"x{statistics.median([a / b for a, b in zip(d[t], d[base])]):.3f}"
                          for t in trees[1:])
        print(f"{policy:>28s} {size:>8d}  {cols}  {ratios}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {f"{p}@{s}": d for (p, s), d in rates.items()}, indent=1))


if __name__ == "__main__":
    main()
