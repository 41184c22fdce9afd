"""A tiny stand-in cell function for the sweep tests (not the simulator).

It reads its trace file (so a missing trace fails like the real one), derives a deterministic
RESULT line from the cell, and leaves a marker file per call in ``$SHADOW_TEST_CALLS`` so a test can
see which cells actually ran, whichever process ran them.
"""

from __future__ import annotations

import os

from shadow.sweep.plan import Cell


def standin_cell(cell: Cell) -> str:
    with open(cell.trace, "rb") as f:
        n_req = sum(1 for _ in f)
    if b"crash" in open(cell.trace, "rb").read() and cell.capacity == 2048:
        os._exit(3)  # a worker process dying in native code
    calls = os.environ.get("SHADOW_TEST_CALLS")
    if calls:
        with open(os.path.join(calls, f"{cell.digest}.{os.getpid()}"), "w") as f:
            f.write(cell.key())
    hit = round(cell.capacity / (cell.capacity + 1000.0 * (1 + len(cell.algo) % 3)), 6)
    prefix = round(hit * 0.9, 6)
    holes = round(3.0 * 1024 / cell.capacity, 4)
    return (f"{cell.algo} summary line (not stored)\n"
            f"RESULT trace={cell.trace_name} algo={cell.algo} cache_size={cell.capacity} "
            f"cost_model={cell.cost_model} n_req={n_req} block_hit_ratio={hit} "
            f"compute_saving_ratio={round(hit * 0.8, 6)} prefix_hit_ratio={prefix} holes_per_req={holes}\n")
