"""Sweeps: many (trace, policy, capacity, cost model) cells in parallel, resumable, with curves.

* :mod:`shadow.sweep.plan`       the capacity grammar and the cells of a sweep
* :mod:`shadow.sweep.store`      the sweep directory: one file per completed cell, the tidy CSV
* :mod:`shadow.sweep.executors`  serial, process-pool and Ray executors
* :mod:`shadow.sweep.runner`     the driver: resume, run, store, report
* :mod:`shadow.sweep.cell`       the real cell function (one trace through one simulated cache)
* :mod:`shadow.sweep.plot`       PNG curves from the CSV
* :mod:`shadow.sweep.commands`   ``shadow sweep`` and ``shadow plot``
"""

from shadow.sweep.plan import Cell, parse_capacities, plan_cells

__all__ = ["Cell", "parse_capacities", "plan_cells"]
