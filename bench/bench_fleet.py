"""A fleet of replicas against one simulate of the same trace, in the same run.

    python bench/bench_fleet.py [--sessions 3000] [--rounds 5] [--size 8k] [--replicas 4]

Writes ``bench/out/fleet-synth-<sessions>.lcp`` (``shadow synth``: multi-turn sessions, 16-token
blocks; 3,000 sessions are ~12k requests and ~3.3M block accesses), then times, rounds
alternated, CPU time of this process (one thread: ``threads=1``), decode and loading included:

* ``single``: one lru cache of ``--size`` blocks, ``run_trace`` over the trace (``shadow
  simulate``);
* ``round_robin``: ``--replicas`` replicas of that cache behind round_robin (load, route, each
  replica's share served);
* ``kv_aware``: the same behind kv_aware (every request probes every replica's cache, then one
  serves it), and ``kv_aware`` with ``--timing model``.

Prints the medians and each fleet's rate as a ratio of ``single``'s, then the router index's
peak size in blocks for kv_aware (speculative on, ``lag`` 0 and 1 s) at two trace lengths beside
the replicas' capacity: the index is the resident blocks plus the live speculations, so it
follows the caches, not the trace.  No thresholds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import parse_size  # noqa: E402
from shadow.sim.core.simulator import run_trace  # noqa: E402
from shadow.sim.fleet.router import parse_router  # noqa: E402
from shadow.sim.fleet.run import FleetSetup, run_fleet  # noqa: E402
from shadow.sim.core.results import CacheSpec  # noqa: E402
from shadow.sim.timing.service import parse_service  # noqa: E402
from shadow.sim.core.simulator import Simulator  # noqa: E402
from shadow.trace import open_trace  # noqa: E402


def synth(sessions: int) -> Path:
    from click.testing import CliRunner

    from shadow.cli import cli
    path = ROOT / "bench" / "out" / f"fleet-synth-{sessions}.lcp"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        res = CliRunner().invoke(cli, ["synth", "--sessions", str(sessions), str(path)])
        assert res.exit_code == 0, res.output
    return path


def single(path: Path, size: int) -> float:
    c = time.process_time()
    with open_trace(str(path)) as tr:
        sim = Simulator([CacheSpec("lru", size)], trace_name=str(path), threads=1)
        run_trace(sim, tr, str(path))
    return time.process_time() - c


def fleet(path: Path, size: int, replicas: int, router: str, timing: str = "serial"):
    c = time.process_time()
    lookup = "all" if timing == "serial" else "vllm"
    with open_trace(str(path)) as tr:
        setup = FleetSetup(dict(trace_name=str(path), threads=1, lookup=lookup,
                                block_size_tokens=tr.header.block_size_tokens), timing=timing,
                           service=parse_service(None) if timing == "model" else None,
                           path=str(path))
        res = run_fleet([CacheSpec("lru", size)], tr, replicas, parse_router(router), setup)[0]
    return time.process_time() - c, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", default="8k")
    ap.add_argument("--replicas", type=int, default=4)
    args = ap.parse_args()
    size = parse_size(args.size)
    path = synth(args.sessions)
    cases = {"single": lambda: single(path, size),
             "round_robin": lambda: fleet(path, size, args.replicas, "round_robin")[0],
             "kv_aware": lambda: fleet(path, size, args.replicas, "kv_aware")[0],
             "kv_aware model": lambda: fleet(path, size, args.replicas, "kv_aware", "model")[0]}
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            times[name].append(fn())
    base = statistics.median(times["single"])
    print(f"trace {path.name}, lru {size} blocks, {args.replicas} replicas, "
          f"{args.rounds} rounds, CPU seconds (median)")
    for name, t in times.items():
        med = statistics.median(t)
        print(f"  {name:<16s} {med:8.3f} s   rate x{base / med:.2f} of single")
    print("router index peak (blocks), kv_aware, speculative on:")
    for sessions in (args.sessions // 2, args.sessions):
        p = synth(sessions)
        for lag in (0.0, 1.0):
            _, res = fleet(p, size, args.replicas, f"kv_aware:lag={lag}", "model")
            print(f"  {sessions:>6d} sessions  lag {lag:.0f} s  peak {res.index_peak:>8d}   "
                  f"capacity {args.replicas * size:>8d}   requests {sum(res.requests)}")


if __name__ == "__main__":
    main()
