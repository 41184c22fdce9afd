"""``random``: a replica drawn uniformly, from a seeded generator (``seed``).

vllm-router 0.1.17 ``src/policies/random.rs:34-35`` (``rng.random_range(0..healthy)``); the real
router's thread generator is not seeded, so only the distribution is the same.
"""

from __future__ import annotations

import random

from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="a replica drawn uniformly (seeded)",
    source="vllm-router 0.1.17 src/policies/random.rs:34-35",
    defaults="seed=0",
)


class RandomPick(Router):
    def __init__(self, replicas: int, seed: int) -> None:
        self.n = replicas
        self.rng = random.Random(seed)

    def route(self, q: Query, view: FleetView) -> int:
        return self.rng.randrange(self.n)


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return RandomPick(replicas, int(params["seed"]))
