"""``llm_d``: llm-d's endpoint picker with the precise prefix-cache scorer, the queue scorer and
the KV-utilization scorer, weights 2/1/1, the highest total wins.

* ``llm-d/llm-d-kv-cache`` ``pkg/kvcache/kvblock_scorer.go`` (``LongestPrefixScorer``): walk the
  prompt's blocks from block 0, keeping the pods that hold every block so far; each block adds
  the highest tier weight among a pod's copies (GPU 1.0; only the GPU tier is modelled).  The
  producer's ``matchBlocks / totalBlocks`` is the prefix scorer's score (``w = 0``, the default,
  ``scorer/prefix/README.md``).  The index is fed by KV events (:mod:`shadow.sim.fleet.index`,
  ``lag`` seconds late; ``speculative=true`` adds the chosen pod's blocks for ``ttl``).
* queue scorer: ``(maxQ - q) / (maxQ - minQ)``, 1 for every pod when all queues are equal; the
  queue is the requests routed to a replica that have not started.
* ``kv-cache-utilization-scorer``: ``1 - usage``, usage the share of the replica's cache that
  running requests hold (vLLM's ``kv_cache_usage``).
* ``llm-d/llm-d-router`` ``pkg/epp/scheduling/scheduler_profile.go`` (``runScorerPlugins``):
  per pod ``sum(weight * clamp(score, 0, 1))`` with the sample weights ``prefix_weight=2``,
  ``queue_weight=1``, ``kv_weight=1`` (``deploy/config/epp-precise-prefix-cache-config.yaml``);
  ``max-score-picker`` shuffles the pods first, so ties go to a seeded draw.
* the load signals are scraped every ``refresh`` seconds (50 ms, as BLIS models llm-d): the
  queue and usage a decision reads are those of the last scrape.
"""

from __future__ import annotations

import random

from shadow.errors import ShadowError
from shadow.sim.fleet.index import EventIndex, IndexedRouter
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="llm-d EPP: precise prefix-cache + queue + KV-utilization scorers (2/1/1)",
    source="llm-d/llm-d-router pkg/epp/scheduling/scheduler_profile.go (runScorerPlugins); "
           "llm-d/llm-d-kv-cache pkg/kvcache/kvblock_scorer.go (LongestPrefixScorer)",
    defaults="prefix_weight=2.0,queue_weight=1.0,kv_weight=1.0,refresh=0.05,lag=0.0,"
             "speculative=false,ttl=2.0,seed=0",
    reads_caches=True,
)


class LlmD(IndexedRouter):

    def __init__(self, replicas: int, params: dict) -> None:
        self.n = replicas
        self.w_prefix = float(params["prefix_weight"])
        self.w_queue = float(params["queue_weight"])
        self.w_kv = float(params["kv_weight"])
        self.refresh = float(params["refresh"])
        self.index = EventIndex(replicas, float(params["lag"]), bool(params["speculative"]),
                                float(params["ttl"]))
        self.rng = random.Random(int(params["seed"]))
        self.scraped_at: float | None = None
        self.queues = [0] * replicas
        self.usage = [0.0] * replicas

    def _scrape(self, t: float, view: FleetView) -> None:
        if (self.scraped_at is not None and self.refresh > 0 and t >= 0
                and t - self.scraped_at < self.refresh):
            return
        self.scraped_at = t
        self.queues = [view.waiting(r) for r in range(self.n)]
        self.usage = [view.kv_usage(r) for r in range(self.n)]

    def scores(self, q: Query, view: FleetView) -> list[float]:
        """Each replica's weighted total (``runScorerPlugins``)."""
        self._scrape(q.t, view)
        total = len(q.blocks)
        match = self.index.prefix(q, view) if total else [0] * self.n
        lo, hi = min(self.queues), max(self.queues)
        out = []
        for r in range(self.n):
            prefix = match[r] / total if total else 0.0
            queue = 1.0 if hi == lo else (hi - self.queues[r]) / (hi - lo)
            kv = 1.0 - self.usage[r]
            out.append(self.w_prefix * _clamp(prefix) + self.w_queue * _clamp(queue)
                       + self.w_kv * _clamp(kv))
        return out

    def route(self, q: Query, view: FleetView) -> int:
        s = self.scores(q, view)
        best = max(s)
        ties = [r for r in range(self.n) if s[r] == best]
        pick = ties[0] if len(ties) == 1 else ties[self.rng.randrange(len(ties))]
        if self.index.speculative and len(q.blocks):
            self.index.speculate(pick, q.blocks, q.t)
        return pick


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def check(params: dict) -> None:
    for key in ("prefix_weight", "queue_weight", "kv_weight", "refresh", "lag", "ttl"):
        if not params[key] >= 0:
            raise ShadowError(f"router llm_d: {key} must be >= 0, got {params[key]}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return LlmD(replicas, params)
