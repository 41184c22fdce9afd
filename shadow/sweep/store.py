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
import math
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
                "block_id", "timing", "category", "router", "replicas", "trace_path"]

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
        except FileExistsError:
            # NOTE: mkdir says "File exists" about whichever of DIR and DIR/cells is not a
            # directory; name that one
            bad = self.root if not self.root.is_dir() else self.cells_dir
            raise ShadowError(f"{bad}: not a directory (a sweep directory holds {CELLS_DIR}/,"
                              f" a directory of cell files)") from None
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
        """Parse one cell file into its cell and its RESULT rows.

        Damage (not UTF-8, a bad key or field, a key that is not the one its file name was made
        from, a RESULT number out of range) raises a :class:`ShadowError` naming the file and
        line; deleting the file makes the next sweep run that cell again.
        """
        again = "; delete the file to run its cell again"
        text = _read_text(path, "cell file", hint=again)
        lines = text.splitlines()
        if not lines or not lines[0].startswith(_HEADER):
            raise ShadowError(f"{path}:1: not a sweep cell file (expected"
                              f" '{_HEADER.strip()} {{...}}'){again}")
        try:
            cell = Cell.from_key(lines[0][len(_HEADER):])
        except (ValueError, TypeError) as exc:
            raise ShadowError(f"{path}:1: bad cell key: {exc}{again}") from None
        bad = _bad_cell_field(cell)
        if bad:
            raise ShadowError(f"{path}:1: bad cell key: {bad}{again}")
        rows = []
        for lineno, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                row = parse_result_line(line)
            except ValueError as exc:
                raise ShadowError(f"{path}:{lineno}: {exc}{again}") from None
            bad = bad_number(row)
            if bad:
                raise ShadowError(f"{path}:{lineno}: {bad}{again}")
            rows.append(row)
        if path.name != cell.file_name:
            raise ShadowError(f"{path}:1: the cell key is not the one this file name was made from"
                              f" ({cell.file_name}){again}")
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
                    "timing": cell.timing,
                    "category": cell.category,
                    "router": cell.router,
                    "replicas": str(cell.replicas),
                    "trace_path": cell.trace,
                }
                for k, v in res.items():
                    if k in ("algo", "cache_size", "cost_model", "block_id", "trace", "pin",
                             "replay_order", "params", "timing", "router", "replicas"):
                        continue  # NOTE: the cell's own values are canonical; RESULT spells them its way
                    if k not in row:
                        row[k] = v
                        if k not in columns:
                            columns.append(k)
                out.append(row)
        out.sort(key=lambda r: (r["trace"], r["trace_path"], r["cost_model"], r["pin"],
                                r["replay_order"], r["block_id"], r["timing"], r["router"],
                                int(r["replicas"]), r["algo"], r["params"],
                                int(r["cache_size"]), r.get("tier", ""), r.get("tier2", "")))
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
    return [row for _, row in read_csv_lines(path)]


def read_csv_lines(path: str | os.PathLike) -> list[tuple[int, dict[str, str]]]:
    """Read a sweep CSV as ``(line number, row)`` pairs.

    Invariant: every row returned has exactly the header's columns, all strings (a row with
    more or fewer fields than the header raises, naming its line).  A UTF-8 byte-order mark is
    allowed (a CSV saved by a spreadsheet).
    """
    p = Path(path)
    if not p.exists():
        raise ShadowError(f"{p}: no such file (run `shadow sweep --out DIR` first)")
    text = _read_text(p, "sweep CSV", encoding="utf-8-sig")
    reader = csv.DictReader(io.StringIO(text))
    try:
        fieldnames = reader.fieldnames or []
        missing = {"trace", "algo", "cache_size", "cost_model"} - set(fieldnames)
        if missing:
            raise ShadowError(f"{p}:1: not a sweep CSV: missing columns {sorted(missing)}")
        out = []
        for row in reader:
            if None in row or None in row.values():
                n = len(row.get(None) or []) + sum(v is not None for k, v in row.items()
                                                   if k is not None)
                raise ShadowError(f"{p}:{reader.line_num}: {n} fields, the header has"
                                  f" {len(fieldnames)}")
            out.append((reader.line_num, row))
    except csv.Error as exc:
        # NOTE: DictReader.line_num is set after a row is read; its reader's counts this one too
        raise ShadowError(f"{p}:{reader.reader.line_num}: not a CSV row ({exc})") from None
    return out


def _read_text(path: Path, what: str, *, encoding: str = "utf-8", hint: str = "") -> str:
    """The text of ``path``; a ShadowError naming the file (and the line of a non-UTF-8 byte),
    ``hint`` appended to it."""
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise ShadowError(f"{path}: is a directory, not a {what}{hint}") from None
    except OSError as exc:
        raise ShadowError(f"{path}: cannot read: {exc.strerror}{hint}") from None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ShadowError(f"{path}:{line}: not UTF-8 text (byte offset {exc.start}), so not a"
                          f" {what}{hint}") from None


#: RESULT / CSV columns that hold a ratio (a number in [0, 1]) or a hole figure (>= 0).
RATIO_FIELDS = ("block_hit_ratio", "compute_saving_ratio", "prefix_hit_ratio",
                "prefix_compute_saving_ratio", "tier_hit_ratio", "tier_compute_saving_ratio",
                "tier2_hit_ratio", "tier2_compute_saving_ratio", "replica_hit_min",
                "replica_hit_max")
HOLE_FIGURES = ("holes_per_req", "n_holes", "mean_hole_len", "max_hole_len")


def bad_number(row: dict[str, str]) -> str | None:
    """What is wrong with ``row``'s ratio and hole columns, or None.

    An empty value is missing, not wrong (a row of a simulator that does not report it).
    """
    for key in RATIO_FIELDS + HOLE_FIGURES:
        v = row.get(key)
        if not v:
            continue
        try:
            x = float(v)
        except ValueError:
            return f"{key} {v!r} is not a number"
        if not math.isfinite(x) or x < 0 or (key in RATIO_FIELDS and x > 1):
            return f"{key} {v!r} is out of range ({'[0, 1]' if key in RATIO_FIELDS else '>= 0'})"
    return None


def _bad_cell_field(cell: Cell) -> str | None:
    """What is wrong with the types or values of a cell read back from its key, or None."""
    for name in ("trace", "algo", "cost_model", "params", "replay_order", "block_id", "timing",
                 "tier", "kv_bytes", "category", "router"):
        if type(getattr(cell, name)) is not str:
            return f"{name} is {getattr(cell, name)!r}; expected a string"
    for name in ("pin", "allow_truncated"):
        if type(getattr(cell, name)) is not bool:
            return f"{name} is {getattr(cell, name)!r}; expected true or false"
    for name in ("capacity", "replicas"):
        value = getattr(cell, name)
        if type(value) is not int or value < 1:
            return f"{name} is {value!r}; expected a positive integer"
    if not cell.trace or not cell.algo:
        return "empty trace or algo"
    return None
