"""Run every benchmark under bench/ in turn (``make bench``); each prints its own figures.

The figures in docs/performance.md come from these scripts; rerun them on a quiet machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ["bench_trace.py", "bench_sim.py", "bench_sweep.py", "bench_connector.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        print(f"== {name}", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / name)])
        if rc:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
