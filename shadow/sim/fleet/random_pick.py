"""``random``: a replica drawn uniformly, from a seeded generator (``seed``).

vllm-router 0.1.17 ``src/policies/random.rs:34-35`` (``rng.random_range(0..healthy)``); the real
router's thread generator is not seeded, so only the distribution is the same.  The draws are
numpy's PCG64 from ``seed``, all made at once (``route_all``) or one per call (``route``).
"""

from __future__ import annotations

import numpy as np

from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="a replica drawn uniformly (seeded)",
    source="vllm-router 0.1.17 src/policies/random.rs:34-35",
    defaults="seed=0",
)


class RandomPick(Router):
    def __init__(self, replicas: int, seed: int) -> None:
        self.n = replicas
        self.rng = np.random.default_rng(seed)

    def route(self, q: Query, view: FleetView) -> int:
        return int(self.rng.integers(self.n))

    def route_all(self, n: int) -> np.ndarray:
        return self.rng.integers(self.n, size=n, dtype=np.int64)


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return RandomPick(replicas, int(params["seed"]))
