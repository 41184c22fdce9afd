"""Helpers shared by the benchmarks; importing this module imports nothing from ``shadow`` (a
worker of ``ab_builds.py`` must import ``shadow`` from the tree under test)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def parse_size(text: str) -> int:
    """``8192``, ``8k``, ``1m``: blocks (k/m are x1024, as ``shadow simulate --cache-size``)."""
    text = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20}.get(text[-1:], 1)
    return int(text[:-1] if mult > 1 else text) * mult


def load_arrays(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The whole trace as (offsets, block ids, next-access) arrays in memory."""
    from shadow.trace import open_trace

    offs, ids, nxt, base = [np.zeros(1, dtype=np.int64)], [], [], 0
    with open_trace(str(path)) as tr:
        for b in tr:
            o = np.asarray(b.offsets, dtype=np.int64)
            offs.append(o[1:] + base)
            base += int(o[-1])
            # NOTE: copies: the reader reuses its batch arrays once no view holds them
            ids.append(np.array(b.block_ids, dtype=np.int64))
            nxt.append(np.array(b.next_access, dtype=np.int64))
    return np.concatenate(offs), np.concatenate(ids), np.concatenate(nxt)


def loop_only(arrays: tuple[np.ndarray, np.ndarray, np.ndarray], policy: str, size: int,
              reps: int = 2) -> tuple[float, int]:
    """CPU seconds (best of ``reps``) and block accesses of one cache over arrays in memory
    (pins on, deepest-first, verify on, uniform cost: as bench_sim's ``run``)."""
    try:
        from shadow.sim.core.loop import CacheRun
    except ImportError:  # NOTE: a tree from before shadow/sim's sub-packages (bench/ab_builds.py)
        from shadow.sim.loop import CacheRun
    from shadow.sim.registry import make_policy
    off, ids, nxt = arrays
    n = len(off) - 1
    max_b = int(np.max(np.diff(off))) + 1
    ce, ci, ts = np.ones(max_b), np.ones(max_b, dtype=np.int64), np.full(n, -1.0)
    best = float("inf")
    for _ in range(reps):
        cr = CacheRun(make_policy(policy, size), True, "deepest-first", True)
        cr.reserve(max_b)
        c = time.process_time()
        cr.serve_batch(off, ids, nxt, ts, ce, ci, 0)
        best = min(best, time.process_time() - c)
        assert cr.failed == 0, cr.failed
    return best, len(ids)
