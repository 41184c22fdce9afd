"""``dynamo``: Dynamo's KV router cost, the replica with the lowest wins (temperature 0).

``ai-dynamo/dynamo`` ``lib/kv-router/src/scheduling/selector/default.rs`` (``worker_logit``):

    credit = overlap_score_credit * decay * device_overlap_blocks
    cost   = prefill_load_scale * max(0, raw_prefill_blocks - credit)
           + decode_blocks + decode_active_request_weight * active_requests

``raw_prefill_blocks`` is (the prompt tokens of the replica's requests still in prefill + this
prompt's tokens) / block size; ``decode_blocks`` the blocks of the replica's requests in flight
(the router's active-block tracking); ``device_overlap_blocks`` the contiguous prefix its
KV-event index holds (:mod:`shadow.sim.fleet.index`); ``decay`` is 1 unless
``overlap_score_credit_decay`` > 0, then ``1 / (1 + decay_k * excess / request_blocks)`` with
``excess`` the replica's prefill blocks above the least loaded one's.  Defaults
(``lib/kv-router/src/scheduling/config.rs``): credit 1.0, decay 0.0, scale 1.0, active-request
weight 0.0, temperature 0.  At temperature 0 the lowest cost wins, ties by a draw
(``minimum_cost_index``: reservoir sampling, seeded here); above 0 a softmax over the min-max
normalised costs divided by the temperature (``softmax_sample_index``).  Host and disk tiers,
the shared cache and the queue's admission policies are left out.
"""

from __future__ import annotations

import math
import random

from shadow.errors import ShadowError
from shadow.sim.fleet.index import EventIndex, IndexedRouter
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="Dynamo KV router: overlap credit against prefill + decode blocks, argmin",
    source="ai-dynamo/dynamo lib/kv-router/src/scheduling/selector/default.rs (worker_logit, "
           "minimum_cost_index, softmax_sample_index); scheduling/config.rs (defaults)",
    defaults="overlap_score_credit=1.0,overlap_score_credit_decay=0.0,prefill_load_scale=1.0,"
             "decode_active_request_weight=0.0,temperature=0.0,lag=0.0,seed=0",
    reads_caches=True,
    needs_block_size="it counts blocks of tokens",
)


class Dynamo(IndexedRouter):

    def __init__(self, replicas: int, params: dict, block_size: int) -> None:
        self.n = replicas
        self.credit = float(params["overlap_score_credit"])
        self.decay = float(params["overlap_score_credit_decay"])
        self.scale = float(params["prefill_load_scale"])
        self.w_active = float(params["decode_active_request_weight"])
        self.temperature = float(params["temperature"])
        self.block_size = max(block_size, 1)
        self.index = EventIndex(replicas, float(params["lag"]), False, 0.0)
        self.rng = random.Random(int(params["seed"]))

    def costs(self, q: Query, view: FleetView) -> list[float]:
        B = self.block_size
        overlap = self.index.prefix(q, view) if len(q.blocks) else [0] * self.n
        prefill = [view.prefill_tokens(r) for r in range(self.n)]
        low = min(prefill)
        tokens = q.input_tokens if q.input_tokens > 0 else len(q.blocks) * B
        request_blocks = max(tokens / B, 1e-9)
        out = []
        for r in range(self.n):
            decay = 1.0
            if self.decay > 0:
                decay = 1.0 / (1.0 + self.decay * ((prefill[r] - low) / B) / request_blocks)
            credit = self.credit * decay * int(overlap[r])
            raw = (prefill[r] + tokens) / B
            out.append(self.scale * max(0.0, raw - credit) + view.decode_blocks(r)
                       + self.w_active * view.in_flight(r))
        return out

    def route(self, q: Query, view: FleetView) -> int:
        c = self.costs(q, view)
        if self.temperature <= 0:
            best, ties, row = math.inf, 0, 0
            for r, v in enumerate(c):
                if v < best:
                    best, ties, row = v, 1, r
                elif v == best:
                    ties += 1
                    if self.rng.randrange(ties) == 0:
                        row = r
            return row
        lo, hi = min(c), max(c)
        if lo == hi:
            p = [1.0] * self.n
        else:
            p = [math.exp(-(v - lo) / (hi - lo) / self.temperature) for v in c]
        x = self.rng.random() * sum(p)
        acc = 0.0
        for r, w in enumerate(p):
            acc += w
            if x <= acc:
                return r
        return self.n - 1


def check(params: dict) -> None:
    if not 0.0 <= params["overlap_score_credit"] <= 1.0:
        raise ShadowError(f"router dynamo: overlap_score_credit must be between 0.0 and 1.0, "
                          f"got {params['overlap_score_credit']}")
    for key in ("overlap_score_credit_decay", "prefill_load_scale",
                "decode_active_request_weight", "temperature", "lag"):
        if not params[key] >= 0:
            raise ShadowError(f"router dynamo: {key} must be >= 0, got {params[key]}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return Dynamo(replicas, params, ctx.block_size)
