"""``shadow sweep`` and ``shadow plot``: thin click commands over :mod:`shadow.sweep`."""

from __future__ import annotations

import os
from itertools import product
from pathlib import Path

import click

from shadow.cli_options import parse_name_list, parse_size, split_size_list
from shadow.errors import ShadowError
from shadow.sim.options import run_options
from shadow.sweep.plan import parse_capacities, plan_cells


def _split_algos(algo_args: tuple[str, ...], params_args: tuple[str, ...]) -> list[tuple[str, str]]:
    """``--algo a,b`` (repeatable) and ``--algo-params [ALGO:]k=v,k=v`` (repeatable) -> (algo, params).

    Parameters without an ``ALGO:`` prefix apply to every policy; ``ALGO:k=v`` to that policy only
    (and win over the unprefixed ones for the same key).
    """
    algos: list[str] = []
    for a in algo_args:
        for name in parse_name_list(a.lower()):
            if name not in algos:
                algos.append(name)
    if not algos:
        raise ShadowError("--algo: no policy given")
    common: list[str] = []
    per_algo: dict[str, list[str]] = {}
    for p in params_args:
        head, sep, rest = p.partition(":")
        if sep and "=" not in head:
            if head not in algos:
                raise ShadowError(f"--algo-params {p!r}: {head!r} is not one of --algo {','.join(algos)}")
            per_algo.setdefault(head, []).append(rest)
        else:
            common.append(p)

    def merge(parts: list[str]) -> str:
        kv: dict[str, str] = {}
        for part in parts:
            for item in parse_name_list(part):
                k, eq, v = item.partition("=")
                if not eq or not k.strip():
                    raise ShadowError(f"--algo-params: bad item {item!r}: expected key=value")
                kv[k.strip()] = v.strip()
        return ",".join(f"{k}={v}" for k, v in kv.items())

    return [(a, merge(common + per_algo.get(a, []))) for a in algos]


def _check_runs(pairs: list[tuple[str, str]], caps: list[int], cost_models: list[str],
                timings: tuple[str, ...], service: str | None, tiers: tuple[str, ...],
                bytes_per_block: int | None, kv_config: str | None, replicas: list[int],
                router: str | None, router_params: tuple[str, ...], **options) -> list[str]:
    """Fail fast, before any worker starts: the runs of every (cost model, timing, replica
    count) checked as ``shadow simulate`` checks its options
    (:meth:`shadow.sim.run.RunSpec.from_options`), each cost model parsed once.  Returns the
    cells' router texts (``['']`` without ``--router``)."""
    from shadow.sim.cost.models import parse_cost_model
    from shadow.sim.core.results import CacheSpec
    from shadow.sim.run import RunSpec

    caches = [CacheSpec(a, c, p) for a, p in pairs for c in caps]
    routers: tuple[str, ...] = ()
    for cm in cost_models:
        cost = parse_cost_model(cm)
        for t, n in product(timings, replicas):
            # NOTE: a --service goes to the model cells only; with no model timing it is
            # checked against the first timing (the one-line "is --timing model's" refusal)
            svc = service if t == "model" or "model" not in timings else None
            spec = RunSpec.from_options(caches, cost_model=cost, timing=t, service=svc,
                                        tiers=tiers, bytes_per_block=bytes_per_block,
                                        kv_config=kv_config, replicas=n, router=router,
                                        router_params=router_params, source="sweep", **options)
            routers = spec.routers
    return list(routers) or [""]


def _parse_replicas(text: str) -> list[int]:
    """``--replicas N[,N...]``: distinct counts in order (each checked by the run's spec)."""
    out = []
    for i, item in enumerate(split_size_list(text, what="--replicas"), 1):
        if not item.strip().isdigit():
            raise ShadowError(f"bad --replicas list {text!r}: item {i} {item.strip()!r} is not "
                              f"a whole number")
        out.append(int(item))
    return list(dict.fromkeys(out))


@click.command("sweep")
@click.argument("traces_args", metavar="[TRACE]...", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--trace", "-t", "traces", multiple=True, type=click.Path(dir_okay=False),
              help="Trace file (.lcp, .lcp.zst or JSONL); repeat for more traces.  With --executor "
                   "ray it must be a path every node sees.")
@click.option("--algo", "-a", "algos", multiple=True, required=True,
              help="Policies, comma separated (repeatable): lru,s3fifo,belady.")
@click.option("--algo-params", "algo_params", multiple=True,
              help="Policy parameters 'k=v,k=v' for every policy, or 'ALGO:k=v,k=v' for one (repeatable).")
@click.option("--cache-sizes", "-c", "cache_sizes", required=True,
              help="Capacities in blocks: a list 1k,2k,8k, a range 1k:256k:log8 (8 points, log "
                   "spaced) or 1k:8k:lin4, or a mix; k/m/g multiply by 1024.")
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Sweep directory: cells/ (one file per completed cell) and results.csv.  Cells "
                   "already there are not run again.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool on this machine; ray: one Ray task per cell.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes for --executor local  [default: number of CPUs]")
@click.option("--address", default=None,
              help="Ray cluster address for --executor ray (default: $RAY_ADDRESS, else a local instance).")
@run_options(many=True)
@click.option("--progress/--no-progress", default=None,
              help="Progress bar over cells on stderr  [default: when stderr is a terminal]")
@click.option("--mrc", is_flag=True,
              help="Take the lru and vllm cells (serial, no tier, default parameters) from one "
                   "exact miss-ratio curve per trace and cost model (docs/mrc.md) instead of a "
                   "simulation each; DIR/curves/ keeps the curves, which plot draws.")
def sweep(traces_args: tuple[str, ...], traces: tuple[str, ...], algos: tuple[str, ...],
          algo_params: tuple[str, ...], cache_sizes: str, out_dir: str, executor: str,
          jobs: int | None, address: str | None, cost_models: tuple[str, ...], no_pin: bool,
          replay_order: str, timings: tuple[str, ...], service: str | None,
          tiers: tuple[str, ...], bytes_per_block: int | None, kv_config: str | None,
          replicas: str, router: str | None, router_params: tuple[str, ...], category: str,
          block_id: str, allow_truncated: bool, progress: bool | None, mrc: bool) -> None:
    """Simulate every (trace, policy, capacity, cost model[, router, replicas]) cell, in
    parallel, resumably.

    Each cell streams its trace once through one simulated cache (constant memory) and is stored as
    DIR/cells/<cell>.result (its RESULT line) when it completes; DIR/results.csv is rebuilt from all
    cells at the end.  Cells already in DIR are skipped, so running the same command again after a
    stop finishes the sweep.  A failed cell is reported with its error and the others go on; the exit
    status is non-zero when any cell failed.

    \b
    Example:
      shadow sweep -t conv.lcp.zst -a lru,s3fifo,belady -c 1k:64k:log7 --cost-model uniform \\
          --cost-model position --out sweeps/conv --jobs 2
      shadow plot sweeps/conv --bytes-per-block 1536k
      shadow sweep -t conv.lcp.zst -a lru -c 1k:16k:log5 --timing model \\
          --router round_robin,kv_aware --replicas 2,4,8 --out sweeps/fleet
    """
    from shadow.sweep.executors import make_executor
    from shadow.sweep.runner import run_sweep

    all_traces = list(dict.fromkeys([*traces, *traces_args]))
    if not all_traces:
        raise ShadowError("no trace given (--trace T, repeatable)")
    pairs = _split_algos(algos, algo_params)
    caps = parse_capacities(cache_sizes)
    cms = list(dict.fromkeys(cost_models))
    timings = tuple(dict.fromkeys(timings))
    options = dict(pin=not no_pin, replay_order=replay_order, block_id=block_id,
                   allow_truncated=allow_truncated, category=category)
    counts = _parse_replicas(replicas)
    routers = _check_runs(pairs, caps, cms, timings, service, tiers, bytes_per_block, kv_config,
                          counts, router, router_params, **options)
    if executor == "local" and address:
        raise ShadowError("--address is for --executor ray")
    if executor == "ray" and jobs is not None:
        raise ShadowError("--jobs is for --executor local (Ray schedules one CPU per cell)")
    cell_timings = [f"model:{service}" if t == "model" and service else t for t in timings]
    cell_tiers, kv_bytes = _tier_cells(tiers, bytes_per_block, kv_config)
    cells = plan_cells(all_traces, pairs, caps, cms, timings=cell_timings, tiers=cell_tiers,
                       kv_bytes=kv_bytes, routers=routers, replicas=counts, **options)
    ex = make_executor(executor, jobs=jobs, address=address)
    report = run_sweep(cells, out_dir, ex, progress=progress, curves=mrc)
    click.echo(f"{report.summary()}; wrote {report.csv_path}")
    if report.failed:
        raise ShadowError(f"{len(report.failed)} of {report.n_cells} cells failed (listed above); "
                          f"run the same command again to retry them")


def _tier_cells(tiers: tuple[str, ...], tier_bytes: int | None,
                kv_config: str | None) -> tuple[list[str], str]:
    """The cells' tier texts (one per tier size, canonical) and their block-bytes text (checked
    before, by :func:`_check_runs`)."""
    from shadow.sim.tiers.model import TierChainSpec, parse_tiers
    if not tiers:
        return [""], ""
    specs = [t for text in tiers for t in parse_tiers(text)]

    def text(t) -> str:
        if isinstance(t, TierChainSpec):
            # NOTE: the disk part takes no threshold/tracker (parse_tiers refuses them)
            b = t.second
            return (f"{text(t.first)}>{b.medium}:{b.size_text}:{b.policy}:"
                    f"bw={b.bandwidth_gbps:g},chunk={b.blocks_per_chunk}")
        return (f"{t.medium}:{t.size_text}:{t.policy}:bw={t.bandwidth_gbps:g},"
                f"chunk={t.blocks_per_chunk},threshold={t.store_threshold},"
                f"tracker={t.max_tracker_size}")
    texts = [text(t) for t in specs]
    kv = str(tier_bytes) if tier_bytes is not None else (kv_config or "")
    if kv_config is not None:
        cfg = kv_config.partition(",")[0]
        kv = f"{os.path.abspath(cfg)}{kv_config[len(cfg):]}"
    return list(dict.fromkeys(texts)), kv


@click.command("plot")
@click.argument("sweep_dir", metavar="DIR", type=click.Path(exists=True))
@click.option("--bytes-per-block", default=None,
              help="Bytes of KV cache per block (k/m/g suffixes), to label capacity in GiB too; "
                   "e.g. 1536k for a 16-token block of Qwen3-Coder-30B in bf16.")
@click.option("--out", "-o", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Where to write the PNGs  [default: DIR/plots]")
@click.option("--dpi", type=click.IntRange(min=30, max=600), default=110, show_default=True,
              help="Resolution of the PNGs.")
def plot(sweep_dir: str, bytes_per_block: str | None, out_dir: str | None, dpi: int) -> None:
    """Plot a sweep: one PNG per trace and cost model, one line per policy.

    Panels against capacity (log axis): block hit ratio, compute-saving ratio, the gap-spanning gain
    over first-miss reuse, and hole counts; oracles dashed.  DIR is a sweep directory (its
    results.csv is read) or a results CSV file.
    """
    from shadow.sweep.plot import plot_sweep

    src = Path(sweep_dir)
    csv_path = src / "results.csv" if src.is_dir() else src
    bpb = parse_size(bytes_per_block, what="--bytes-per-block") if bytes_per_block else None
    dest = Path(out_dir) if out_dir else (src if src.is_dir() else src.parent) / "plots"
    for p in plot_sweep(csv_path, dest, bytes_per_block=bpb, dpi=dpi):
        click.echo(os.fspath(p))
