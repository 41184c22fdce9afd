"""A miss-ratio curve: the serve loop's four ratios at every capacity, from stack distances.

:class:`Curve` holds, per capacity ``C``, the looked-up blocks that hit (``block``: gap-spanning,
as ``block_hit_ratio``; ``prefix``: up to the request's first miss, as ``prefix_hit_ratio``) and
the cost they save, as cumulative sums of :class:`~shadow.sim.mrc.stack.StackPass`'s histograms:
``hits(C) = sum of hist[d] for d <= C``.  It is what ``simulate`` gives at ``C`` for every ``C >=
exact_from`` (the largest room one request needs, its distinct blocks plus anonymous slots:
a smaller cache skips that request, which the one-pass stack does not; docs/mrc.md).

Ratios are computed as :class:`shadow.sim.core.results.Result` computes them (hits / looked-up blocks,
saved / total cost), so they print to the same digits.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from shadow.errors import ShadowError

#: The ratios a curve gives, in the order of ``shadow simulate``'s RESULT line.
METRICS = ("block_hit_ratio", "compute_saving_ratio", "prefix_hit_ratio",
           "prefix_compute_saving_ratio")
#: The columns of ``shadow mrc -o``.
CSV_COLUMNS = ("cache_size", "block_hit_ratio", "prefix_hit_ratio", "compute_saving_ratio",
               "prefix_compute_saving_ratio")
#: The ratios ``--target`` answers for.
TARGET_METRICS = ("block_hit_ratio", "prefix_hit_ratio")


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


@dataclass
class Curve:
    """Cumulative hits and savings by capacity; index ``C`` is a cache of ``C`` blocks, and past
    the last index (the stack's length) nothing changes any more."""

    algo: str
    lookup: str
    replay_order: str
    cost_model: str
    n_req: int
    n_blocks: int          # looked-up blocks (the ratios' denominator)
    n_accesses: int        # every block of every request
    n_distinct: int
    total_cost: float
    exact_from: int        # smallest capacity at which the curve is exact (>= 1)
    exact_from_req: int    # 0-based file index of a request that needs it (-1: none)
    block: np.ndarray      # int64, cumulative hits at C = index
    prefix: np.ndarray
    saved_block: np.ndarray | None = None      # float64, cumulative saved cost; None: uniform
    saved_prefix: np.ndarray | None = None

    #: the arrays' owner (a :class:`~shadow.sim.mrc.stack.StackPass`), kept alive with them
    owner: object = None
    top: int = 1           # the smallest capacity past which nothing changes

    @classmethod
    def from_pass(cls, sp, *, algo: str, lookup: str, replay_order: str,
                  cost_model: str) -> "Curve":
        """The curve of a finished :class:`~shadow.sim.mrc.stack.StackPass` (which it ends:
        its histograms become the curve's running sums, without a copy)."""
        h = sp.cumulate()
        weighted = h["cost_block"] is not None
        return cls(algo=algo, lookup=lookup, replay_order=replay_order, cost_model=cost_model,
                   n_req=sp.n_req, n_blocks=sp.n_blocks, n_accesses=sp.n_accesses,
                   n_distinct=sp.n_distinct,
                   total_cost=sp.total_cost if weighted else float(sp.n_blocks),
                   exact_from=max(1, sp.exact_from), exact_from_req=sp.exact_from_req,
                   block=h["block"], prefix=h["prefix"], saved_block=h["cost_block"],
                   saved_prefix=h["cost_prefix"], owner=sp, top=max(1, sp.top))

    # ---- values ----

    def _at(self, arr: np.ndarray, c: int):
        return arr[min(c, len(arr) - 1)]

    def counts(self, c: int) -> dict[str, float]:
        """Hits and savings at capacity ``c`` (``n_hits``, ``n_prefix_hits``, ``saved_cost``,
        ``prefix_saved_cost``)."""
        hits = int(self._at(self.block, c))
        phits = int(self._at(self.prefix, c))
        if self.saved_block is None:
            saved, psaved = float(hits), float(phits)
        else:
            saved = float(self._at(self.saved_block, c))
            psaved = float(self._at(self.saved_prefix, c))
        return {"n_hits": hits, "n_prefix_hits": phits, "saved_cost": saved,
                "prefix_saved_cost": psaved}

    def ratios(self, c: int) -> dict[str, float]:
        """The four ratios at capacity ``c`` (:data:`METRICS`)."""
        k = self.counts(c)
        return {"block_hit_ratio": _ratio(k["n_hits"], self.n_blocks),
                "compute_saving_ratio": _ratio(k["saved_cost"], self.total_cost),
                "prefix_hit_ratio": _ratio(k["n_prefix_hits"], self.n_blocks),
                "prefix_compute_saving_ratio": _ratio(k["prefix_saved_cost"], self.total_cost)}

    def check_size(self, c: int, what: str = "--at") -> None:
        """A capacity the curve answers exactly, else a one-line error."""
        if c < self.exact_from:
            req = (f" (request {self.exact_from_req} needs {self.exact_from} blocks)"
                   if self.exact_from_req >= 0 else "")
            raise ShadowError(f"{what} {c}: below {self.exact_from} blocks, the room the largest "
                              f"request needs{req}; a smaller cache skips it, which one pass "
                              f"cannot follow (simulate -a {self.algo} runs such sizes)")

    def change_points(self) -> np.ndarray:
        """Every capacity from ``exact_from`` on where a ratio changes, ``exact_from`` first."""
        n = len(self.block)
        lo = min(self.exact_from, n - 1)
        d = np.flatnonzero(np.diff(self.block[lo:]) | np.diff(self.prefix[lo:])) + lo + 1
        return np.concatenate(([self.exact_from], d[d > self.exact_from])).astype(np.int64)

    def csv_rows(self):
        """:data:`CSV_COLUMNS` rows, one per change point (ratios printed as RESULT prints them)."""
        for c in self.change_points():
            r = self.ratios(int(c))
            yield [str(int(c))] + [f"{r[k]:.6f}" for k in CSV_COLUMNS[1:]]

    # ---- capacity for a target ----

    def capacity_for(self, target: Fraction, metric: str) -> int:
        """The smallest capacity whose ``metric`` reaches ``target`` times the infinite cache's
        (``target`` in (0, 1]); may be below :attr:`exact_from` (then only an upper bound: the
        caller says so)."""
        arr = self.block if metric == "block_hit_ratio" else self.prefix
        full = int(arr[-1])
        # NOTE: exact rational comparison, hits * den >= num * full, so 0.9 means 9/10
        need = -(-(target.numerator * full) // target.denominator)
        return max(1, int(np.searchsorted(arr, need, side="left")))


def parse_targets(text: str) -> list[Fraction]:
    """``--target 0.5,0.8,0.9``: shares of the infinite cache's ratio, each in (0, 1]."""
    out: list[Fraction] = []
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ShadowError("--target is empty")
    for p in parts:
        try:
            f = Fraction(p)
        except (ValueError, ZeroDivisionError):
            raise ShadowError(f"--target {p!r}: not a number") from None
        if not 0 < f <= 1:
            raise ShadowError(f"--target {p}: a share of the infinite cache's ratio is in (0, 1]")
        out.append(f)
    return out
