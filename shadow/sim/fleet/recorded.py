"""``recorded``: each request goes where a merged recording says it went.

A merged recording (``shadow convert`` of the replicas' recordings) keeps, per request, the
replica the real router chose; this router replays those choices, so the fleet's caches see the
traffic each engine saw.  A trace without that column is refused.
"""

from __future__ import annotations

from shadow.errors import ShadowError
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the replica each request really went to (a merged recording)",
    source="the recording itself (docs/lcp.md, the replica of each record)",
)


class Recorded(Router):
    def __init__(self, replicas: int) -> None:
        self.n = replicas

    def route(self, q: Query, view: FleetView) -> int:
        if not 0 <= q.replica < self.n:
            raise ShadowError(f"router recorded: request {q.index} names replica {q.replica}, "
                              f"not one of the {self.n} replicas")
        return q.replica


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return Recorded(replicas)
