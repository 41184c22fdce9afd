"""``shadow simulate --tier``: every shadow cache with an offload tier behind it (docs/tiers.md).

Tier 1 runs through the live path under vLLM's block rules (shadow/sim/timing.py: serial, or
``--timing recorded|model``), which gives each admission's GPU prefix hit per cache; each
(cache, tier) pair then serves the requests in admission order through the tier model
(shadow/sim/tierloop.pyx, the compiled form of shadow/sim/tier.py).  A tier never changes tier 1: vLLM's loaded blocks enter the GPU cache as
computed ones would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shadow.sim.cost import CostModel
from shadow.sim.results import CacheSpec
from shadow.sim.tier import TierSpec
from shadow.sim.timing import _load, load_fields, run_trace_recorded

#: The tier keys a RESULT line gains (after every other key), in this order.
TIER_KEYS = ("tier", "tier_chunks", "tier_chunk_blocks", "tier_block_bytes", "tier_hit_ratio",
             "tier_compute_saving_ratio", "tier_hit_tokens",
             "tier_loaded_bytes", "tier_stored_bytes", "tier_evictions", "tier_store_failures",
             "tier_load_s", "tier_recompute_s")


@dataclass
class TierResult:
    """One (cache, tier) pair after a run.  ``hit_blocks`` are the tier's hit tokens in
    blocks; ``recompute_s`` is the time the loaded blocks would take to compute under a cost
    model in microseconds (``fit:``), else None; ``saved_cost`` is the cost model's cost of the
    loaded blocks, ``total_cost`` the cache's (``compute_saving_ratio``'s denominator)."""

    spec: CacheSpec
    tier: TierSpec
    n_chunks: int
    block_bytes: int | None
    hit_tokens: int = 0
    loaded_chunks: int = 0
    stored_chunks: int = 0
    evictions: int = 0
    store_failures: int = 0
    recompute_us: float | None = None
    n_blocks: int = 0
    block_tokens: int = 1
    saved_cost: float = 0.0
    total_cost: float = 0.0

    @property
    def hit_blocks(self) -> float:
        return self.hit_tokens / self.block_tokens

    def _bytes(self, chunks: int) -> int | None:
        if self.block_bytes is None:
            return None
        return chunks * self.tier.blocks_per_chunk * self.block_bytes

    @property
    def loaded_bytes(self) -> int | None:
        return self._bytes(self.loaded_chunks)

    @property
    def load_s(self) -> float | None:
        b = self.loaded_bytes
        return None if b is None else b / (self.tier.bandwidth_gbps * 1e9)

    def fields(self) -> dict[str, object]:
        def opt(v, fmt):
            return "na" if v is None else format(v, fmt)
        return {
            "tier": self.tier.label,
            "tier_chunks": self.n_chunks,
            "tier_chunk_blocks": self.tier.blocks_per_chunk,
            "tier_block_bytes": opt(self.block_bytes, "d"),
            "tier_hit_ratio": f"{self.hit_blocks / self.n_blocks if self.n_blocks else 0.0:.6f}",
            "tier_compute_saving_ratio":
                f"{self.saved_cost / self.total_cost if self.total_cost else 0.0:.6f}",
            "tier_hit_tokens": self.hit_tokens,
            "tier_loaded_bytes": opt(self.loaded_bytes, "d"),
            "tier_stored_bytes": opt(self._bytes(self.stored_chunks), "d"),
            "tier_evictions": self.evictions,
            "tier_store_failures": self.store_failures,
            "tier_load_s": opt(self.load_s, ".6g"),
            "tier_recompute_s": opt(None if self.recompute_us is None
                                    else self.recompute_us / 1e6, ".6g"),
        }

    def suffix(self) -> str:
        f = self.fields()
        return " ".join(f"{k}={f[k]}" for k in TIER_KEYS)


def run_with_tiers(sim, tr, path: str | os.PathLike[str], block_tokens: int,
                   tiers: list[TierSpec], block_bytes: int | None, cost: CostModel,
                   service=None, progress=None) -> list[TierResult]:
    """Serve the trace ``tr`` (an open trace or its batches, read once) through ``sim``'s caches
    (closing ``sim``) at the times ``service`` gives (:class:`SerialOrder`, a ``ServiceModel``,
    or None: the recorded times), then each cache's admissions through each tier; one
    :class:`TierResult` per (cache, tier), caches in ``sim.specs`` order, tiers inside."""
    loaded = rec, off, ids = _load(tr, load_fields(sim))
    n = int(off.shape[0]) - 1
    K = len(sim.specs)
    hits = np.full((n, K), -1, dtype=np.int64)
    starts = np.zeros(n, dtype=np.int64)
    run_trace_recorded(sim, loaded, path, block_tokens, progress=progress, prefix_hits=hits,
                       service=service, starts=starts)
    from shadow.sim.tierloop import ChunkTier

    order = np.argsort(starts, kind="stable")
    inp = rec["input_length"]
    in_us = cost.name.startswith("fit:")
    max_blocks = int(np.max(np.diff(off))) if n else 0
    pos_cost = cost.costs(max_blocks)
    out = []
    cache_results = sim.results()
    for k, spec in enumerate(sim.specs):
        for t in tiers:
            nc = t.n_chunks(block_bytes)
            tier = ChunkTier(nc, t.policy, t.store_threshold, t.max_tracker_size)
            hit, loaded, stored, saved = tier.serve_all(ids, off, inp, hits[:, k], order,
                                                        block_tokens, t.blocks_per_chunk,
                                                        pos_cost)
            out.append(TierResult(spec, t, nc, block_bytes, hit_tokens=hit, loaded_chunks=loaded,
                                  stored_chunks=stored, evictions=tier.n_evicted,
                                  store_failures=tier.n_store_failed,
                                  recompute_us=saved if in_us else None,
                                  n_blocks=cache_results[k].n_blocks, block_tokens=block_tokens,
                                  saved_cost=saved, total_cost=cache_results[k].total_cost))
    return out
