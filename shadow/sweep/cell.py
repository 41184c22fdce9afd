"""The real cell function: stream one trace through one simulated cache, return its RESULT line.

Memory is the cache plus one batch of the trace (constant in the trace's length for lcp input), so
a machine can run as many cells at once as it has cores.  Imported in the worker (a pool process or
a Ray task), never needed by the driver.
"""

from __future__ import annotations

import os

from shadow.errors import ShadowError
from shadow.sweep.plan import Cell


def run_cell(cell: Cell) -> str:
    """Simulate ``cell`` and return the simulator's RESULT line(s) for it."""
    # NOTE: imported here so the driver (and `shadow sweep --help`) never loads the extensions.
    from shadow.sim.core.drive import run_trace, sim_decode_threads
    from shadow.sim.timing.service import parse_service
    from shadow.sim.core.simulator import CacheSpec, Simulator
    from shadow.sim.timing.run import run_trace_recorded
    from shadow.trace import open_trace

    if not os.path.isfile(cell.trace):
        raise ShadowError(f"{cell.trace}: no such trace file (with --executor ray the path must "
                          f"exist on every node)")
    timing, _, service = cell.timing.partition(":")
    if cell.tier:
        return _run_tier_cell(cell, timing, service)
    with open_trace(cell.trace, allow_truncated=cell.allow_truncated, block_id=cell.block_id,
                    decode_threads=sim_decode_threads()) as tr:
        # NOTE: as `shadow simulate --timing recorded|model`: vLLM's block rules (--lookup vllm)
        timed = timing != "serial"
        sim = Simulator([CacheSpec(cell.algo, cell.capacity, cell.params)],
                        cost_model=cell.cost_model, pin=cell.pin, replay_order=cell.replay_order,
                        verify=True, trace_name=cell.trace_name, block_id=cell.block_id,
                        lookup="vllm" if timed else "all", category=cell.category,
                        block_size_tokens=tr.header.block_size_tokens)
        if timed:
            run_trace_recorded(sim, tr, cell.trace, tr.header.block_size_tokens,
                               service=parse_service(service) if timing == "model" else None)
        else:
            run_trace(sim, tr, cell.trace)
    results = sim.results()
    for r in results:
        if r.error:
            # NOTE: a run that failed its verify step has untrustworthy numbers: no cell file.
            raise ShadowError(f"{cell.trace_name}: {r.spec.label} cache {r.spec.capacity}: {r.error}")
    return "\n".join(r.result_line() for r in results)


def _run_tier_cell(cell: Cell, timing: str, service: str) -> str:
    """A cell with an offload tier: ``shadow simulate --tier`` for its one cache and tier."""
    from shadow.sim.cost.models import parse_cost_model
    from shadow.sim.timing.service import parse_service
    from shadow.sim.core.simulator import CacheSpec, Simulator
    from shadow.sim.tiers.model import kv_bytes_per_block, parse_tiers
    from shadow.sim.tiers.run import run_with_tiers
    from shadow.sim.timing.run import SerialOrder
    from shadow.trace import open_trace

    tiers = parse_tiers(cell.tier)
    cost = parse_cost_model(cell.cost_model)
    with open_trace(cell.trace, allow_truncated=cell.allow_truncated,
                    block_id=cell.block_id) as tr:
        B = tr.header.block_size_tokens
        if not B:
            raise ShadowError(f"{cell.trace}: a tier needs the block size in tokens, which the "
                              f"trace's header does not give")
        block_bytes = None
        if cell.kv_bytes.isdigit():
            block_bytes = int(cell.kv_bytes)
        elif cell.kv_bytes:
            cfg, _, dtype = cell.kv_bytes.partition(",")
            block_bytes = kv_bytes_per_block(cfg, B, dtype or "auto")
        sim = Simulator([CacheSpec(cell.algo, cell.capacity, cell.params)], cost_model=cost,
                        pin=cell.pin, replay_order=cell.replay_order, verify=True,
                        trace_name=cell.trace_name, block_id=cell.block_id, lookup="vllm",
                        block_size_tokens=B, category=cell.category)
        svc = (parse_service(service) if timing == "model" else None if timing == "recorded"
               else SerialOrder())
        tier_results = run_with_tiers(sim, tr, cell.trace, B, tiers, block_bytes, cost,
                                      service=svc)
    (r,) = sim.results()
    if r.error:
        raise ShadowError(f"{cell.trace_name}: {r.spec.label} cache {r.spec.capacity}: {r.error}")
    return "\n".join(f"{r.result_line()} {t.suffix()}" for t in tier_results)
