"""A measured prefill profile (``--cost-model profile:FILE``): seconds per request from a table.

FILE is JSON lines; a line with ``cached`` (tokens already in the KV cache, an integer >= 0),
``new`` (tokens computed, an integer >= 1) and ``s`` (the prefill's seconds, finite and > 0) is a
point; every other key is ignored (``min_s``, ``max_s``, ``model``, ...), and a line with none of
the three is skipped (an ``env`` or ``params`` line).  A file may hold several engines or models
told apart by a ``model`` key (``../shared/reference/h200_prefill.jsonl``, bundled as
``shadow/data/h200_prefill.jsonl``, holds ``llama3_8b`` and ``qwen25_7b``):
``profile:FILE,model=NAME`` keeps that model's points; a file with points of several models and
no ``model=`` is refused, naming them.

The prefill time ``t(c, n)`` of a request with ``c`` cached and ``n`` new tokens:

* **measured points** (``c``, ``n`` in the table): the table's ``s``, exactly;
* **within a measured cached row** (``c`` one of the table's cached values): piecewise linear in
  ``n`` between that row's points;
* **between rows** ``c_i < c < c_j`` (adjacent measured cached values): linear in ``c`` between
  the two rows' values at ``n``;
* **past the edge**: the fitted form ``F(c, n) = a + b*n + d*n*(c + n/2)`` (replay's three-term
  prefill model, :mod:`replay.prefill`, fitted here to the table's points by least squares on the
  relative error with ``a, b, d >= 0``) continues the table from its edge value.  In a row,
  beyond its largest ``n_hi``: ``t(c, n_hi) + u*(g + d*u/2)``, ``u = n - n_hi``, with ``g`` the
  row's last measured slope (seconds per token between its two largest ``n``, never below 0; a
  one-point row: ``F``'s slope ``b + d*(c + n_hi)``) and ``F``'s curvature ``d``.  Below its
  smallest ``n_lo``: ``t(c, n_lo)``, held.  Beyond the largest cached row ``c_R``:
  ``t(c_R, n) + F(c, n) - F(c_R, n)`` (``= d*n*(c - c_R)``).  Continuous at every edge.
  NOTE: the row's own slope, not ``F``'s, past ``n_hi``: fitted on relative error, ``F`` follows
  the small points and over-states the slope at 32k tokens by 50% on the bundled H200 table
  (llama3_8b at 40,960 new tokens: ``F``'s slope +16% over a later measurement, the row's slope
  +2%).  Held below ``n_lo``: a GPU forward of a few hundred tokens or fewer takes its fixed
  cost and reads the cached keys (in ``c``, not ``n``): measured again, 64 to 128 new tokens
  took 3-33% more than the row's 256-token point on llama3_8b, where ``F``'s step predicted
  12-49% less (bench/profile_table.py); and a step that depended on ``c`` could order the rows
  differently below ``n_lo`` than at it.  (There is nothing below the
  smallest row: a profile must hold points at ``cached`` 0, the prefill without a hit that every
  saving is measured against.)

Monotone: each piece is linear (or ``F``'s, whose partial derivatives ``b + d*(c + n)`` and
``d*n`` are >= 0, or held), so between measured points ``t`` never leaves the range of its
neighbours: it is non-decreasing in ``n`` and in ``c`` wherever the measured points are, and passes
through every measured point.  Where the measured points themselves fall (within the tolerance
below in ``n``; in ``c``, which is not checked) ``t`` follows them.  In the bundled H200 table
(``bench/profile_table.py`` lists where, on a 64-token grid): llama3_8b's ``t`` falls with new
tokens at cached 0 to 384, new 529 to 1,025 (36.9 ms at (0, 512), 31.2 ms at (0, 1024)), and with
cached tokens between its rows at 0 and 1,024 for new up to 865; qwen25_7b's with cached tokens
between the rows at 0 and 1,024 (new up to 641) and at 1,024 and 4,096 (new up to 369): with
``cached > 0`` transformers hands SDPA an explicit mask, another kernel (h200_prefill.md).

Refused (:class:`~shadow.errors.ShadowError`, one line naming the file and line): a line that is
not a JSON object, one with some but not all of ``cached``/``new``/``s``, a value of the wrong
kind or range (negative or non-finite seconds, ``new`` 0), two points at the same ``(c, n)`` with
different seconds, fewer than two points, no point at ``cached`` 0, and a row that is not
monotone in new tokens: a point more than :data:`MONOTONE_TOLERANCE` of its row's fastest point
below a point of the same row with fewer new tokens, beyond the two points' spread of repeats
(``min_s``..``max_s``, where the file gives them; :func:`monotone_violation`).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shadow.errors import ShadowError

#: How far (a share of the row's fastest point, its fixed cost) a point may lie below a point of
#: the same cached row with fewer new tokens before the row counts as not monotone (when their
#: repeats do not overlap either: :func:`monotone_violation`).
#: NOTE: a quarter: in h200_prefill.jsonl the largest such decrease is 5.7 ms (llama3_8b,
#: cached 0: 36.9 ms at 512 new tokens, 31.2 ms at 1,024), 0.18 of that row's fastest point
#: (31.2 ms), and the three repeats of one point spread by up to 0.32 of their median (qwen25_7b,
#: cached 1,024, new 256: 21.0 to 27.9 ms): the noise of a forward's fixed cost.  A row written in
#: the wrong order, or with swapped columns, falls by far more than that.  Noise that grows with
#: the time (a shared CPU: two medians of 3,104 and 3,200 new tokens 5.5 ms apart, 5% of them)
#: shows in the repeats' spread, which must not overlap for a fall to count.
MONOTONE_TOLERANCE = 0.25

#: The parameters ``profile:FILE`` takes after the file name.
PROFILE_PARAMS = ("model",)


@dataclass(frozen=True)
class ProfileRow:
    """The measured points of one cached value: ``new`` ascending, ``s`` beside it."""

    cached: int
    new: np.ndarray
    s: np.ndarray


@dataclass(frozen=True, eq=False)
class Profile:
    """A loaded, checked profile: its rows (cached ascending) and the fitted form's ``coef``
    ``(a, b, d)`` (seconds, seconds per token, seconds per token squared)."""

    path: str
    model: str | None
    rows: tuple[ProfileRow, ...]
    coef: tuple[float, float, float]

    @property
    def n_points(self) -> int:
        return sum(len(r.new) for r in self.rows)

    def points(self) -> dict[tuple[int, int], float]:
        """Every measured point, ``(cached, new) -> s``."""
        return {(r.cached, int(n)): float(s) for r in self.rows for n, s in zip(r.new, r.s)}

    def fitted(self, cached, new) -> np.ndarray:
        """The fitted form ``F(c, n) = a + b*n + d*n*(c + n/2)``, seconds."""
        a, b, d = self.coef
        c = np.asarray(cached, dtype=np.float64)
        n = np.asarray(new, dtype=np.float64)
        return a + b * n + d * n * (c + n / 2.0)

    def step_c(self, c0, c1, new) -> np.ndarray:
        """``F(c1, n) - F(c0, n)`` = ``d*n*(c1 - c0)``: 0 at ``c1 == c0``."""
        d = self.coef[2]
        return d * np.asarray(new, dtype=np.float64) * (np.asarray(c1, dtype=np.float64) - c0)

    def edge_slope(self, r: ProfileRow) -> float:
        """Seconds per token at the row's largest ``n``: its last measured segment's slope
        (never below 0), or with one point the fitted form's ``b + d*(c + n)`` there."""
        if len(r.new) >= 2:
            return max(float((r.s[-1] - r.s[-2]) / (r.new[-1] - r.new[-2])), 0.0)
        _a, b, d = self.coef
        return b + d * (r.cached + float(r.new[-1]))

    def _row(self, r: ProfileRow, n: np.ndarray) -> np.ndarray:
        """``t(r.cached, n)``: the row's points, linear between them, held below its smallest
        ``n`` (``np.interp`` holds the end values), past its largest as :meth:`edge_slope` and
        ``F``'s curvature say."""
        hi = r.new[-1]
        t = np.interp(n, r.new, r.s)
        above = n > hi
        if above.any():
            u = n[above] - hi
            t[above] = r.s[-1] + u * (self.edge_slope(r) + self.coef[2] * u / 2.0)
        return t

    def seconds(self, cached, new) -> np.ndarray:
        """``t(c, n)`` for arrays (or scalars) of cached and new tokens (module docstring)."""
        c = np.atleast_1d(np.asarray(cached, dtype=np.float64))
        n = np.atleast_1d(np.asarray(new, dtype=np.float64))
        c, n = np.broadcast_arrays(c, n)
        rc = np.array([r.cached for r in self.rows], dtype=np.float64)
        out = np.empty(c.shape, dtype=np.float64)
        # NOTE: j = the last row at or below c (the first row is at 0); exact at a row's own c
        j = np.maximum(np.searchsorted(rc, c, side="right") - 1, 0)
        R = len(self.rows)
        for k in range(R):
            m = j == k
            if not m.any():
                continue
            cm, nm = c[m], n[m]
            if k == R - 1:
                edge = self.rows[k]
                out[m] = self._row(edge, nm) + self.step_c(edge.cached, cm, nm)
                continue
            lo, hi = self.rows[k], self.rows[k + 1]
            w = (cm - lo.cached) / (hi.cached - lo.cached)
            out[m] = (1.0 - w) * self._row(lo, nm) + w * self._row(hi, nm)
        return out.reshape(np.shape(np.broadcast(np.asarray(cached), np.asarray(new))))

    def block_costs(self, n_blocks: int, block_tokens: int) -> np.ndarray:
        """The fitted form's per-block costs (seconds): block ``p`` (``u = B`` new tokens after
        ``c = pB`` cached ones) ``b*B + d*B*B*(p + 1/2)``, as ``fit:`` derives them from replay's
        model.  What cost-aware policies and ``compute_saving_ratio`` read; the per-request
        figures (``prefill_s``) come from :meth:`seconds`."""
        _a, b, d = self.coef
        B = float(block_tokens)
        p = np.arange(n_blocks, dtype=np.float64)
        return b * B + d * B * B * (p + 0.5)

    def describe(self) -> str:
        a, b, d = self.coef
        cached = ", ".join(str(r.cached) for r in self.rows)
        return (f"{self.n_points} points, cached rows {cached}; past the edge F = {a:.4g} + "
                f"{b:.4g}*n + {d:.4g}*n*(c + n/2) s")


def parse_profile_arg(arg: str) -> tuple[str, str | None]:
    """``FILE[,model=NAME]`` -> ``(FILE, NAME or None)``."""
    path, *rest = arg.split(",")
    opts: dict[str, str] = {}
    for item in rest:
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or k not in PROFILE_PARAMS:
            raise ShadowError(f"cost model profile:{arg}: unknown parameter {item.strip()!r} "
                              f"(profile:FILE[,model=NAME])")
        if k in opts:
            raise ShadowError(f"cost model profile:{arg}: {k} given twice")
        if not v.strip():
            raise ShadowError(f"cost model profile:{arg}: {k}= needs a value")
        opts[k] = v.strip()
    if not path.strip():
        raise ShadowError("cost model profile:FILE needs a file name")
    return path.strip(), opts.get("model")


def _int_value(v, key: str, where: str, low: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v != int(v) or v < low:
        raise ShadowError(f"{where}: {key} is {json.dumps(v)}, not an integer >= {low}")
    return int(v)


def _spread(d: dict, s: float) -> tuple[float, float]:
    """A point's ``(min_s, max_s)`` when both are numbers around ``s``, else ``(s, s)``."""
    lo, hi = d.get("min_s"), d.get("max_s")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
           for v in (lo, hi)) and lo <= s <= hi:
        return float(lo), float(hi)
    return s, s


def _file_points(path: str) -> list[tuple]:
    """Every point of the file, checked: ``(cached, new, s, line, model or None, min_s,
    max_s)``, in file order."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ShadowError(f"cost model profile:{path}: cannot read it: "
                          f"{exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ShadowError(f"{path}: byte {exc.start}: not UTF-8 text") from None
    pts: list[tuple] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            d = json.loads(line)
        except ValueError as exc:
            raise ShadowError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(d, dict):
            raise ShadowError(f"{where}: not a JSON object")
        have = [k for k in ("cached", "new", "s") if k in d]
        if not have:
            continue
        if len(have) < 3:
            missing = [k for k in ("cached", "new", "s") if k not in d]
            raise ShadowError(f"{where}: a point needs cached, new and s; this line has no "
                              f"{' and no '.join(missing)}")
        c = _int_value(d["cached"], "cached", where, 0)
        n = _int_value(d["new"], "new", where, 1)
        s = d["s"]
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) \
                or s <= 0:
            raise ShadowError(f"{where}: s is {json.dumps(s)}, not a finite number of seconds "
                              f"> 0")
        m = d.get("model")
        pts.append((c, n, float(s), i, None if m is None else str(m), *_spread(d, float(s))))
    return pts


def profile_models(path: str) -> list[str | None]:
    """The ``model`` keys of the file's points in order of first use (None for points without
    one); errors as :func:`load_profile`'s."""
    return list(dict.fromkeys(p[4] for p in _file_points(path)))


def _read_points(path: str, model: str | None) -> list[tuple]:
    """The file's points ``(cached, new, s, line, min_s, max_s)`` of ``model`` (every model's
    when None, which must then be one)."""
    pts = _file_points(path)
    models = sorted({p[4] for p in pts if p[4] is not None})
    if model is not None:
        kept = [p for p in pts if p[4] == model]
        if not kept:
            raise ShadowError(f"{path}: no point of model {model!r} (models: "
                              f"{', '.join(models) or 'none named'})")
        pts = kept
    elif len({p[4] for p in pts}) > 1:
        names = [m if m is not None else "(no model key)" for m in
                 sorted({p[4] for p in pts}, key=lambda m: (m is None, m or ""))]
        raise ShadowError(f"{path}: points of several models ({', '.join(names)}): pick one "
                          f"with profile:{path},model=NAME")
    return [p[:4] + p[5:] for p in pts]


def _fit(c: np.ndarray, n: np.ndarray, s: np.ndarray) -> tuple[float, float, float]:
    """``(a, b, d) >= 0`` minimising the relative squared error of ``F`` over the points.

    NOTE: non-negative least squares by trying every subset of the three terms (8 small solves):
    the best fit whose terms are all >= 0; relative, so the 20 ms points count as much as the
    1.4 s ones (h200_prefill.jsonl: RMS relative error 0.148 llama3_8b, 0.127 qwen25_7b)."""
    X = np.stack([np.ones_like(n), n, n * (c + n / 2.0)], axis=1) / s[:, None]
    y = np.ones_like(s)
    best: tuple[float, np.ndarray] | None = None
    for k in (1, 2, 3):
        for cols in itertools.combinations(range(3), k):
            sub = X[:, cols]
            coef, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if not np.all(np.isfinite(coef)) or np.any(coef < 0):
                continue
            r = float(((sub @ coef - y) ** 2).sum())
            if best is None or r < best[0]:
                full = np.zeros(3)
                full[list(cols)] = coef
                best = (r, full)
    assert best is not None   # NOTE: a single term always has a non-negative solution (s > 0)
    return float(best[1][0]), float(best[1][1]), float(best[1][2])


def monotone_violation(points: dict[tuple[int, int], tuple[float, float, float]]
                       ) -> tuple[int, int, int] | None:
    """The first point (rows by cached ascending, each by new ascending) that falls below an
    earlier point of its row by more than :data:`MONOTONE_TOLERANCE` of the row's fastest point
    *and* beyond both points' spread of repeats (the earlier one's fastest repeat slower than
    this one's slowest): ``(cached, new of the earlier point, new of the point)``; None when
    there is none.  ``points``: ``(cached, new) -> (s, min_s, max_s)`` (``min_s = max_s = s``
    where the spread is not known)."""
    for c in sorted({k[0] for k in points}):
        row = [(n, *points[(cc, n)]) for cc, n in sorted(points) if cc == c]
        fastest = min(p[1] for p in row)
        for k, (n, s, _lo, hi) in enumerate(row):
            above = [(s_j, n_j) for n_j, s_j, lo_j, _hi_j in row[:k]
                     if s_j - s > MONOTONE_TOLERANCE * fastest and lo_j > hi]
            if above:
                return c, max(above)[1], n       # NOTE: named against the slowest of them
    return None


def load_profile(path: str, model: str | None = None) -> Profile:
    """Read and check FILE (module docstring); errors name the file and line."""
    pts = _read_points(path, model)
    # (cached, new) -> (seconds, line, min_s, max_s) of the point's first line
    seen: dict[tuple[int, int], tuple[float, int, float, float]] = {}
    for c, n, s, line, lo, hi in pts:
        prev = seen.get((c, n))
        if prev is None:
            seen[(c, n)] = (s, line, lo, hi)
        elif prev[0] != s:
            raise ShadowError(f"{path}:{line}: the point cached {c}, new {n} is already at line "
                              f"{prev[1]} with other seconds ({s:.6g} s there {prev[0]:.6g} s)")
    if len(seen) < 2:
        raise ShadowError(f"{path}: the profile has {len(seen)} point"
                          f"{'' if len(seen) == 1 else 's'}"
                          f"{'' if model is None else f' of model {model}'}; at least 2 needed")
    if not any(c == 0 for c, _n in seen):
        raise ShadowError(f"{path}: no point at cached 0 (the prefill without a hit, which "
                          f"every saving is measured against)"
                          f"{'' if model is None else f' for model {model}'}")
    rows = []
    bad = monotone_violation({k: (v[0], v[2], v[3]) for k, v in seen.items()})
    if bad is not None:
        c, n_top, n = bad
        s_top, line_top = seen[(c, n_top)][:2]
        s_low, line = seen[(c, n)][:2]
        raise ShadowError(
            f"{path}:{line}: not monotone in new tokens: cached {c}, new {n} takes "
            f"{s_low:.6g} s, less than {s_top:.6g} s for new {n_top} (line "
            f"{line_top}) by more than {MONOTONE_TOLERANCE:g} of the row's fastest point and "
            f"beyond both points' repeats")
    for c in sorted({k[0] for k in seen}):
        ns = sorted(n for (cc, n) in seen if cc == c)
        rows.append(ProfileRow(c, np.asarray(ns, dtype=np.float64),
                               np.asarray([seen[(c, n)][0] for n in ns], dtype=np.float64)))
    allc = np.array([k[0] for k in seen], dtype=np.float64)
    alln = np.array([k[1] for k in seen], dtype=np.float64)
    alls = np.array([v[0] for v in seen.values()], dtype=np.float64)
    return Profile(str(path), model, tuple(rows), _fit(allc, alln, alls))
