"""The obviously correct twins of :mod:`shadow.sim.fleet._probe` (over ``CacheRun.holds``) and
:mod:`shadow.sim.fleet._split`."""

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


def split(off, ids, assign, replicas: int):
    """Per replica, its requests (file order) and their block ids: ([requests], [ids])."""
    out = [([], []) for _ in range(replicas)]
    for i, r in enumerate(assign):
        out[int(r)][0].append(i)
        out[int(r)][1].extend(int(b) for b in ids[int(off[i]):int(off[i + 1])])
    return out
