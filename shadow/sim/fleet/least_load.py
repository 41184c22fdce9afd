"""``least_load``: the replica with the fewest requests in flight; ties by a seeded draw.

The load-balancing rule that vllm-router 0.1.17 falls back to (``cache_aware.rs:448-453``
``least_loaded``: ``min_by_key(worker.load())``, the router's in-flight counter), as a router of
its own.  The real fallback takes the first replica among equals; here ties are drawn (``seed``)
so that an idle fleet is not filled from replica 0.
"""

from __future__ import annotations

import random

from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the replica with the fewest requests in flight",
    source="vllm-router 0.1.17 src/policies/cache_aware.rs:448-453 (least_loaded)",
    defaults="seed=0",
    needs_load=True,
)


def least_loaded(view: FleetView, rng: random.Random | None) -> int:
    """The replica with the fewest requests in flight: the first among equals without ``rng``
    (vllm-router's ``min_by_key``), else one drawn among them."""
    loads = [view.in_flight(r) for r in range(view.replicas)]
    low = min(loads)
    if rng is None:
        return loads.index(low)
    ties = [r for r, v in enumerate(loads) if v == low]
    return ties[0] if len(ties) == 1 else ties[rng.randrange(len(ties))]


class LeastLoad(Router):
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def route(self, q: Query, view: FleetView) -> int:
        return least_loaded(view, self.rng)


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return LeastLoad(int(params["seed"]))
