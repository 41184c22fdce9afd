"""asym_cache's parameters checked once, for the policy (policies/cost_aware/asym_cache.pyx) and
its reference (reference/asym_cache.py): pure Python, so the reference needs no built extension
and the compiled policy imports no reference."""

from __future__ import annotations

import math

#: ``clock=``: the request's arrival seconds, or its ``vtime`` (block accesses before it)
CLOCKS = ("seconds", "block")


def check_params(p: dict) -> tuple[float, float, float, str]:
    """(reuse-prob, slope-ratio, default-lifespan, clock), or ValueError naming the parameter."""
    prob, ratio = float(p["reuse-prob"]), float(p["slope-ratio"])
    life, clock = float(p["default-lifespan"]), str(p["clock"])
    if not 0.0 < prob < 1.0:
        raise ValueError(f"reuse-prob must be in (0, 1), got {prob:g}")
    if not 1.0 < ratio < math.inf:
        raise ValueError(f"slope-ratio must be a finite number > 1, got {ratio:g}")
    if not 0.0 <= life < math.inf:
        raise ValueError(f"default-lifespan must be a finite number >= 0, got {life:g}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be seconds or block, got {clock!r}")
    return prob, ratio, life, clock
