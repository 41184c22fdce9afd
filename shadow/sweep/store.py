"""The on-disk layout of a sweep directory, and the tidy CSV rebuilt from it.

::

    DIR/cells/<cell file name>   one per completed cell: a '# cell <key json>' line, then its RESULT line(s)
    DIR/results.csv              one row per RESULT line of every cell in DIR/cells, rebuilt after each sweep

Invariant: a file named ``*.result`` in ``DIR/cells`` exists only for a cell that ran to completion.
Cell files are written to a dot-prefixed temporary name in the same directory and renamed, so an
interrupted sweep leaves either the whole cell or no cell (and at most a stray temporary, which
readers ignore and the next sweep removes).
"""

from __future__ import annotations

import csv
import io
import logging
import os
import re
from pathlib import Path

from shadow.atomic import TMP_PREFIX, atomic_write_text, check_writable
from shadow.errors import ShadowError
from shadow.sweep.plan import CELL_SUFFIX, Cell

logger = logging.getLogger(__name__)

CELLS_DIR = "cells"
CSV_NAME = "results.csv"
_HEADER = "# cell "
_TMP_PREFIX = TMP_PREFIX

#: CSV columns taken from the cell itself, first in every row.  ``trace`` is the trace's file
#: name (as in RESULT lines), ``trace_path`` the absolute path the cell read.
CELL_COLUMNS = ["trace", "algo", "params", "cache_size", "cost_model", "pin", "replay_order",
                "block_id", "trace_path"]

# NOTE: split before every ' key=' so a value may hold spaces (a trace file name), but not ' word='.
_FIELD_SPLIT = re.compile(r"\s+(?=[A-Za-z_][A-Za-z0-9_]*=)")


def parse_result_line(line: str) -> dict[str, str]:
    """``RESULT k=v k=v ...`` -> ``{k: v}`` in line order."""
    line = line.strip()
    if not line.startswith("RESULT "):
        raise ValueError(f"not a RESULT line: {line[:60]!r}")
    out: dict[str, str] = {}
    for part in _FIELD_SPLIT.split(line[len("RESULT "):].strip()):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"RESULT field without '=': {part!r}")
        out[key] = value
    return out


class SweepDir:
    """A sweep output directory: which cells are done, storing a cell, the tidy CSV."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / CELLS_DIR
        self.csv_path = self.root / CSV_NAME

    def prepare(self) -> None:
        """Create the directory, check that cells and the CSV can be written there (an
        :class:`~shadow.errors.OutputError` before any cell runs), drop temporaries left by an
        interrupted sweep."""
        try:
            self.cells_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ShadowError(f"{self.root}: cannot create the sweep directory: {exc.strerror}") from None
        check_writable(self.cells_dir / f"cell{CELL_SUFFIX}")
        check_writable(self.csv_path)
        for p in self.cells_dir.glob(_TMP_PREFIX + "*"):
            try:
                p.unlink()
            except OSError:
                pass

    def cell_path(self, cell: Cell) -> Path:
        return self.cells_dir / cell.file_name

    def is_done(self, cell: Cell) -> bool:
        return self.cell_path(cell).is_file()

    def write_cell(self, cell: Cell, result_text: str) -> Path:
        """Store a completed cell: its key, then its RESULT lines (other lines are dropped)."""
        lines = [ln.strip() for ln in result_text.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise ShadowError(f"cell {cell.label()}: the simulator printed no RESULT line")
        path = self.cell_path(cell)
        atomic_write_text(path, _HEADER + cell.key() + "\n" + "\n".join(lines) + "\n")
        return path

    def cell_files(self) -> list[Path]:
        if not self.cells_dir.is_dir():
            return []
        return sorted(p for p in self.cells_dir.iterdir()
                      if p.name.endswith(CELL_SUFFIX) and not p.name.startswith("."))

    def read_cell(self, path: Path) -> tuple[Cell, list[dict[str, str]]]:
        """Parse one cell file into its cell and its RESULT rows."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ShadowError(f"{path}: cannot read: {exc.strerror}") from None
        lines = text.splitlines()
        if not lines or not lines[0].startswith(_HEADER):
            raise ShadowError(f"{path}:1: not a sweep cell file (expected '{_HEADER.strip()} {{...}}')")
        try:
            cell = Cell.from_key(lines[0][len(_HEADER):])
        except (ValueError, TypeError) as exc:
            raise ShadowError(f"{path}:1: bad cell key: {exc}") from None
        rows = []
        for lineno, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                rows.append(parse_result_line(line))
            except ValueError as exc:
                raise ShadowError(f"{path}:{lineno}: {exc}") from None
        return cell, rows

    def rows(self) -> tuple[list[str], list[dict[str, str]]]:
        """All cells' rows as (columns, rows): cell columns first, then RESULT fields in first-seen order."""
        columns = list(CELL_COLUMNS)
        out: list[dict[str, str]] = []
        for path in self.cell_files():
            cell, results = self.read_cell(path)
            for res in results:
                row = {
                    "trace": res.get("trace", cell.trace_name),
                    "algo": cell.algo,
                    "params": cell.params,
                    "cache_size": str(cell.capacity),
                    "cost_model": cell.cost_model,
                    "pin": "on" if cell.pin else "off",
                    "replay_order": cell.replay_order,
                    "block_id": cell.block_id,
                    "trace_path": cell.trace,
                }
                for k, v in res.items():
                    if k in ("algo", "cache_size", "cost_model", "block_id", "trace", "pin",
                             "replay_order", "params"):
                        continue  # NOTE: the cell's own values are canonical; RESULT spells them its way
                    if k not in row:
                        row[k] = v
                        if k not in columns:
                            columns.append(k)
                out.append(row)
        out.sort(key=lambda r: (r["trace"], r["trace_path"], r["cost_model"], r["pin"],
                                r["replay_order"], r["block_id"], r["algo"], r["params"],
                                int(r["cache_size"])))
        return columns, out

    def write_csv(self) -> Path:
        """Rebuild ``DIR/results.csv`` from every cell file in ``DIR/cells``."""
        columns, rows = self.rows()
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, restval="", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        atomic_write_text(self.csv_path, buf.getvalue())
        logger.info("wrote %s (%d rows)", self.csv_path, len(rows))
        return self.csv_path


def read_csv(path: str | os.PathLike) -> list[dict[str, str]]:
    """Read a sweep CSV (``DIR/results.csv``) into rows; a clear error when it is not one."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShadowError(f"{p}: no such file (run `shadow sweep --out DIR` first)") from None
    except OSError as exc:
        raise ShadowError(f"{p}: cannot read: {exc.strerror}") from None
    reader = csv.DictReader(io.StringIO(text))
    missing = {"trace", "algo", "cache_size", "cost_model"} - set(reader.fieldnames or [])
    if missing:
        raise ShadowError(f"{p}:1: not a sweep CSV: missing columns {sorted(missing)}")
    return list(reader)
