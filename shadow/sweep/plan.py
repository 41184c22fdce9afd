"""Sweep planning: the capacity grammar and the cells of a sweep.

A sweep is the cross product traces x policies x capacities x cost models, run under one set of
simulator options.  Each element is a :class:`Cell`; a cell is the unit of work, of resumption and
of storage: it is run by one task that streams its trace once through one
:class:`shadow.sim.Simulator` with one cache, and it is stored as one file under ``DIR/cells/``.

Invariant: a cell's :meth:`Cell.key` names every input that can change its result (the trace path,
the policy and its parameters, the capacity, the cost model, pinning, replay order, block-id mode, truncation,
the category fold, the timing, the tier, the router and the replica count),
and nothing else, so two cells with equal keys give identical RESULT lines and a cell file found in
``DIR`` can stand in for running the cell again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict, dataclass, fields
from itertools import product
from typing import Iterable

from shadow.cli_options import parse_size, split_size_list
from shadow.sim.category import DEFAULT_CATEGORY
from shadow.sim.registry import MAX_CAPACITY
from shadow.errors import ShadowError

CELL_SUFFIX = ".result"

#: Points one ``START:STOP:logN`` range may ask for (a typo's million cells is refused up front).
MAX_RANGE_POINTS = 1024
_RANGE_RE = re.compile(r"^\s*([^:]+):([^:]+):(log|lin)(\d+)\s*$")


def parse_capacities(text: str) -> list[int]:
    """Parse the ``--cache-sizes`` grammar into a sorted list of distinct block counts.

    ``text`` is a comma list whose items are sizes (``8192``, ``8k``, ``1m``; k/m/g multiply by
    1024) or ranges ``START:STOP:logN`` (N points spaced evenly in log space, both ends included)
    and ``START:STOP:linN`` (N points spaced evenly).  Range points are rounded to the nearest
    integer; points that round to the same integer are kept once.  ``1k:256k:log8`` gives
    ``1024, 2261, 4993, 11026, 24347, 53761, 118715, 262144``.  An empty item and a one-point
    range between two different sizes are refused.
    """
    if not text.strip():
        raise ShadowError(f"bad --cache-sizes {text!r}: empty")
    items = split_size_list(text)
    out: set[int] = set()
    for item in items:
        m = _RANGE_RE.match(item)
        if m is None:
            if ":" in item:
                raise ShadowError(
                    f"bad cache-size range {item.strip()!r}: expected START:STOP:logN or "
                    f"START:STOP:linN, e.g. 1k:256k:log8")
            out.add(parse_size(item))
            continue
        lo = parse_size(m.group(1), what="range start")
        hi = parse_size(m.group(2), what="range stop")
        n = int(m.group(4))
        if n < 1:
            raise ShadowError(f"bad cache-size range {item.strip()!r}: needs at least 1 point")
        if n > MAX_RANGE_POINTS:
            raise ShadowError(f"bad cache-size range {item.strip()!r}: {n} points (at most "
                              f"{MAX_RANGE_POINTS} a range; a sweep runs one cell per size)")
        if hi < lo:
            raise ShadowError(f"bad cache-size range {item.strip()!r}: stop {hi} < start {lo}")
        if n == 1:
            if hi != lo:
                # NOTE: both ends are promised; one point cannot hold two different sizes
                raise ShadowError(f"bad cache-size range {item.strip()!r}: 1 point cannot hold "
                                  f"both ends {lo} and {hi} (2 or more points, or one size)")
            out.add(lo)
            continue
        for i in range(n):
            if i == 0:
                v = lo
            elif i == n - 1:
                v = hi  # NOTE: exact end points, not exp(log(hi)) rounded
            elif m.group(3) == "log":
                v = round(math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (n - 1)))
            else:
                v = round(lo + (hi - lo) * i / (n - 1))
            out.add(int(v))
    too_large = [c for c in out if c > MAX_CAPACITY]
    if too_large:
        raise ShadowError(f"bad --cache-sizes {text!r}: cache size {too_large[0]} blocks is too "
                          f"large (at most {MAX_CAPACITY} = 2**31 - 2)")
    return sorted(out)


def _slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"
    return s[:limit]


@dataclass(frozen=True)
class Cell:
    """One (trace, policy, capacity, cost model) simulation under fixed simulator options.

    ``trace`` is an absolute path: with the Ray executor it must name the same file on every
    node.  ``params`` is the policy's ``k=v,k=v`` parameter string ('' for its defaults).
    """

    trace: str
    algo: str
    capacity: int
    cost_model: str = "uniform"
    params: str = ""
    pin: bool = True
    replay_order: str = "deepest-first"
    block_id: str = "prefix"
    allow_truncated: bool = False
    #: ``serial``, ``recorded``, ``model`` or ``model:SERVICE`` (``shadow simulate --timing``,
    #: with ``--service SERVICE``)
    timing: str = "serial"
    #: one offload tier, ``MEDIUM:SIZE:POLICY:k=v,...`` (``shadow simulate --tier``), '' none
    tier: str = ""
    #: the bytes of a block for the tier: ``N`` (``--bytes-per-block``) or ``CONFIG[,DTYPE]``
    #: (``--kv-config``, read with the trace's block size), '' none
    kv_bytes: str = ""
    #: the fold of type and turn into the request category (``--category``)
    category: str = DEFAULT_CATEGORY
    #: the router, ``name`` or ``name:k=v,...`` (``shadow simulate --router``), '' one engine
    router: str = ""
    #: engines behind the router (``--replicas``); the capacity is each one's
    replicas: int = 1

    def key(self) -> str:
        """The canonical text of every field: equal keys, equal results.

        NOTE: ``timing``, ``tier``, ``kv_bytes``, ``category``, ``router`` and ``replicas``
        are left out at their defaults, so a cell stored before those fields existed keeps its
        key (and its file name's digest): such sweeps resume (no policy read the category
        before it existed: their results are the default's).
        """
        d = asdict(self)
        for name, default in (("timing", "serial"), ("tier", ""), ("kv_bytes", ""),
                              ("category", DEFAULT_CATEGORY), ("router", ""), ("replicas", 1)):
            if d[name] == default:
                del d[name]
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.key().encode()).hexdigest()[:12]

    @property
    def trace_name(self) -> str:
        return os.path.basename(self.trace)

    @property
    def file_name(self) -> str:
        """``<trace>.<algo>.<capacity>.<cost model>.<digest>.result``: readable, and unique by the digest."""
        return (f"{_slug(self.trace_name)}.{_slug(self.algo)}.{self.capacity}."
                f"{_slug(self.cost_model, 24)}.{self.digest}{CELL_SUFFIX}")

    def label(self) -> str:
        algo = f"{self.algo}({self.params})" if self.params else self.algo
        fleet = f" x{self.replicas} behind {self.router}" if self.router else ""
        return f"{self.trace_name} {algo} {self.capacity}{fleet} {self.cost_model}"

    @classmethod
    def from_key(cls, key: str) -> "Cell":
        data = json.loads(key)
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown cell fields {sorted(unknown)}")
        return cls(**data)


def plan_cells(traces: Iterable[str], algos: Iterable[tuple[str, str]], capacities: Iterable[int],
               cost_models: Iterable[str], *, pin: bool = True,
               replay_order: str = "deepest-first", block_id: str = "prefix",
               allow_truncated: bool = False, timings: Iterable[str] = ("serial",),
               tiers: Iterable[str] = ("",), kv_bytes: str = "",
               category: str = DEFAULT_CATEGORY, routers: Iterable[str] = ("",),
               replicas: Iterable[int] = (1,)) -> list[Cell]:
    """The cells of a sweep, in trace, cost model, timing, router, replica count, policy,
    capacity, tier order, without duplicates.

    ``algos`` holds ``(name, params)`` pairs; ``routers`` the routers' texts (``''``: one
    engine).  Trace paths are made absolute.
    """
    cells: list[Cell] = []
    seen: set[Cell] = set()
    caps = sorted(set(int(c) for c in capacities))
    for trace in traces:
        path = os.path.abspath(trace)
        for cost_model in cost_models:
            for timing, router, n, (algo, params), cap, tier in product(
                    timings, routers, replicas, algos, caps, tiers):
                cell = Cell(path, algo, cap, cost_model, params, pin, replay_order, block_id,
                            allow_truncated, timing, tier, kv_bytes if tier else "", category,
                            router, int(n))
                if cell not in seen:
                    seen.add(cell)
                    cells.append(cell)
    return cells
