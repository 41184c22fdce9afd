"""The obviously correct twins of :mod:`shadow.sim.fleet._probe`, over ``CacheRun.holds``."""

from __future__ import annotations


def prefix_lengths(runs, ids) -> list[int]:
    """Per cache, the leading ``ids`` it holds up to its first miss."""
    out = []
    for run in runs:
        k = 0
        for b in ids:
            if not run.holds(int(b)):
                break
            k += 1
        out.append(k)
    return out


def resident_mask(run, ids) -> list[int]:
    """1 where the cache holds the id, else 0."""
    return [1 if run.holds(int(b)) else 0 for b in ids]
