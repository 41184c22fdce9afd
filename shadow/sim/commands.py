"""``shadow simulate``: a thin click layer over :mod:`shadow.sim.run` (a :class:`RunSpec` from
the options, :func:`run` over the trace)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from shadow.atomic import atomic_open, check_writable
from shadow.cli_options import parse_name_list, parse_size_list, trace_option
from shadow.errors import ShadowError
from shadow.progress import progress_bar
from shadow.sim.params import check_name_list, split_named_params
from shadow.sim.registry import EXCLUDED, FAMILIES, POLICIES, is_built, policy_info
from shadow.sim.core.results import CacheSpec
from shadow.sim.options import run_options

log = logging.getLogger(__name__)

DEMO_ALGOS = "lru,fifo,clock,sieve,s3fifo,arc,gdsf,belady"
DEMO_SIZES = "2k,8k,32k"


def parse_algo_params(values: tuple[str, ...], algos: list[str]) -> dict[str, str]:
    """``--algo-params`` values: ``k=v,...`` for every algo, or ``algo:k=v,...`` for one."""
    return split_named_params(values, algos, POLICIES, option="--algo-params", listing="--algo")


def _append_atomically(path: str, lines: list[str]) -> None:
    """Append lines to ``path``: old content and new lines go to a temporary that replaces it
    (:func:`shadow.atomic.atomic_open`), so ``path`` never holds a part; its mode is kept."""
    with atomic_open(path, "w", append=True, parents=False, encoding="utf-8", newline="") as f:
        f.write("".join(line + "\n" for line in lines))


def _list_algos_lines() -> list[str]:
    """``--list-algos``: the policies grouped by family (registry.FAMILIES order; within a family,
    registry.POLICIES order), each with its pin behaviour and default parameters; then the
    libCacheSim policies left out and why."""
    by_family: dict[str, list[str]] = {f: [] for f in FAMILIES}
    # NOTE: the name column fits the longest name (and the excluded ones) plus two spaces
    width = max(len(n) for n in [*POLICIES, *EXCLUDED]) + 2
    for name in POLICIES:
        if not is_built(name):
            by_family.setdefault("not built yet", []).append(f"  {name}")
            continue
        spec = policy_info(name).spec
        notes = ["honours pins" if spec.honours_pins else "ignores pins"]
        if spec.needs_future:
            notes.append("needs the future")
        extra = f" [{spec.defaults}]" if spec.defaults else ""
        by_family[spec.family].append(f"  {name:<{width}s}{spec.description} "
                                      f"({', '.join(notes)}){extra}")
    lines = []
    for family, entries in by_family.items():
        if entries:
            lines.append(f"{family}:")
            lines.extend(entries)
    lines.append("excluded:")
    lines.extend(f"  {name:<{width}s}{why}" for name, why in EXCLUDED.items())
    return lines


def _size_label(n: int) -> str:
    for unit, div in (("g", 1024 ** 3), ("m", 1024 ** 2), ("k", 1024)):
        if n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def format_table(results, sizes: list[int], algos: list[str], cost_uniform: bool) -> str:
    """A readable policies x sizes table of hit ratios (and compute saving if costs differ)."""
    by = {(r.spec.policy, r.spec.capacity): r for r in results}
    lines = []
    metrics = [("block hit ratio", "block_hit_ratio"),
               ("prefix-only hit ratio (stop at first miss)", "prefix_hit_ratio")]
    if not cost_uniform:
        metrics.insert(1, ("compute saving ratio", "compute_saving_ratio"))
    for title, attr in metrics:
        lines.append(f"{title}:")
        lines.append(f"  {'policy':<28s}" + "".join(f"{_size_label(s):>10s}" for s in sizes))
        for a in algos:
            cells = []
            for s in sizes:
                r = by.get((a, s))
                cells.append(f"{'error':>10s}" if r is None or r.error else f"{getattr(r, attr):>10.4f}")
            lines.append(f"  {a:<28s}" + "".join(cells))
        lines.append("")
    return "\n".join(lines)


def format_tier_table(results, tier_results) -> str:
    """Per cache and tier: GPU prefix hits, tier hits, their sum (of looked-up blocks)."""
    gpu = {r.spec: r for r in results}
    lines = [f"{'cache':<28s} {'tier':<28s} {'gpu':>7s} {'tier':>7s} {'both':>7s} "
             f"{'loaded':>11s} {'load s':>9s}"]
    for r in tier_results:
        g = gpu[r.spec]
        both = g.prefix_hit_ratio
        # NOTE: a chain's tiers one row each, "both" summing the GPU and every tier so far
        for i, t in enumerate(r.parts):
            th = t.hit_blocks / g.n_blocks if g.n_blocks else 0.0
            both += th
            f = t.fields()
            lines.append(f"{t.spec.label + ' ' + _size_label(t.spec.capacity):<28s} "
                         f"{('> ' if i else '') + t.tier.label:<28s} "
                         f"{g.prefix_hit_ratio:7.4f} {th:7.4f} "
                         f"{both:7.4f} {f['tier_loaded_bytes']:>11s} "
                         f"{f['tier_load_s']:>9s}")
    return "\n".join(lines)


def _list_routers_lines() -> list[str]:
    """``--list-routers``: every router model (registry order) with what it reads, its default
    parameters and where its rules come from."""
    from shadow.sim.fleet.router import router_specs

    specs = router_specs()
    width = max(len(n) for n in specs) + 2
    lines = []
    for name, spec in specs.items():
        notes = [w for w, on in (("reads the caches", spec.reads_caches),
                                 ("needs --timing recorded|model", spec.needs_load)) if on]
        extra = f" [{spec.defaults}]" if spec.defaults else ""
        lines.append(f"  {name:<{width}s}{spec.description}"
                     f"{' (' + ', '.join(notes) + ')' if notes else ''}{extra}")
        lines.append(f"  {'':<{width}s}source: {spec.source}")
    return ["routers (docs/fleet.md):", *lines]


def format_fleet_table(fleet) -> str:
    """Per router and cache: the fleet's hit ratio, its replicas' spread and balance, the
    router index's peak (the RESULT line's fleet keys)."""
    lines = [f"{'router':<24s} {'cache':<20s} {'hit':>7s} {'rep min':>7s} {'rep max':>7s} "
             f"{'req imb':>7s} {'pf imb':>7s} {'running':>7s} {'index peak':>11s}"]
    for f in fleet:
        if f.error:
            lines.append(f"{f.router:<24s} {f.spec.policy + ' ' + _size_label(f.spec.capacity):<20s} error")
            continue
        k = f.fields()
        lines.append(f"{f.router:<24s} {f.spec.policy + ' ' + _size_label(f.spec.capacity):<20s} "
                     f"{f.total.block_hit_ratio:7.4f} {float(k['replica_hit_min']):7.4f} "
                     f"{float(k['replica_hit_max']):7.4f} {float(k['req_imbalance']):7.3f} "
                     f"{float(k['prefill_imbalance']):7.3f} {k['peak_running_max']:>7d} "
                     f"{k['router_index_peak_blocks']:>11,d}")
    return "\n".join(lines)


def _by_router(res) -> list[tuple[str | None, list]]:
    """The run's results grouped by router, in run order (one group, router None, without)."""
    if not res.fleet:
        return [(None, res.caches)]
    groups: dict[str, list] = {}
    for f in res.fleet:
        groups.setdefault(f.router, []).append(f.total)
    return list(groups.items())


def _cache_name(res, r) -> str:
    """``lru cache 8192``, and ``behind ROUTER`` for a fleet's totals."""
    f = res.fleet_of(r)
    return f"{r.spec.policy} cache {r.spec.capacity}" + (f" behind {f.router}" if f else "")


@click.command("simulate")
@trace_option()
@click.option("--cache-size", "-c", "cache_size", default=None,
              help=f"Cache sizes in blocks, comma list, k/m/g = x1024 [default: {DEMO_SIZES}].")
@click.option("--algo", "-a", "algo", default=None,
              help=f"Policies, comma list (see --list-algos) [default: {DEMO_ALGOS}, built ones].")
@click.option("--algo-params", "algo_params", multiple=True,
              help="Policy parameters k=v,k=v for every policy, or algo:k=v,... for one; repeatable.")
@run_options()
@click.option("--no-verify", is_flag=True, help="Skip the residency check after each request.")
@click.option("--lookup", type=click.Choice(["all", "prompt", "vllm"]), default="all",
              show_default=True,
              help="Blocks looked up (counted) per request: all; prompt = input_length // B "
                   "(recorded traces: the generated blocks are inserted, not counted); "
                   "vllm = (input_length - 1) // B (vLLM recomputes the last prompt token), "
                   "and the final partial block holds a slot while the request runs.")
@click.option("--threads", type=int, default=None,
              help="Threads stepping groups of caches [default: the CPU count].")
@click.option("--dump-holes", "dump_holes", type=click.Path(file_okay=False), default=None,
              help="Write per-request hole lines to DIR/holes_<trace>_cache<size>_<algo>.txt.")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False), default=None,
              help="Append the RESULT lines to this file.")
@click.option("--format", "fmt", type=click.Choice(["table", "result"]), default=None,
              help="table: policies x sizes; result: PrefixSim's lines [default: table without --trace].")
@click.option("--list-algos", is_flag=True, help="List the policies and exit.")
@click.option("--list-routers", is_flag=True, help="List the router models and exit.")
def simulate(trace, cache_size, algo, algo_params, cost_model, no_pin, replay_order, timing,
             service, tier, bytes_per_block, kv_config, replicas, router, router_params,
             category, block_id, allow_truncated, no_verify, lookup, threads, dump_holes, output,
             fmt, list_algos, list_routers) -> None:
    """Replay a trace through prefix caches and report hit and compute-saving ratios.

    Every (policy, size) cache is stepped over each decoded batch: one pass over the trace.
    Without --trace, runs a handful of policies and sizes on the bundled Mooncake trace.
    """
    if list_algos or list_routers:
        for line in (_list_algos_lines() if list_algos else []) + (
                _list_routers_lines() if list_routers else []):
            click.echo(line)
        return

    from shadow.sim.run import RunSpec, run
    from shadow.trace import bundled_trace_path

    demo = trace is None
    path = trace if trace is not None else bundled_trace_path()
    if fmt is None:
        fmt = "table" if demo else "result"
    # NOTE: an empty -c "" or -a "" is a mistake, not a request for the demo defaults
    if cache_size is not None and not cache_size.strip():
        raise ShadowError("-c/--cache-size is empty")
    if algo is not None and not algo.strip():
        raise ShadowError("-a/--algo is empty")
    sizes = parse_size_list(cache_size if cache_size else DEMO_SIZES)
    if algo:
        algos = parse_name_list(algo)
    else:
        algos = [a for a in parse_name_list(DEMO_ALGOS) if is_built(a)]
    check_name_list(algos, option="-a/--algo", what="policy")
    for a in algos:
        policy_info(a)                         # unknown / not built: a clear error now
    params = parse_algo_params(algo_params, algos)
    spec = RunSpec.from_options(
        [CacheSpec(a, s, params[a]) for s in sizes for a in algos], cost_model=cost_model,
        pin=not no_pin, replay_order=replay_order, verify=not no_verify, timing=timing,
        service=service, tiers=tier, bytes_per_block=bytes_per_block, kv_config=kv_config,
        lookup=lookup, threads=threads, dump_holes=dump_holes,
        trace_name=trace if trace is not None else Path(path).name, block_id=block_id,
        allow_truncated=allow_truncated, category=category, replicas=replicas, router=router,
        router_params=router_params)
    if output:
        check_writable(output)   # NOTE: a missing or read-only directory now, not after the run

    with spec.open_trace(path) as tr:
        h = tr.header

        def started() -> None:
            # NOTE: a policy that a setting defeats says so before the run (asym_cache under a
            # uniform cost); what the trace lacked (times, categories) it says after it
            for line in spec.setup_notes():
                log.warning("%s", line)
            kind = {"JsonlTrace": "jsonl", "RecordingTrace": "recording"}.get(
                type(tr).__name__, "lcp")
            click.echo(f"trace {path}: {h.n_requests} requests, {h.n_block_accesses} block "
                       f"accesses, format {kind}, block-id {block_id}")
            if kind == "recording":
                click.echo(f"read {tr.summary.line()}")

        # NOTE: a sampled policy over a production-size trace runs for minutes: show where the
        # pass is, its rate and ETA (on a terminal only)
        passes = max(1, len(spec.routers))
        with progress_bar(h.n_block_accesses * passes, "simulating", unit="accesses") as cb:
            res = run(spec, tr, progress=cb, on_start=started)
    results = res.caches

    fleet = f", {spec.replicas} replica{'s' if spec.replicas > 1 else ''}"
    if fmt == "table":
        click.echo(f"cache sizes {','.join(str(s) for s in sizes)} blocks, cost model "
                   f"{spec.cost.name}, pin {'off' if no_pin else 'on'}, replay {replay_order}")
        for name, group in _by_router(res):
            click.echo("")
            if name is not None:
                click.echo(f"router {name}{fleet} (fleet totals):")
            click.echo(format_table(group, sizes, algos, spec.cost.name == "uniform"))
        if res.fleet:
            click.echo("")
            click.echo(format_fleet_table(res.fleet))
        if res.tiers:
            click.echo("")
            click.echo(format_tier_table(results, res.tiers))
    else:
        for name, group in _by_router(res):
            where = f", router {name}{fleet}" if name is not None else ""
            for s in sizes:
                click.echo(f"cache size {s} blocks, cost model {spec.cost.name}{where}")
                click.echo("")
                for r in group:
                    if r.spec.capacity == s:
                        click.echo(r.summary_line())
                        for line in res.result_lines(r):
                            click.echo(line)
    if output:
        _append_atomically(output, res.lines())
    for line in res.trace_notes:
        log.warning("%s", line)
    for r in results:
        if r.n_unexpected_eviction:
            log.warning("%s: %d unexpected evictions: this run is not trustworthy",
                        _cache_name(res, r), r.n_unexpected_eviction)
        if not no_pin and r.n_self_eviction:
            log.warning("%s: %d self-evictions with pinning on (the policy ignores pins)",
                        _cache_name(res, r), r.n_self_eviction)
    failed = [r for r in results if r.error]
    if failed:
        raise ShadowError("; ".join(f"{_cache_name(res, r)}: {r.error}" for r in failed))
