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
blocks as its events report them, ``lag`` seconds late.  The released vllm-router 0.1.17 ranks
replicas by a prefill cost instead (``src/policies/kv_aware.rs`` there, lines 719-870); that
rule is not modelled here.
"""

from __future__ import annotations

from shadow.errors import ShadowError
from shadow.sim.fleet.index import EventIndex, IndexedRouter
from shadow.sim.fleet.least_load import least_loaded
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="the longest contiguous prefix in a KV-event index, else the least loaded",
    source="vllm-router@71af994 src/policies/kv_aware.rs:44-53,95-200; "
           "src/kv_index/scorer.rs (PrefixScorer::score), index.rs (speculative_insert) @2ec0ff0",
    defaults="speculative=true,ttl=2.0,lag=0.0",
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


def check(params: dict) -> None:
    for key in ("ttl", "lag"):
        if not params[key] >= 0:
            raise ShadowError(f"router kv_aware: {key} must be >= 0 seconds, got {params[key]}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return KvAware(replicas, params)
