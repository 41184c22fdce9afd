"""Sweep speed-up: N policies x 8 capacities on the bundled conversation trace, 2 workers vs 1 process.

The baseline runs the very same cells one after another in this process (SerialExecutor); the
parallel run uses ``shadow sweep``'s process pool (LocalExecutor) with ``--jobs`` workers.  Both
write a sweep directory and the two CSVs must be identical.  Prints one line per run and the ratio.

    .venv/bin/python bench/bench_sweep.py [--jobs 2] [--policies 14] [--cache-sizes 1k:128k:log8] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shadow.sweep.executors import LocalExecutor, SerialExecutor  # noqa: E402
from shadow.sweep.plan import parse_capacities, plan_cells  # noqa: E402
from shadow.sweep.runner import run_sweep  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"


def _policies(n: int) -> list[str]:
    from shadow.sim.registry import is_built, list_policies

    # NOTE: 'vllm' models the engine's own free queue (live use); the sweep compares the others.
    names = [p for p in list_policies() if p != "vllm" and is_built(p)]
    return names[:n]


def _cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _convert(src: Path, dest: Path) -> None:
    subprocess.run([sys.executable, "-m", "shadow", "convert", str(src), str(dest)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--policies", type=int, default=14)
    ap.add_argument("--cache-sizes", default="1k:128k:log8")
    ap.add_argument("--cost-model", default="uniform")
    ap.add_argument("--trace", default=str(TRACE), help="JSONL (converted first) or lcp trace")
    ap.add_argument("--repeat", type=int, default=2, help="rounds of (serial, pool); best of each reported")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        tmpd = Path(tmp)
        trace = Path(args.trace)
        if ".lcp" not in trace.name:
            lcp = tmpd / (trace.name.split(".")[0] + ".lcp.zst")
            t0 = time.perf_counter()
            _convert(trace, lcp)
            print(f"converted {trace.name} -> {lcp.name} in {time.perf_counter() - t0:.2f} s")
            trace = lcp
        policies = _policies(args.policies)
        caps = parse_capacities(args.cache_sizes)
        cells = plan_cells([str(trace)], [(p, "") for p in policies], caps, [args.cost_model])
        print(f"{len(policies)} policies x {len(caps)} capacities = {len(cells)} cells on {trace.name}; "
              f"policies {','.join(policies)}; capacities {caps}; {os.cpu_count()} CPUs; "
              f"load average {os.getloadavg()[0]:.1f}")

        t_serial: list[float] = []
        t_par: list[float] = []
        failed = []
        same = True
        # NOTE: alternate the two so a change in the machine's load hits both alike.
        for i in range(args.repeat):
            c0, t0 = _cpu(resource.RUSAGE_SELF), time.perf_counter()
            serial = run_sweep(cells, tmpd / f"serial{i}", SerialExecutor(), progress=False)
            t_serial.append(time.perf_counter() - t0)
            cpu_serial = _cpu(resource.RUSAGE_SELF) - c0
            c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
            par = run_sweep(cells, tmpd / f"pool{i}", LocalExecutor(args.jobs), progress=False)
            t_par.append(time.perf_counter() - t0)
            cpu_par = _cpu(resource.RUSAGE_CHILDREN) - c0
            failed += serial.failed + par.failed
            same = same and serial.csv_path.read_bytes() == par.csv_path.read_bytes()
            # NOTE: cores used = CPU seconds / wall seconds: what the run got of the machine.
            print(f"round {i + 1}: serial (1 process, one cell after another) {t_serial[-1]:7.2f} s "
                  f"({cpu_serial / t_serial[-1]:.2f} cores used); local (process pool, {args.jobs} "
                  f"workers) {t_par[-1]:7.2f} s ({cpu_par / t_par[-1]:.2f} cores used, worker CPU "
                  f"{cpu_par:.1f} s vs {cpu_serial:.1f} s); ratio {t_serial[-1] / t_par[-1]:.2f}x; "
                  f"load average {os.getloadavg()[0]:.1f}")
        ts, tp = min(t_serial), min(t_par)
        print(f"best of {args.repeat}: serial {ts:.2f} s, {args.jobs} workers {tp:.2f} s: speed-up "
              f"{ts / tp:.2f}x; CSVs identical: {same}; {len(failed)} failed")
        for o in failed:
            print(f"  failed: {o.cell.label()}: {o.error}")
        if not same or failed:
            sys.exit(1)


if __name__ == "__main__":
    main()
