"""``shadow simulate --tier``: every shadow cache with an offload tier behind it (docs/tiers.md).

Tier 1 runs through the live path under vLLM's block rules (shadow/sim/timing/run.py: serial, or
``--timing recorded|model``), which gives each admission's GPU prefix hit per cache; each
(cache, tier) pair then serves the requests in admission order through the tier model
(shadow/sim/tiers/loop.pyx, the compiled form of shadow/sim/tiers/model.py).  A tier never changes tier 1: vLLM's loaded blocks enter the GPU cache as
computed ones would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from shadow.sim.cost.models import US_PER_UNIT, CostModel
from shadow.sim.core.results import CacheSpec
from shadow.sim.tiers.model import TierChainSpec, TierSpec
from shadow.sim.timing.run import _load, load_fields, run_trace_recorded

#: The tier keys a RESULT line gains (after every other key), in this order.
TIER_KEYS = ("tier", "tier_chunks", "tier_chunk_blocks", "tier_block_bytes", "tier_hit_ratio",
             "tier_compute_saving_ratio", "tier_hit_tokens",
             "tier_loaded_bytes", "tier_stored_bytes", "tier_evictions", "tier_store_failures",
             "tier_load_s", "tier_recompute_s")


#: The keys a chain's RESULT line gains after :data:`TIER_KEYS` (which keep meaning the host
#: tier): the disk tier's, then the promotions that found no room and the lookups that gave up.
TIER2_KEYS = ("tier2",) + tuple(f"tier2_{k[len('tier_'):]}" for k in TIER_KEYS[1:]) + (
    "tier2_promotion_failures", "tier2_lookups_given_up")


@dataclass
class TierResult:
    """One (cache, tier) pair after a run.  ``hit_blocks`` are the tier's hit tokens in
    blocks; ``recompute_s`` is the time the loaded blocks would take to compute under a cost
    model in time units (``fit:``, ``profile:``: :data:`US_PER_UNIT`), else None; ``saved_cost`` is the cost model's cost of the
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

    @property
    def parts(self) -> tuple["TierResult", ...]:
        """The tiers of this result, front first (one here)."""
        return (self,)


@dataclass
class DiskTierResult(TierResult):
    """The disk tier of a chain: its hit tokens, loaded chunks and saved cost are those of the
    chunks promoted for the requests that loaded them; a load takes two hops (disk to host at
    this tier's bandwidth, host to GPU at ``host_gbps``)."""

    host_gbps: float = 0.0

    @property
    def load_s(self) -> float | None:
        b = self.loaded_bytes
        return None if b is None else b / (self.tier.bandwidth_gbps * 1e9) + \
            b / (self.host_gbps * 1e9)


@dataclass
class ChainResult:
    """One (cache, chain) pair after a run: the host tier's share (``first``), the disk
    tier's (``second``), and the chain's promotion failures and given-up lookups."""

    spec: CacheSpec
    first: TierResult
    second: DiskTierResult
    promotion_failures: int = 0
    lookups_given_up: int = 0

    @property
    def parts(self) -> tuple[TierResult, ...]:
        return (self.first, self.second)

    def fields(self) -> dict[str, object]:
        f = self.first.fields()
        f2 = self.second.fields()
        f.update({k2: f2[k] for k, k2 in zip(TIER_KEYS, TIER2_KEYS)})
        f["tier2_promotion_failures"] = self.promotion_failures
        f["tier2_lookups_given_up"] = self.lookups_given_up
        return f

    def suffix(self) -> str:
        f = self.fields()
        return " ".join(f"{k}={f[k]}" for k in TIER_KEYS + TIER2_KEYS)


def run_with_tiers(sim, tr, path: str | os.PathLike[str], block_tokens: int,
                   tiers: list[TierSpec | TierChainSpec], block_bytes: int | None,
                   cost: CostModel, service=None,
                   progress=None, meter=None) -> list[TierResult | ChainResult]:
    """Serve the trace ``tr`` (an open trace or its batches, read once) through ``sim``'s caches
    (closing ``sim``) at the times ``service`` gives (:class:`SerialOrder`, a ``ServiceModel``,
    or None: the recorded times), then each cache's admissions through each tier or chain; one
    :class:`TierResult` or :class:`ChainResult` per (cache, tier), caches in ``sim.specs``
    order, tiers inside.  ``meter``: as :func:`run_trace_recorded`'s (each cache's own
    first-miss hits; the tiers' loads are not credited)."""
    loaded = rec, off, ids = _load(tr, load_fields(sim))
    n = int(off.shape[0]) - 1
    K = len(sim.specs)
    hits = np.full((n, K), -1, dtype=np.int64)
    starts = np.zeros(n, dtype=np.int64)
    run_trace_recorded(sim, loaded, path, block_tokens, progress=progress, prefix_hits=hits,
                       service=service, starts=starts, meter=meter)
    from shadow.sim.tiers.loop import ChunkTier

    order = np.argsort(starts, kind="stable")
    inp = rec["input_length"]
    us = US_PER_UNIT.get(cost.unit)
    max_blocks = int(np.max(np.diff(off))) if n else 0
    pos_cost = cost.costs(max_blocks)
    out = []
    cache_results = sim.results()
    for k, spec in enumerate(sim.specs):
        for t in tiers:
            if isinstance(t, TierChainSpec):
                out.append(_run_chain(t, spec, cache_results[k], ids, off, inp, hits[:, k],
                                      order, block_tokens, block_bytes, pos_cost, us))
                continue
            nc = t.n_chunks(block_bytes)
            tier = ChunkTier(nc, t.policy, t.store_threshold, t.max_tracker_size)
            hit, loaded, stored, saved = tier.serve_all(ids, off, inp, hits[:, k], order,
                                                        block_tokens, t.blocks_per_chunk,
                                                        pos_cost)
            out.append(TierResult(spec, t, nc, block_bytes, hit_tokens=hit, loaded_chunks=loaded,
                                  stored_chunks=stored, evictions=tier.n_evicted,
                                  store_failures=tier.n_store_failed,
                                  recompute_us=saved * us if us else None,
                                  n_blocks=cache_results[k].n_blocks, block_tokens=block_tokens,
                                  saved_cost=saved, total_cost=cache_results[k].total_cost))
    return out


def _run_chain(t: TierChainSpec, spec: CacheSpec, cache_result, ids, off, inp, hits, order,
               block_tokens: int, block_bytes: int | None, pos_cost,
               us: float | None) -> ChainResult:
    """One cache's admissions through one chain (tiers.loop.ChunkChain)."""
    from shadow.sim.tiers.loop import ChunkChain, ChunkTier

    a, b = t.first, t.second
    n1, n2 = a.n_chunks(block_bytes), b.n_chunks(block_bytes)
    chain = ChunkChain(ChunkTier(n1, a.policy, a.store_threshold, a.max_tracker_size),
                       ChunkTier(n2, b.policy))
    hit, disk_hit, loaded, promoted, stored, cascaded, saved1, saved2 = chain.serve_all(
        ids, off, inp, hits, order, block_tokens, a.blocks_per_chunk, pos_cost)
    common = dict(block_bytes=block_bytes, n_blocks=cache_result.n_blocks,
                  block_tokens=block_tokens, total_cost=cache_result.total_cost)
    first = TierResult(spec, a, n1, hit_tokens=hit - disk_hit, loaded_chunks=loaded - promoted,
                       stored_chunks=stored, evictions=chain.cpu.n_evicted,
                       store_failures=chain.cpu.n_store_failed,
                       recompute_us=saved1 * us if us else None, saved_cost=saved1, **common)
    second = DiskTierResult(spec, b, n2, hit_tokens=disk_hit, loaded_chunks=promoted,
                            stored_chunks=cascaded, evictions=chain.disk.n_evicted,
                            store_failures=chain.disk.n_store_failed,
                            recompute_us=saved2 * us if us else None, saved_cost=saved2,
                            host_gbps=a.bandwidth_gbps, **common)
    return ChainResult(spec, first, second, chain.n_promote_failed, chain.n_gave_up)
