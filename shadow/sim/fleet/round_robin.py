"""``round_robin``: request k goes to replica k mod N, in arrival order.

vllm-router 0.1.17 ``src/policies/round_robin.rs:39-40``: a counter taken with ``fetch_add``,
modulo the healthy workers (every replica is healthy here).
"""

from __future__ import annotations

import numpy as np

from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the next replica in turn",
    source="vllm-router 0.1.17 src/policies/round_robin.rs:39-40",
)


class RoundRobin(Router):
    def __init__(self, replicas: int) -> None:
        self.n = replicas
        self.count = 0

    def route(self, q: Query, view: FleetView) -> int:
        r = self.count % self.n
        self.count += 1
        return r

    def route_all(self, n: int) -> np.ndarray:
        out = (np.arange(n, dtype=np.int64) + self.count) % self.n
        self.count += n
        return out


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return RoundRobin(replicas)
