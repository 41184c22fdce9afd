"""``shadow sweep`` and ``shadow plot``: thin click commands over :mod:`shadow.sweep`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from shadow.cli_options import (allow_truncated_option, block_id_option, category_option,
                                parse_name_list, parse_size)
from shadow.errors import ShadowError
from shadow.sim.registry import policy_info
from shadow.sim.timing.service import parse_service
from shadow.sim.timing.run import TIMING_MODES
from shadow.sweep.plan import parse_capacities, plan_cells

REPLAY_ORDERS = ("deepest-first", "prefix-order")


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


def _check_policies_and_costs(algos: list[tuple[str, str]], cost_models: list[str]) -> None:
    """Fail fast, before any worker starts: an unknown or unbuilt policy, bad parameters, a bad cost model."""
    from shadow.sim import parse_cost_model
    from shadow.sim.registry import check_policy

    for name, params in algos:
        check_policy(name, params or None)   # NOTE: the same checks as `shadow simulate`
    for cm in cost_models:
        parse_cost_model(cm)


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
@click.option("--cost-model", "cost_models", multiple=True, default=("uniform",), show_default=True,
              help="Cost model (repeatable): uniform, position, linear:A,B, table:FILE, "
                   "qwen3coder30b_blksz_16.")
@click.option("--out", "-o", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Sweep directory: cells/ (one file per completed cell) and results.csv.  Cells "
                   "already there are not run again.")
@click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: a process pool on this machine; ray: one Ray task per cell.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes for --executor local  [default: number of CPUs]")
@click.option("--address", default=None,
              help="Ray cluster address for --executor ray (default: $RAY_ADDRESS, else a local instance).")
@click.option("--no-pin", is_flag=True,
              help="Let eviction take blocks the arriving request already holds.")
@click.option("--replay-order", type=click.Choice(REPLAY_ORDERS), default="deepest-first",
              show_default=True, help="Replay a request from its deepest block or from its first.")
@click.option("--timing", "timings", multiple=True, type=click.Choice(list(TIMING_MODES)),
              default=("serial",), show_default=True,
              help="As shadow simulate --timing (repeatable: one cell per timing); recorded and "
                   "model use vLLM's block rules (--lookup vllm).")
@click.option("--service", default=None, metavar="SPEC",
              help="--timing model's service model, as shadow simulate --service.")
@click.option("--tier", "tiers", multiple=True, metavar="MEDIUM:SIZES:POLICY[:k=v,...]",
              help="Offload tiers or CPU>DISK chains, as shadow simulate --tier: one cell per "
                   "(cache, tier size); "
                   "repeatable.  Sweeps GPU size x host size (docs/tiers.md).")
@click.option("--bytes-per-block", "tier_bytes", type=int, default=None,
              help="KV bytes of one engine block, for --tier sizes in GiB.")
@click.option("--kv-config", default=None, metavar="CONFIG[,DTYPE]",
              help="A model's config.json (and KV dtype): a block's bytes for --tier, from each "
                   "trace's block size.")
@block_id_option()
@allow_truncated_option()
@category_option()
@click.option("--progress/--no-progress", default=None,
              help="Progress bar over cells on stderr  [default: when stderr is a terminal]")
@click.option("--mrc", is_flag=True,
              help="Take the lru and vllm cells (serial, no tier, default parameters) from one "
                   "exact miss-ratio curve per trace and cost model (docs/mrc.md) instead of a "
                   "simulation each; DIR/curves/ keeps the curves, which plot draws.")
def sweep(traces_args: tuple[str, ...], traces: tuple[str, ...], algos: tuple[str, ...],
          algo_params: tuple[str, ...], cache_sizes: str, cost_models: tuple[str, ...], out_dir: str,
          executor: str, jobs: int | None, address: str | None, no_pin: bool, replay_order: str,
          timings: tuple[str, ...], service: str | None, tiers: tuple[str, ...],
          tier_bytes: int | None, kv_config: str | None, block_id: str, allow_truncated: bool,
          category: str, progress: bool | None, mrc: bool) -> None:
    """Simulate every (trace, policy, capacity, cost model) cell, in parallel, resumably.

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
    """
    from shadow.sweep.executors import make_executor
    from shadow.sweep.runner import run_sweep

    all_traces = list(dict.fromkeys([*traces, *traces_args]))
    if not all_traces:
        raise ShadowError("no trace given (--trace T, repeatable)")
    pairs = _split_algos(algos, algo_params)
    caps = parse_capacities(cache_sizes)
    cms = list(dict.fromkeys(cost_models))
    _check_policies_and_costs(pairs, cms)
    if executor == "local" and address:
        raise ShadowError("--address is for --executor ray")
    if executor == "ray" and jobs is not None:
        raise ShadowError("--jobs is for --executor local (Ray schedules one CPU per cell)")
    timings = tuple(dict.fromkeys(timings))
    if service is not None:
        if "model" not in timings:
            raise ShadowError("--service is --timing model's")
        parse_service(service)               # NOTE: a bad one now, not in every cell
    oracles = [a for a, _p in pairs if policy_info(a).needs_next_access]
    if oracles and timings != ("serial",):
        raise ShadowError(f"--timing recorded and model cannot run {', '.join(oracles)}: an "
                          f"oracle's next-access times follow the file's order")
    cell_timings = [f"model:{service}" if t == "model" and service else t for t in timings]
    cell_tiers, kv_bytes = _tier_cells(tiers, tier_bytes, kv_config, pairs)
    cells = plan_cells(all_traces, pairs, caps, cms, pin=not no_pin, replay_order=replay_order,
                       block_id=block_id, allow_truncated=allow_truncated, timings=cell_timings,
                       tiers=cell_tiers, kv_bytes=kv_bytes, category=category)
    ex = make_executor(executor, jobs=jobs, address=address)
    report = run_sweep(cells, out_dir, ex, progress=progress, curves=mrc)
    click.echo(f"{report.summary()}; wrote {report.csv_path}")
    if report.failed:
        raise ShadowError(f"{len(report.failed)} of {report.n_cells} cells failed (listed above); "
                          f"run the same command again to retry them")


def _tier_cells(tiers: tuple[str, ...], tier_bytes: int | None, kv_config: str | None,
                pairs: list[tuple[str, str]]) -> tuple[list[str], str]:
    """The cells' tier texts (one per tier size, canonical) and their block-bytes text, checked
    now rather than in every cell."""
    from shadow.sim.tiers.model import TierChainSpec, parse_tiers
    if not tiers:
        if tier_bytes is not None or kv_config is not None:
            raise ShadowError("--bytes-per-block and --kv-config size a --tier; no --tier given")
        return [""], ""
    if tier_bytes is not None and kv_config is not None:
        raise ShadowError("--bytes-per-block and --kv-config both give a block's bytes: one only")
    if tier_bytes is not None and not 0 < tier_bytes < 2**40:
        raise ShadowError(f"--bytes-per-block {tier_bytes} is not a positive byte count")
    oracles = [a for a, _p in pairs if policy_info(a).needs_next_access]
    if oracles:
        raise ShadowError(f"--tier cannot run {', '.join(oracles)} (an oracle): tiers run through "
                          f"the live path, which has no next-access times")
    specs = [t for text in tiers for t in parse_tiers(text)]
    for t in (one for s in specs for one in (s.tiers if isinstance(s, TierChainSpec) else (s,))):
        if t.size_bytes is not None and tier_bytes is None and kv_config is None:
            t.n_chunks(None)                     # NOTE: the one-line "needs the bytes" error
        elif t.size_bytes is None or tier_bytes is not None:
            t.n_chunks(tier_bytes)               # too small for a chunk: now

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
        if not os.path.isfile(cfg):
            raise ShadowError(f"--kv-config {cfg}: no such file")
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
