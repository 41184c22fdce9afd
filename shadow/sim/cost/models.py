"""Cost models: what recomputing the block at 0-based position p costs.

==========================  =====================================================
``uniform`` (default)       1 (compute saving equals hit ratio)
``position``                p + 1
``linear:A,B``              A + B*p
``table:FILE``              line p+1 of FILE (one number a line); past the end, the last line
``qwen3coder30b_blksz_16``  865 + 2p (measured on Qwen3-Coder-30B, 16-token blocks)
``qwen3coder30b_blksz_64``  3472 + 32p (64-token blocks)
``model:CONFIG[,BLOCK]``    the block's forward FLOPs from a Hugging Face config.json,
                            1000 = one block's linear work (:mod:`shadow.sim.cost.arch`)
``fit:REPORT[,BLOCK]``      replay's fitted prefill model, microseconds per block
``profile:FILE[,model=M]``  a measured prefill table (:mod:`shadow.sim.cost.profile`): seconds
                            per request; per block, its fitted form's seconds
==========================  =====================================================

Each model says its unit (:attr:`CostModel.unit`, one of :data:`COST_UNITS`): ``us`` for
``fit:`` (a cost is a block's prefill time), ``s`` for ``profile:`` (seconds; the model also
gives each request's prefill seconds from its cached and new tokens, :attr:`CostModel.profile`),
``relative`` for every other (only ratios of costs mean anything).  A ``profile:`` model's block
costs need the block size in tokens, which the run knows (the trace's header, the engine's):
:meth:`CostModel.for_block_size` binds it.

Statistics use the exact double; policies see ``llround`` of it in its unit's integer resolution
(:data:`INT_PER_UNIT`: microseconds for ``s``; :attr:`Access.cost`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.cost.arch import fit_coefficients, model_cost_fn

if TYPE_CHECKING:
    from shadow.sim.cost.profile import Profile

_NAMED = {
    "uniform": (1.0, 0.0),
    "position": (1.0, 1.0),
    "qwen3coder30b_blksz_16": (865.0, 2.0),
    "qwen3coder30b_blksz_64": (3472.0, 32.0),
}
#: The units a cost may be in: ``relative`` (only ratios mean anything), ``us`` (microseconds)
#: or ``s`` (seconds).
COST_UNITS = ("relative", "us", "s")
#: Microseconds per unit, for the units that are times.
US_PER_UNIT = {"us": 1.0, "s": 1e6}
#: What a policy's integer cost counts per unit of the exact cost: one, except seconds, which
#: policies see as microseconds (``llround`` of a block's seconds is 0).
INT_PER_UNIT = {"relative": 1.0, "us": 1.0, "s": 1e6}
COST_MODELS = ("uniform", "position", "linear:A,B", "table:FILE", "qwen3coder30b_blksz_16",
               "qwen3coder30b_blksz_64", "model:CONFIG[,BLOCK]", "fit:REPORT[,BLOCK]",
               "profile:FILE[,model=NAME]")


@dataclass
class CostModel:
    """A parsed cost model.  ``costs(n)`` gives positions 0..n-1 as float64, in ``unit``
    (:data:`COST_UNITS`): code that needs times asks the unit, never the name."""

    name: str
    a: float = 1.0
    b: float = 0.0
    table: np.ndarray | None = field(default=None, repr=False)
    fn: Callable[[int], np.ndarray] | None = field(default=None, repr=False)
    _memo: list[float] = field(default_factory=list, repr=False, compare=False)
    unit: str = "relative"
    #: ``profile:``'s table (per-request seconds); None for every other model
    profile: "Profile | None" = field(default=None, repr=False)
    #: the block size in tokens ``profile:``'s block costs were bound to (0: not yet)
    block_tokens: int = 0

    def for_block_size(self, block_tokens: int) -> "CostModel":
        """This model with its block costs for ``block_tokens``-token blocks: ``profile:``'s
        fitted block costs (:meth:`Profile.block_costs`) need the block size; every other model
        is returned as it is."""
        if self.profile is None or self.block_tokens == block_tokens:
            return self
        if block_tokens < 1:
            raise ShadowError(f"cost model {self.name}: needs the block size in tokens")
        prof = self.profile
        return CostModel(self.name, fn=lambda n: prof.block_costs(n, block_tokens), unit=self.unit,
                         profile=prof, block_tokens=block_tokens)

    def _unbound(self) -> None:
        if self.profile is not None and self.fn is None:
            raise ShadowError(f"cost model {self.name}: block costs need the block size in "
                              f"tokens (the trace's header or the engine's), which is not known")

    def cost(self, p: int) -> float:
        if self.fn is not None:
            # NOTE: one position at a time (the connector's pools): memoised, grown by doubling
            if p >= len(self._memo):
                self._memo = self.fn(max(p + 1, 2 * len(self._memo), 64)).tolist()
            return self._memo[p]
        if self.table is not None:
            return float(self.table[min(p, len(self.table) - 1)])
        self._unbound()
        return self.a + self.b * p

    def costs(self, n: int) -> np.ndarray:
        self._unbound()
        p = np.arange(n, dtype=np.float64)
        if self.fn is not None:
            return self.fn(n)
        if self.table is not None:
            idx = np.minimum(np.arange(n), len(self.table) - 1)
            return self.table[idx].astype(np.float64)
        return self.a + self.b * p

    def int_costs(self, n: int) -> np.ndarray:
        """``llround`` of :meth:`costs` in the unit's integer resolution (:data:`INT_PER_UNIT`;
        round half away from zero)."""
        c = self.costs(n) * INT_PER_UNIT[self.unit]
        return (np.sign(c) * np.floor(np.abs(c) + 0.5)).astype(np.int64)


def _number(text: str, *, where: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ShadowError(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(v):
        raise ShadowError(f"{where}: {text!r} is not a finite number")
    if v < 0:
        raise ShadowError(f"{where}: cost {text!r} is negative")
    return v


def _load_table(path: str) -> np.ndarray:
    if not path:
        raise ShadowError("cost model table:FILE needs a file name")
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ShadowError(f"cost model table: cannot read {path}: {exc.strerror}") from None
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ShadowError(f"{path}:{line}: not UTF-8 text (byte offset {exc.start}); the cost "
                          f"table is one number a line") from None
    values = []
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            if any(x.strip() for x in lines[i:]):
                raise ShadowError(f"{path}:{i}: empty line inside the cost table")
            break
        values.append(_number(s, where=f"{path}:{i}"))
    if not values:
        raise ShadowError(f"{path}: the cost table is empty")
    return np.asarray(values, dtype=np.float64)


def parse_cost_model(text: str) -> CostModel:
    """Parse a ``--cost-model`` string; a bad one raises ShadowError naming what is wrong."""
    s = (text or "").strip()
    if s in _NAMED:
        a, b = _NAMED[s]
        return CostModel(s, a, b)
    if s.startswith("linear:"):
        parts = s[len("linear:"):].split(",")
        if len(parts) != 2:
            raise ShadowError(f"bad cost model {text!r}: expected linear:A,B")
        a = _number(parts[0].strip(), where=f"cost model {text!r}")
        b = _number(parts[1].strip(), where=f"cost model {text!r}")
        return CostModel(s, a, b)
    if s.startswith("table:"):
        return CostModel(s, table=_load_table(s[len("table:"):]))
    if s.startswith("model:"):
        name, fn = model_cost_fn(s[len("model:"):])
        return CostModel(name, fn=fn)
    if s.startswith("fit:"):
        a, b = fit_coefficients(s[len("fit:"):])
        return CostModel(s, a, b, unit="us")
    if s.startswith("profile:"):
        from shadow.sim.cost.profile import load_profile, parse_profile_arg

        return CostModel(s, unit="s", profile=load_profile(*parse_profile_arg(s[len("profile:"):])))
    raise ShadowError(f"unknown cost model {text!r} (known: {', '.join(COST_MODELS)})")
