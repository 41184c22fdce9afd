"""Shared click option decorators and parsers (sizes, comma lists), used by every subcommand."""

from __future__ import annotations

import math
import re
from typing import Callable

import click

from shadow.errors import ShadowError

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
        "--trace", "-t", "trace", type=click.Path(), required=required,
        help="Trace file: .lcp, .lcp.zst, or JSONL (told apart by content), or a recording"
             " directory of the connector's segments.",
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
