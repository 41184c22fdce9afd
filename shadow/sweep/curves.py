"""Sweep cells from the one-pass curve (``shadow sweep --mrc``), and the curves plot overlays.

The lru and vllm cells of a sweep that run serially without a tier, a router or parameters are
points of one exact miss-ratio curve per (trace, block-id mode, truncation, cost model, recency
order) (docs/mrc.md): one pass over the trace gives every such cell from the largest request's
room up.  :func:`take_from_curves` runs that pass once per group, stores each cell it answers (its
RESULT line says ``source=mrc``: the curve's ratios and counts, no eviction or hole figures) and
the curve itself under ``DIR/curves/``, and returns the cells it left for the executor (smaller
than the largest request, or of a group whose pass failed: they then fail, or run, as cells).

``DIR/curves/<name>.csv`` is ``shadow mrc -o``'s CSV; ``<name>.json`` beside it says what it is
(:class:`CurveInfo`).  Both are written atomically; plot reads them (:func:`read_curves`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from shadow.atomic import atomic_write_text
from shadow.errors import ShadowError
from shadow.sweep.plan import Cell
from shadow.sweep.store import SweepDir, _read_text, bad_number

logger = logging.getLogger(__name__)

CURVES_DIR = "curves"
#: The policies a curve answers (``shadow.sim.mrc.offline.CURVE_ALGOS``, kept importable without
#: the extensions: a test checks they agree).
CURVE_ALGOS = ("lru", "vllm")


@dataclass(frozen=True)
class CurveInfo:
    """What one stored curve is: the inputs it depends on and where it is exact."""

    trace: str              # file name, as the cells' RESULT lines give it
    trace_path: str
    block_id: str
    allow_truncated: bool
    cost_model: str
    order: str              # the recency order: deepest-first (lru so, and vllm) or prefix-order
    exact_from: int = 0

    def group(self) -> tuple:
        return (self.trace_path, self.block_id, self.allow_truncated, self.cost_model, self.order)

    @property
    def name(self) -> str:
        digest = hashlib.sha1(json.dumps(self.group()).encode()).hexdigest()[:12]
        return f"{Path(self.trace).name}.{self.order}.{digest}"


def eligible(cell: Cell) -> bool:
    """Whether the curve answers ``cell`` (above the largest request's room)."""
    return (cell.algo in CURVE_ALGOS and not cell.params and cell.timing == "serial"
            and not cell.tier and not cell.router)


def curve_info(cell: Cell) -> CurveInfo:
    """The curve a cell is a point of: vllm ranks by release, tail first (deepest-first)."""
    order = "deepest-first" if cell.algo == "vllm" else cell.replay_order
    return CurveInfo(cell.trace_name, cell.trace, cell.block_id, cell.allow_truncated,
                     cell.cost_model, order)


def result_line(cell: Cell, curve) -> str:
    """The RESULT line of ``cell`` from ``curve`` (a :class:`shadow.sim.mrc.curve.Curve`): the
    keys the curve knows, in the serve loop's order, then ``source=mrc``."""
    from shadow.sim.mrc.curve import METRICS

    r = curve.ratios(cell.capacity)
    parts = [f"trace={cell.trace_name}", f"algo={cell.algo}", f"cache_size={cell.capacity}",
             f"cost_model={cell.cost_model}", f"block_id={cell.block_id}",
             f"n_req={curve.n_req}", "n_req_skipped=0", f"n_blocks={curve.n_blocks}"]
    parts += [f"{k}={r[k]:.6f}" for k in METRICS]
    parts += [f"pin={'on' if cell.pin else 'off'}", f"replay_order={cell.replay_order}",
              "source=mrc"]
    return "RESULT " + " ".join(parts)


def take_from_curves(cells: Sequence[Cell], store: SweepDir) -> list[Cell]:
    """Store every cell of ``cells`` a curve answers (one pass per group); the others, in order."""
    from shadow.sim.mrc.curve import CSV_COLUMNS
    from shadow.sim.mrc.offline import curve_of_trace
    from shadow.sim.run import RunSpec

    groups: dict[CurveInfo, list[Cell]] = {}
    for c in cells:
        if eligible(c):
            groups.setdefault(curve_info(c), []).append(c)
    answered: set[Cell] = set()
    for info, members in groups.items():
        try:
            # NOTE: the members' runs differ in size and pins only, which the curve has all of
            spec = RunSpec.from_cell(members[0])
            with spec.open_trace(info.trace_path) as tr:
                curve = curve_of_trace(tr, info.trace_path, spec)
        except (ShadowError, OSError) as exc:
            # NOTE: its cells run as cells, and fail (or not) with their own one line each
            logger.info("curve %s: %s; its cells run one by one", info.name, exc)
            continue
        info = CurveInfo(**{**asdict(info), "exact_from": curve.exact_from})
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        w.writerows(curve.csv_rows())
        d = store.root / CURVES_DIR
        d.mkdir(exist_ok=True)
        atomic_write_text(d / f"{info.name}.csv", buf.getvalue())
        atomic_write_text(d / f"{info.name}.json", json.dumps(asdict(info), indent=1) + "\n")
        for c in members:
            if c.capacity >= curve.exact_from:
                store.write_cell(c, result_line(c, curve))
                answered.add(c)
        logger.info("curve %s %s %s: %d of %d cells from one pass (exact from %d blocks)",
                    info.trace, info.cost_model, info.order, sum(c in answered for c in members),
                    len(members), curve.exact_from)
    return [c for c in cells if c not in answered]


def read_curves(root: Path) -> list[tuple[CurveInfo, list[tuple[int, dict[str, float]]]]]:
    """Every curve stored under ``root/curves``: its info and its points (size, ratios).  A
    damaged file is a one-line :class:`ShadowError` naming it (and the line)."""
    d = root / CURVES_DIR
    out = []
    if not d.is_dir():
        return out
    for meta in sorted(d.glob("*.json")):
        try:
            data = json.loads(_read_text(meta, "curve description"))
            info = CurveInfo(**data)
        except (ValueError, TypeError) as exc:
            raise ShadowError(f"{meta}: not a curve description ({exc})") from None
        path = meta.with_suffix(".csv")
        rows = list(csv.reader(io.StringIO(_read_text(path, "curve CSV"))))
        if not rows or tuple(rows[0][:1]) != ("cache_size",):
            raise ShadowError(f"{path}:1: not a curve CSV (header cache_size,...)")
        header = rows[0]
        points = []
        last = 0
        for line, row in enumerate(rows[1:], start=2):
            if len(row) != len(header):
                raise ShadowError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            rec = dict(zip(header, row))
            size = rec["cache_size"]
            bad = bad_number(rec) or (None if size.isascii() and size.isdigit() and int(size) > last
                                      else f"cache_size {size!r} is not a size above the last")
            if bad:
                raise ShadowError(f"{path}:{line}: {bad}")
            last = int(size)
            points.append((last, {k: float(v) for k, v in rec.items() if k != "cache_size"}))
        out.append((info, points))
    return out
