"""``kv_aware``: the replica holding the longest contiguous prefix of the prompt in an index fed
by the replicas' KV events; the least loaded when no replica holds any; speculative entries.

vllm-router ``src/policies/kv_aware.rs`` at commit 71af994 (GitHub vllm-project/router): the
prompt's block keys (lines 95-106), per worker the leading blocks it holds without a gap
(``src/kv_index/scorer.rs`` at 2ec0ff0, ``PrefixScorer::score``), the worker with the highest
score (``max_by_key``, lines 119-122: the last among equals), the least loaded when the best
score is 0 or the prompt has no full block (lines 142-151 and 194-200: ``min_by_key(load)``,
the first among equals), then a speculative insert of the prompt's blocks past the best score
for the chosen worker with ``ttl`` (lines 153-166; defaults ``enable_speculative=true``,
``speculative_ttl=2s``, lines 44-53).  One replica: always it (lines 184-187).  The index (:mod:`shadow.sim.fleet.index`) is each replica's resident
blocks as its events report them, ``lag`` seconds late.

``score=cost``: the released vllm-router 0.1.17's rule instead (PyPI sdist,
``src/policies/kv_aware.rs``): per replica the new prefill tokens, ``ceil(input - credited)``
with ``credited = min(device_blocks, (input - 1) // B) * B`` capped at ``input - 1``
(``credited_tokens``, lines 719-766; only the device tier), the cost ``(new + the replica's
active prefill tokens) * (its requests in flight + 1)`` (``MultiplicativeScorer``, lines
788-822); the lowest cost wins, the first among equals (``TemperaturePicker`` at temperature 0,
lines 834-870; ``temperature`` > 0 draws from the softmax, seeded), a replica of cost 0 first
(``pick_among``, lines 1615-1640).  A request's new prefill tokens count as its replica's active
prefill from its routing to its prefill end (``begin_prefill``/``begin_decode``, lines 351-379).
No speculation in this rule (``speculative`` is ignored).
"""

from __future__ import annotations

import heapq
import math
import random

from shadow.errors import ShadowError
from shadow.sim.fleet.index import EventIndex, IndexedRouter
from shadow.sim.fleet.least_load import least_loaded
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the longest contiguous prefix in a KV-event index, else the least loaded",
    source="vllm-router@71af994 src/policies/kv_aware.rs:44-53,95-200; "
           "src/kv_index/scorer.rs (PrefixScorer::score), index.rs (speculative_insert) @2ec0ff0",
    defaults="score=prefix,speculative=true,ttl=2.0,lag=0.0,temperature=0.0,seed=0",
    reads_caches=True,
)


class KvAware(IndexedRouter):

    def __init__(self, replicas: int, params: dict) -> None:
        self.n = replicas
        self.index = EventIndex(replicas, float(params["lag"]), bool(params["speculative"]),
                                float(params["ttl"]))

    def route(self, q: Query, view: FleetView) -> int:
        if self.n == 1:
            return 0
        if len(q.blocks) == 0:
            return least_loaded(view, None)
        scores = self.index.prefix(q, view)
        best = int(scores.max())
        pick = int(self.n - 1 - scores[::-1].argmax())       # the last among the best
        if best == 0:
            pick = least_loaded(view, None)
        if best < len(q.blocks):
            self.index.speculate(pick, q.blocks[best:], q.t)
        return pick


class KvAwareCost(IndexedRouter):
    """vllm-router 0.1.17's ``kv_aware`` (module docstring, ``score=cost``)."""

    def __init__(self, replicas: int, params: dict, block_size: int) -> None:
        self.n = replicas
        self.B = max(block_size, 1)
        self.temperature = float(params["temperature"])
        self.rng = random.Random(int(params["seed"]))
        self.index = EventIndex(replicas, float(params["lag"]), False, 0.0)
        self.active = [0] * replicas
        self._ends: list[tuple[int, int, int]] = []      # (prefill end us, replica, tokens)
        self._last: tuple[int, int] | None = None

    def new_prefill(self, q: Query, device_blocks: int) -> int:
        """``request_prefill_tokens``: the prompt's tokens less the credited prefix."""
        tokens = q.input_tokens if q.input_tokens > 0 else len(q.blocks) * self.B
        cap = (tokens - 1) // self.B if tokens > 0 else 0
        credited = min(min(device_blocks, cap) * self.B, max(tokens - 1, 0))
        return max(tokens - credited, 0)

    def costs(self, q: Query, view: FleetView) -> tuple[list[float], list[int]]:
        t_us = int(round(q.t * 1e6)) if q.t >= 0 else None
        while self._ends and (t_us is None or self._ends[0][0] <= t_us):
            _, r, tok = heapq.heappop(self._ends)
            self.active[r] -= tok
        match = self.index.prefix(q, view) if len(q.blocks) else [0] * self.n
        new = [self.new_prefill(q, int(match[r])) for r in range(self.n)]
        cost = [float((new[r] + self.active[r]) * (view.in_flight(r) + 1))
                for r in range(self.n)]
        return cost, new

    def route(self, q: Query, view: FleetView) -> int:
        cost, new = self.costs(q, view)
        zeros = [r for r in range(self.n) if cost[r] == 0.0]
        if zeros and (len(zeros) == self.n or self.temperature <= 0):
            pick = min(zeros, key=lambda r: (new[r], view.in_flight(r)))
        elif self.temperature <= 0:
            pick = cost.index(min(cost))
        else:
            lo = min(cost)
            w = [math.exp(-(c - lo) / self.temperature) for c in cost]
            x = self.rng.random() * sum(w)
            pick = self.n - 1
            for r, v in enumerate(w):
                if x < v:
                    pick = r
                    break
                x -= v
        self._last = (pick, new[pick])
        return pick

    def placed(self, r: int, prefill_end_us: int) -> None:
        """The chosen replica carries the request's new prefill tokens until its prefill ends."""
        if self._last is not None and self._last[0] == r:
            self.active[r] += self._last[1]
            heapq.heappush(self._ends, (prefill_end_us, r, self._last[1]))
        self._last = None


def check(params: dict) -> None:
    for key in ("ttl", "lag", "temperature"):
        if not params[key] >= 0:
            raise ShadowError(f"router kv_aware: {key} must be >= 0, got {params[key]}")
    if params["score"] not in ("prefix", "cost"):
        raise ShadowError(f"router kv_aware: score must be prefix or cost, got "
                          f"{params['score']!r}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    if params["score"] == "cost":
        return KvAwareCost(replicas, params, ctx.block_size)
    return KvAware(replicas, params)
