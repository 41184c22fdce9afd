"""Replay's ``report.json``, read in one place for its two uses: the per-block costs of
``--cost-model fit:REPORT`` (:func:`shadow.sim.cost.arch.fit_coefficients`) and the prefill time
of ``--service fit:REPORT`` (:func:`shadow.sim.timing.service.parse_service`).

What both read is the prefill model ``replay`` fitted to measured TTFT (``prefill_model.coef``:
``TTFT = a + b*u + d*u*(c + u/2)``, :mod:`replay.prefill`; one to three terms, the missing ones
0) and the engine's block size.  Every error is one :class:`ShadowError` line that starts with
the caller's ``where`` (the option and the file: ``cost model fit:REPORT``, ``--service
fit:REPORT``), then what is wrong: the file cannot be read or is not a JSON object
(:func:`shadow.sim.cost.modelcfg.read_json_object`), it has no fitted model, its coefficients are
not numbers, or a term its use needs is negative, non-finite or zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shadow.errors import ShadowError
from shadow.sim.cost.modelcfg import read_json_object


@dataclass(frozen=True)
class PrefillFit:
    """The fitted prefill model's terms (seconds, seconds/token, seconds/token^2) and the
    report's engine block size (None when it has none)."""

    a: float
    b: float
    d: float
    block_size: int | None


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def read_prefill_fit(path: str, where: str, *, overhead: bool) -> PrefillFit:
    """The prefill model of the report at ``path``, its terms checked for one use: a block's
    cost (``overhead`` False: ``b`` and ``d`` finite and >= 0; the fixed ``a`` is no block's and
    may be negative, as a least-squares fit can make it) or a request's prefill time
    (``overhead`` True: ``a``, ``b``, ``d`` finite and >= 0, and ``b`` > 0, the prefill speed
    being ``1/b``)."""
    rep = read_json_object(path, where)
    model = rep.get("prefill_model")
    coef = model.get("coef") if isinstance(model, dict) else None
    if not isinstance(coef, list) or not coef:
        raise ShadowError(f"{where}: the report has no fitted prefill model (too few measured "
                          f"requests)")
    if not all(_is_number(c) for c in coef):
        raise ShadowError(f"{where}: the prefill model's coef {coef!r:.80} is not a list of "
                          f"numbers")
    a, b, d = ([float(c) for c in coef] + [0.0, 0.0])[:3]
    terms = (a, b, d) if overhead else (b, d)
    shown = f"a={a:.3g} s, b={b:.3g} s/token, d={d:.3g} s/token^2"
    if not all(math.isfinite(x) and x >= 0 for x in terms):
        raise ShadowError(f"{where}: the fitted prefill model has a negative or non-finite term "
                          f"({shown}): refit it with more requests")
    if overhead and b == 0:
        raise ShadowError(f"{where}: the fitted prefill model has no per-token term ({shown}): "
                          f"refit it with more requests")
    bs = rep.get("block_size")
    block_size = bs if isinstance(bs, int) and not isinstance(bs, bool) and bs >= 1 else None
    return PrefillFit(a, b, d, block_size)
