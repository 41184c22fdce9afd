"""The sweep driver: skip the cells already done, run the rest on an executor, store, rebuild the CSV.

Only this process writes to the sweep directory: workers return their RESULT text and the driver
stores each cell as it completes (see :mod:`shadow.sweep.store`), so a stopped sweep keeps every
cell that finished and the next run of the same command resumes with the missing ones.

A sweep directory that cannot be written (checked before any worker starts; a full disk found
when a cell is stored) stops the sweep with an :class:`~shadow.errors.OutputError`: every later
cell would fail the same way.  The CSV is rebuilt on every way out; when the sweep is already
stopping for another reason, a failure to rebuild it is not raised over that reason.
"""

from __future__ import annotations

import logging
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import click

from shadow.errors import OutputError
from shadow.sweep.executors import CellFn, Executor, Outcome, is_tty, one_line_error
from shadow.sweep.plan import Cell
from shadow.sweep.store import SweepDir

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What a sweep did: ``n_cells`` planned = ``n_skipped`` (found in DIR) + ``n_run`` (+ failures)."""

    n_cells: int
    n_skipped: int
    n_run: int = 0
    n_curve: int = 0       # cells taken from a one-pass curve (``--mrc``)
    failed: list[Outcome] = field(default_factory=list)
    csv_path: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        cells = "cell" if self.n_cells == 1 else "cells"
        curve = f"{self.n_curve} from curves, " if self.n_curve else ""
        return (f"{self.n_cells} {cells}: {self.n_skipped} already done, {curve}{self.n_run} run, "
                f"{len(self.failed)} failed")


def run_sweep(cells: Sequence[Cell], out_dir: str | Path, executor: Executor, fn: CellFn | None = None,
              *, progress: bool | None = None, echo=None, curves: bool = False) -> SweepReport:
    """Run the cells of ``cells`` that ``out_dir`` does not hold yet; rebuild ``out_dir/results.csv``.

    ``curves``: first take the lru and vllm cells a one-pass curve answers from it, one pass per
    trace and setting in this process (:mod:`shadow.sweep.curves`); the executor runs the rest.

    ``fn`` is the cell function (default :func:`shadow.sweep.cell.run_cell`).  ``progress``: draw a
    progress bar over cells on stderr (default: when stderr is a terminal).  ``echo(line)`` reports
    each failed cell as one line (default: to stderr).  Failures do not raise; see the report.
    """
    if fn is None:
        from shadow.sweep.cell import run_cell

        fn = run_cell
    if echo is None:
        def echo(line: str) -> None:
            click.echo(line, err=True)
    store = SweepDir(out_dir)
    start = getattr(executor, "start", None)
    if start is not None and cells:
        start()                   # NOTE: before the directory exists: a refused start leaves nothing
    store.prepare()
    todo = [c for c in cells if not store.is_done(c)]
    report = SweepReport(n_cells=len(cells), n_skipped=len(cells) - len(todo))
    if curves:
        from shadow.sweep.curves import take_from_curves

        try:
            rest = take_from_curves(todo, store)
        except BaseException:
            _rebuild_csv(store)
            raise
        report.n_curve = len(todo) - len(rest)
        todo = rest
    logger.info("sweep: %d cells, %d already in %s, %d to run", len(cells), report.n_skipped,
                out_dir, len(todo))
    if progress is None:
        progress = is_tty(sys.stderr)
    bar_ctx = (click.progressbar(length=len(todo), label="cells", file=sys.stderr, show_pos=True,
                                 show_eta=True) if progress and todo else nullcontext(None))
    try:
        with bar_ctx as bar:
            for outcome in executor.run(fn, todo):
                if outcome.ok:
                    try:
                        store.write_cell(outcome.cell, outcome.text or "")
                        report.n_run += 1
                    except OutputError:
                        raise             # the directory, not the cell: stop the sweep
                    except Exception as exc:  # a cell that printed no RESULT line
                        outcome = Outcome(outcome.cell, None, one_line_error(exc))
                if not outcome.ok:
                    report.failed.append(outcome)
                    echo(f"cell failed: {outcome.cell.label()}: {outcome.error}")
                if bar is not None:
                    bar.update(1)
    except BaseException:
        # NOTE: also on Ctrl-C: the CSV then shows every cell that completed so far.
        report.csv_path = _rebuild_csv(store)
        raise
    report.csv_path = store.write_csv()
    return report


def _rebuild_csv(store: SweepDir) -> Path | None:
    """Rebuild the CSV on the way out of a sweep that stops; a failure is not raised over the
    reason it stops (a full disk fails this too: the user sees that reason, in one line)."""
    try:
        return store.write_csv()
    except Exception as exc:
        logger.debug("results.csv not rebuilt: %s", exc)
        return None
