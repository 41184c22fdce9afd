"""``shadow mrc``: a thin click layer over :func:`shadow.sim.mrc.offline.curve_of_trace`."""

from __future__ import annotations

import csv
import logging
from fractions import Fraction
from pathlib import Path

import click

from shadow.atomic import atomic_open, check_writable
from shadow.cli_options import parse_size_list, trace_option
from shadow.errors import ShadowError
from shadow.progress import progress_bar
from shadow.sim.mrc.curve import CSV_COLUMNS, METRICS, TARGET_METRICS, Curve, parse_targets
from shadow.sim.mrc.offline import CURVE_ALGOS
from shadow.sim.engine.rules import LOOKUP_MODES
from shadow.sim.options import run_options
from shadow.sim.registry import MAX_CAPACITY

log = logging.getLogger(__name__)

GIB = 1024 ** 3
#: The run options (shadow/cli_options.py) a curve has: its settings as simulate's.  Pins do not
#: change it and timing and tiers are not one pass (docs/mrc.md).
MRC_RUN_OPTIONS = ("--cost-model", "--replay-order", "--bytes-per-block", "--kv-config",
                   "--block-id", "--allow-truncated")


def default_sizes(curve: Curve) -> list[int]:
    """Without ``--at``: ``exact_from``, the powers of two between it and the top, the top."""
    top = max(curve.top, curve.exact_from)
    out = [curve.exact_from]
    p = 1 << curve.exact_from.bit_length()
    while p < top:
        out.append(p)
        p *= 2
    if top > out[-1]:
        out.append(top)
    return out


def at_line(curve: Curve, c: int) -> str:
    """``MRC cache_size=C`` and the four ratios as simulate's RESULT line prints them."""
    r = curve.ratios(c)
    return f"MRC cache_size={c} " + " ".join(f"{k}={r[k]:.6f}" for k in METRICS)


def target_text(t: Fraction) -> str:
    """0.9 -> ``0.90``; more digits when two do not say it (0.995)."""
    s = f"{float(t):.2f}"
    return s if Fraction(s) == t else f"{float(t):g}"


def target_lines(curve: Curve, targets: list[Fraction], block_bytes: int | None) -> list[str]:
    """One line per target and ratio: the smallest capacity reaching that share of the
    infinite cache's ratio, in blocks and (with a block's bytes) GiB."""
    lines = []
    for t in targets:
        for metric in TARGET_METRICS:
            c = curve.capacity_for(t, metric)
            # NOTE: below exact_from the curve is not the simulation's: only the bound is known
            bound = "at most " if c < curve.exact_from else ""
            c = max(c, curve.exact_from)
            gib = f" ({c * block_bytes / GIB:.2f} GiB)" if block_bytes else ""
            lines.append(f"target {target_text(t)} {metric} {bound}{c:,} blocks{gib}")
    return lines


def write_csv(path: str, curve: Curve) -> None:
    """Every change point of the curve (:data:`CSV_COLUMNS`), written whole or not at all."""
    with atomic_open(path, "w", parents=False, encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        w.writerows(curve.csv_rows())


def block_bytes_of(bytes_per_block: int | None, kv_config: str | None,
                   block_tokens: int) -> int | None:
    """A block's KV bytes from ``--bytes-per-block`` or ``--kv-config`` (None: neither)."""
    from shadow.sim.tiers.model import kv_bytes_per_block

    if bytes_per_block is not None and kv_config is not None:
        raise ShadowError("--bytes-per-block and --kv-config both give a block's bytes: one only")
    if bytes_per_block is not None:
        if not 0 < bytes_per_block < 2**40:
            raise ShadowError(f"--bytes-per-block {bytes_per_block} is not a positive byte count")
        return bytes_per_block
    if kv_config is None:
        return None
    if block_tokens <= 0:
        raise ShadowError("--kv-config needs the block size in tokens, which the trace's header "
                          "does not give (use --bytes-per-block)")
    cfg, _, dtype = kv_config.partition(",")
    return kv_bytes_per_block(cfg, block_tokens, dtype.strip() or "auto")


@click.command("mrc")
@trace_option()
@click.option("--algo", "-a", "algo", type=click.Choice(list(CURVE_ALGOS)), default="lru",
              show_default=True,
              help="lru, or vllm (vLLM's block pool: recency by release, tail first).")
@click.option("--at", "at", default=None, metavar="SIZES",
              help="Print the curve at these cache sizes (blocks, comma list, k/m/g = x1024) "
                   "[default: powers of two up to where the curve stops changing].")
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False), default=None,
              help=f"Write every point where the curve changes as CSV ({','.join(CSV_COLUMNS)}).")
@click.option("--target", "target", default=None, metavar="SHARES",
              help="Smallest capacity reaching each share of the infinite cache's ratio "
                   "(comma list in (0, 1], e.g. 0.5,0.8,0.9,0.95,0.99), in blocks and GiB.")
@click.option("--lookup", type=click.Choice(list(LOOKUP_MODES)), default="all", show_default=True,
              help="Blocks looked up (counted) per request, as simulate --lookup; vllm also "
                   "holds the final partial block's slot while the request runs.")
@run_options(only=MRC_RUN_OPTIONS)
def mrc(trace, algo, at, output, target, lookup, cost_model, replay_order, bytes_per_block,
        kv_config, block_id, allow_truncated) -> None:
    """Exact miss-ratio curve of lru or vllm in one pass: the hit ratios that `simulate -a ALGO`
    gives at every cache size (from the largest request's size up), from stack distances.

    Without --trace, the bundled Mooncake trace.  docs/mrc.md says when it is exact and how to
    read it.
    """
    from shadow.sim.mrc.offline import curve_of_trace, curve_spec
    from shadow.trace import bundled_trace_path

    path = trace if trace is not None else bundled_trace_path()
    sizes = None
    if at is not None:
        if not at.strip():
            raise ShadowError("--at is empty")
        sizes = parse_size_list(at, what="--at size")
        too_large = [c for c in sizes if c > MAX_CAPACITY]
        if too_large:
            raise ShadowError(f"--at {too_large[0]}: above {MAX_CAPACITY} blocks (2**31 - 2), "
                              f"the largest cache simulate runs")
    targets = parse_targets(target) if target is not None else []
    if (bytes_per_block is not None or kv_config is not None) and not targets:
        raise ShadowError("--bytes-per-block and --kv-config size the --target capacities; "
                          "no --target given")
    # NOTE: a block's bytes size the targets here, not a tier, so they stay out of the run
    spec = curve_spec(algo, cost_model=cost_model, replay_order=replay_order, lookup=lookup,
                      block_id=block_id, allow_truncated=allow_truncated, trace_name=path)
    if output:
        check_writable(output)    # NOTE: a missing or read-only directory now, not after the pass

    with spec.open_trace(path) as tr:
        h = tr.header
        block_bytes = block_bytes_of(bytes_per_block, kv_config, int(h.block_size_tokens or 0))
        click.echo(f"trace {path}: {h.n_requests} requests, {h.n_block_accesses} block accesses, "
                   f"block-id {block_id}")
        with progress_bar(h.n_block_accesses, "mrc", unit="accesses") as cb:
            curve = curve_of_trace(tr, path, spec, progress=cb)
    # NOTE: every size is checked before anything is printed or written
    for c in sizes or ():
        curve.check_size(c)
    where = (f", request {curve.exact_from_req} needs {curve.exact_from}"
             if curve.exact_from_req >= 0 else "")
    click.echo(f"curve {algo}, lookup {lookup}, replay {replay_order}, cost model "
               f"{spec.cost.name}: "
               f"{curve.n_distinct} distinct blocks, {curve.n_blocks} looked up; exact from "
               f"{curve.exact_from} blocks{where}; flat from {max(curve.top, curve.exact_from)}")
    for c in sizes if sizes is not None else ([] if output or targets else default_sizes(curve)):
        click.echo(at_line(curve, c))
    for line in target_lines(curve, targets, block_bytes):
        click.echo(line)
    if output:
        write_csv(output, curve)
        log.info("wrote %s (%d points)", Path(output), len(curve.change_points()))
