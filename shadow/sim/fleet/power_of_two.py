"""``power_of_two``: two distinct replicas drawn at random, the one with fewer requests in flight
wins (the first drawn on a tie).

vllm-router 0.1.17 ``src/policies/power_of_two.rs:58-80``: ``idx1``, then ``idx2`` redrawn
until it differs, ``load1 <= load2`` keeps ``idx1``; the load is the router's in-flight counter
(``get_worker_load`` at line 28 falls back to ``worker.load()`` until a ``/get_load`` poll
fills its cache, which is not modelled).  One replica: always it.  Draws are seeded (``seed``).
"""

from __future__ import annotations

import random

from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the less loaded of two random replicas",
    source="vllm-router 0.1.17 src/policies/power_of_two.rs:58-80",
    defaults="seed=0",
    needs_load=True,
)


class PowerOfTwo(Router):
    def __init__(self, replicas: int, seed: int) -> None:
        self.n = replicas
        self.rng = random.Random(seed)

    def route(self, q: Query, view: FleetView) -> int:
        if self.n == 1:
            return 0
        a = self.rng.randrange(self.n)
        b = self.rng.randrange(self.n)
        while b == a:
            b = self.rng.randrange(self.n)
        return a if view.in_flight(a) <= view.in_flight(b) else b


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return PowerOfTwo(replicas, int(params["seed"]))
