"""The real cell function: stream one trace through one simulated cache, return its RESULT line.

Memory is the cache plus one batch of the trace (constant in the trace's length for lcp input), so
a machine can run as many cells at once as it has cores.  Imported in the worker (a pool process or
a Ray task), never needed by the driver.
"""

from __future__ import annotations

import os

from shadow.errors import ShadowError
from shadow.sweep.plan import Cell


def run_cell(cell: Cell) -> str:
    """Simulate ``cell`` (:meth:`shadow.sim.run.RunSpec.from_cell`, as ``shadow simulate`` runs
    the same options) and return the simulator's RESULT line(s) for it."""
    # NOTE: imported here so the driver (and `shadow sweep --help`) never loads the extensions.
    from shadow.sim.run import RunSpec, run

    if not os.path.isfile(cell.trace):
        raise ShadowError(f"{cell.trace}: no such trace file (with --executor ray the path must "
                          f"exist on every node)")
    spec = RunSpec.from_cell(cell)
    with spec.open_trace(cell.trace) as tr:
        res = run(spec, tr)
    for r in res.caches:
        if r.error:
            # NOTE: a run that failed its verify step has untrustworthy numbers: no cell file.
            raise ShadowError(f"{cell.trace_name}: {r.spec.label} cache {r.spec.capacity}: {r.error}")
    return "\n".join(res.lines())
