"""The click options that describe a run (:class:`shadow.sim.run.RunSpec`), one decorator shared
by ``simulate``, ``sweep`` and ``mrc``.  Here, not in :mod:`shadow.cli_options` (the parsers and
options every room shares): their choices and help come from the simulator (cost models, timing
modes, the service model's defaults, category folds), and the shared modules import no room
(docs/design.md)."""

from __future__ import annotations

from typing import Callable

import click

from shadow.cli_options import allow_truncated_option, block_id_option
from shadow.sim.category import CATEGORY_MODES, DEFAULT_CATEGORY
from shadow.sim.cost.models import COST_MODELS
from shadow.sim.timing.run import TIMING_MODES
from shadow.sim.timing.service import SERVICE_DEFAULTS


def category_option() -> Callable:
    return click.option(
        "--category", type=click.Choice(list(CATEGORY_MODES)), default=DEFAULT_CATEGORY,
        show_default=True,
        help="How the trace's type and turn fold into the request category that policies "
             "reading the request context compare (workload_aware...); none = one class, "
             "type+first-turn = type x first or later turn (docs/sim.md, Request context).",
    )


def run_options(*, many: bool = False, only: tuple[str, ...] | None = None) -> Callable:
    """The options that describe a run (:class:`shadow.sim.run.RunSpec`), shared by ``simulate``
    and ``sweep``: cost model, pins, replay order, timing and service, tiers and the bytes of a
    block, the fleet (replicas, routers and their parameters), category, block-id mode,
    truncation.  ``many``: ``--cost-model`` and ``--timing`` are repeatable (a sweep runs one
    cell per value) and named ``cost_models`` and ``timings``, ``--replicas`` is a comma list
    (one cell per count).  ``only``: just the options with these flags (``shadow mrc``: the
    settings a curve has)."""
    each = " (repeatable: one cell per value)" if many else ""
    options = [
        click.option("--cost-model", "cost_models" if many else "cost_model", multiple=many,
                     default=("uniform",) if many else "uniform", show_default=True,
                     help=f"{', '.join(COST_MODELS)} (docs/sim.md, Cost models){each}."),
        click.option("--no-pin", is_flag=True,
                     help="Let eviction take blocks the arriving request holds."),
        click.option("--replay-order", type=click.Choice(["deepest-first", "prefix-order"]),
                     default="deepest-first", show_default=True,
                     help="Order of the access phase: from a request's deepest block or from "
                          "its first."),
        click.option("--timing", "timings" if many else "timing", multiple=many,
                     type=click.Choice(list(TIMING_MODES)),
                     default=("serial",) if many else "serial", show_default=True,
                     help="serial: each request whole, one after another; recorded: admit at "
                          "each request's start time, release at its completion, as the live "
                          "connector does (a recording; vLLM's block rules, --lookup vllm); "
                          f"model: as recorded, the start and completion times from --service "
                          f"and the arrival times{each}."),
        click.option("--service", default=None, metavar="SPEC",
                     help="--timing model's service model: prefill=TOKENS_PER_S,"
                          "decode=TOKENS_PER_S,concurrency=N or fit:REPORT (replay's "
                          f"report.json) [{SERVICE_DEFAULTS}]."),
        click.option("--tier", "tiers" if many else "tier", multiple=True,
                     metavar="MEDIUM:SIZES:POLICY[:k=v,...]",
                     help="An offload tier behind every cache, as vLLM's KV offloading "
                          "(docs/tiers.md): cpu|disk, sizes 64g,512MiB or 8kblk, lru|arc, options "
                          "bw=GB/s,chunk=BLOCKS,threshold=N,tracker=N; a chain CPU_TIER>DISK_TIER "
                          "puts a disk tier behind the host tier; repeatable"
                          f"{' (one cell per cache and tier size)' if many else ''}.  Runs "
                          "vLLM's block rules (--lookup vllm)."),
        click.option("--bytes-per-block", type=int, default=None,
                     help="KV bytes of one engine block (--tier sizes, capacities in GiB)."),
        click.option("--kv-config", default=None, metavar="CONFIG[,DTYPE]",
                     help="A model's config.json (and KV cache dtype, default auto = 2 bytes): "
                          "the bytes of a block (--tier sizes, capacities in GiB), from the "
                          "trace's block size."),
        click.option("--replicas", default="1" if many else 1, type=str if many else int,
                     show_default=True, metavar="N[,N...]" if many else "N",
                     help="Engines behind each --router (1 to 4096); each cache's size is per "
                          "replica (docs/fleet.md)"
                          f"{' (a comma list: one cell per count)' if many else ''}."),
        click.option("--router", default=None, metavar="R[,R...]",
                     help="Routers, comma list (simulate --list-routers): every cache runs as a "
                          "fleet of --replicas behind each; the RESULT lines gain the fleet keys"
                          f"{' (one cell per router)' if many else ''}."),
        click.option("--router-params", "router_params", multiple=True,
                     metavar="[ROUTER:]k=v,...",
                     help="Router parameters k=v,k=v for every router, or router:k=v,... for "
                          "one; repeatable."),
        category_option(),
        block_id_option(),
        allow_truncated_option(),
    ]

    if only is not None:
        def flag(option: Callable) -> str:
            @option
            def probe() -> None:
                pass
            return probe.__click_params__[0].opts[0]
        options = [o for o in options if flag(o) in only]

    def decorate(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f
    return decorate
