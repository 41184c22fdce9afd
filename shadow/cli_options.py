"""Shared click option decorators and parsers (sizes, comma lists), used by every subcommand."""

from __future__ import annotations

import math
import re
from typing import Callable

import click

from shadow.errors import ShadowError
from shadow.sim.category import CATEGORY_MODES, DEFAULT_CATEGORY

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)\s*$")
_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str, *, what: str = "cache size") -> int:
    """Parse ``8192``, ``8k``, ``2M``, ``1g`` (k/m/g multiply by 1024) into a positive int."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ShadowError(f"bad {what} {text!r}: expected an integer with an optional k/m/g suffix")
    value = int(m.group(1)) * _SUFFIX[m.group(2).lower()]
    if value <= 0:
        raise ShadowError(f"bad {what} {text!r}: must be positive")
    return value


def split_size_list(text: str, *, what: str = "cache size") -> list[str]:
    """The items of a comma list of sizes; an empty list or an empty item (``1k,,2k``, a
    trailing comma) is refused, never dropped."""
    parts = text.split(",")
    if not any(p.strip() for p in parts):
        raise ShadowError(f"empty {what} list")
    for i, p in enumerate(parts, 1):
        if not p.strip():
            raise ShadowError(f"bad {what} list {text!r}: item {i} is empty")
    return parts


def parse_size_list(text: str, *, what: str = "cache size") -> list[int]:
    """Parse a comma list of sizes: ``8k,32k,128k``."""
    return [parse_size(p, what=what) for p in split_size_list(text, what=what)]


def parse_name_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def trace_option(required: bool = False) -> Callable:
    return click.option(
        "--trace", "-t", "trace", type=click.Path(dir_okay=False), required=required,
        help="Trace file: .lcp, .lcp.zst, or JSONL (told apart by content).",
    )


def allow_truncated_option() -> Callable:
    return click.option(
        "--allow-truncated", is_flag=True,
        help="Read the complete requests of a truncated or damaged lcp file and stop there.",
    )


def block_id_option() -> Callable:
    return click.option(
        "--block-id", type=click.Choice(["prefix", "raw"]), default="prefix", show_default=True,
        help="JSONL only: intern (parent id, raw id) pairs (prefix), or use raw ids as they are.",
    )


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
    block, category, block-id mode, truncation.  ``many``: ``--cost-model`` and ``--timing`` are
    repeatable (a sweep runs one cell per value) and named ``cost_models`` and ``timings``.
    ``only``: just the options with these flags (``shadow mrc``: the settings a curve has)."""
    # NOTE: imported here, when a run command is defined: the trace commands that share this
    # module never load the simulator
    from shadow.sim.cost.models import COST_MODELS
    from shadow.sim.timing.service import SERVICE_DEFAULTS
    from shadow.sim.timing.run import TIMING_MODES

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


class _Number(click.ParamType):
    """A finite number with a lower bound, checked when the command line is parsed (before any
    work starts): ``nan``, ``inf`` and out-of-range values are a one-line usage error."""

    def __init__(self, kind: type, low: float, inclusive: bool) -> None:
        self.kind, self.low, self.inclusive = kind, low, inclusive
        self.name = f"{kind.__name__} {'>=' if inclusive else '>'} {low:g}"

    def convert(self, value, param, ctx):
        if isinstance(value, self.kind) and not isinstance(value, bool):
            v = value
        else:
            try:
                v = self.kind(str(value).strip())
            except ValueError:
                self.fail(f"{value!r} is not {'an integer' if self.kind is int else 'a number'}",
                          param, ctx)
        if self.kind is float and not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if v < self.low or (v == self.low and not self.inclusive):
            self.fail(f"{value!r} must be {'>=' if self.inclusive else '>'} {self.low:g}",
                      param, ctx)
        return v


#: A finite float > 0 (rates, factors, seconds).
POSITIVE_FLOAT = _Number(float, 0, inclusive=False)
#: An integer >= 1 (counts, sizes).
POSITIVE_INT = _Number(int, 1, inclusive=True)
#: An integer >= 0 (offsets).
NON_NEGATIVE_INT = _Number(int, 0, inclusive=True)
