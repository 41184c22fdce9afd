"""The exact curve of a whole trace in one pass (``shadow mrc``, ``shadow sweep --mrc``).

:func:`curve_of_trace` feeds every batch of an open trace to a
:class:`~shadow.sim.mrc.stack.StackPass` set up as ``shadow simulate`` would serve the trace with
``-a lru`` or ``-a vllm`` under the same :class:`~shadow.sim.run.RunSpec` (the lookup mode's
counted blocks and anonymous slots, the replay order, the cost model) and returns the
:class:`~shadow.sim.mrc.curve.Curve`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.core.results import CacheSpec
from shadow.sim.run import RunSpec
from shadow.sim.mrc.curve import Curve
from shadow.sim.mrc.stack import StackPass
from shadow.sim.engine.rules import LOOKUP_MODES, lookup_counts, vllm_anonymous_counts

#: Policies whose curve one pass gives exactly, and the recency each follows (docs/mrc.md).
#: ``vllm`` (vLLM's free queue, offline one request at a time) ranks blocks by release, tail
#: first: lru's deepest-first order whatever the replay order.
CURVE_ALGOS = ("lru", "vllm")


def check_setup(algo: str, lookup: str, replay_order: str) -> bool:
    """Whether the pass moves a request's deepest block first (one-line errors otherwise)."""
    if algo not in CURVE_ALGOS:
        raise ShadowError(f"-a {algo}: a one-pass curve exists for {', '.join(CURVE_ALGOS)} only "
                          f"(stack algorithms; docs/mrc.md)")
    if lookup not in LOOKUP_MODES:
        raise ShadowError(f"bad lookup mode {lookup!r} ({', '.join(LOOKUP_MODES)})")
    if replay_order not in ("deepest-first", "prefix-order"):
        raise ShadowError(f"bad replay order {replay_order!r} (deepest-first or prefix-order)")
    return algo == "vllm" or replay_order == "deepest-first"


def curve_spec(algo: str = "lru", **options) -> RunSpec:
    """The run a curve is of: ``simulate -a ALGO`` with ``options``
    (:meth:`shadow.sim.run.RunSpec.from_options`'s); one cache stands for the policy, since a
    curve has every size."""
    return RunSpec.from_options((CacheSpec(algo, 1),), **options)


def curve_of_trace(tr, path: str | os.PathLike[str], spec: RunSpec,
                   progress: Callable[[int, int], None] | None = None) -> Curve:
    """The exact curve of the open trace ``tr`` (read from ``path``) under ``spec``'s settings
    (:class:`shadow.sim.run.RunSpec`: its one cache's policy, the lookup, replay order and cost
    model; serial, without tiers), every batch in file order.

    ``progress(block accesses fed, requests fed)`` is called after each batch.
    """
    from shadow.sim.core.simulator import prefetched

    if spec.timing != "serial" or spec.tiers:
        raise ShadowError("a one-pass curve is of serial runs without tiers (docs/mrc.md)")
    spec = spec.bind(tr.header, path)
    algo, lookup, cost = spec.caches[0].policy, spec.lookup_mode, spec.cost
    deepest = check_setup(algo, lookup, spec.replay_order)
    bs = spec.block_size
    weighted = cost.name != "uniform"
    sp = StackPass(deepest, weighted)
    costs = np.ascontiguousarray(cost.costs(1024), dtype=np.float64)
    accesses = requests = 0
    for batch in prefetched(tr):
        n = batch.n_requests
        if n == 0:
            continue
        offsets = np.ascontiguousarray(batch.offsets, dtype=np.int64)
        lens = np.diff(offsets)
        if weighted and int(lens.max()) > len(costs):
            costs = np.ascontiguousarray(cost.costs(max(int(lens.max()), 2 * len(costs))),
                                         dtype=np.float64)
        nm = None if lookup == "all" else lookup_counts(batch.records, lens, lookup, bs)
        na = vllm_anonymous_counts(batch.records, lens, bs) if lookup == "vllm" else None
        sp.feed(offsets, np.ascontiguousarray(batch.block_ids, dtype=np.int64), nm, na, costs,
                int(batch.first_request))
        if progress is not None:
            accesses += len(batch.block_ids)
            requests += n
            progress(accesses, requests)
    if sp.n_blocks == 0:
        raise ShadowError(f"{path}: no block is looked up in its {sp.n_req} requests "
                          f"(--lookup {lookup}): no curve to draw")
    return Curve.from_pass(sp, algo=algo, lookup=lookup, replay_order=spec.replay_order,
                           cost_model=cost.name)
