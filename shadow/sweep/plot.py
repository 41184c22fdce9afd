"""Curves from a sweep CSV: one PNG per (trace, cost model), one line per policy.

Each figure has four panels against capacity (log x axis, in blocks; also in GiB on a top axis when
``bytes_per_block`` is given):

1. block hit ratio (gap-spanning: a hit after an earlier miss of the same request counts),
2. compute-saving ratio (hits weighted by the cost model),
3. the gap-spanning gain over first-miss reuse: ``block_hit_ratio - prefix_hit_ratio``, what a cache
   that could reuse blocks after a hole would gain over vLLM/SGLang's stop-at-first-miss lookup,
4. hole counts (runs of missed blocks a request had to recompute), when the RESULT lines carry them.

Oracles (policies that read the trace's next-access times) are drawn dashed.  matplotlib (Agg) is
imported only when plotting.

Fleet cells (``shadow sweep --router R[,R...] --replicas N[,N...]``) get one PNG per replica count,
the routers side by side in it: a colour per policy, a line style and marker per router (the
capacity is each replica's); with several replicas the fourth panel is the request imbalance
(the busiest replica's requests over the mean) instead of the holes.

A sweep run with ``--mrc`` keeps its exact lru curves under ``DIR/curves/``
(:mod:`shadow.sweep.curves`): each is drawn over the points of its group as a thin black step line
on the first three panels, at every size where it changes (lru's in the group's replay order;
vllm's, deepest-first, too when the group has vllm points in prefix order).

Rows of cells with an offload tier (``shadow sweep --tier``) are drawn apart: one PNG per (trace,
cost model, options, policy, tier medium and policy), a family of curves, one per GPU cache size,
of GPU + tier hit ratio and compute-saving ratio against the tier's capacity (GiB when the rows
carry a block's bytes, else blocks).  Rows of a chain (``cpu:...>disk:...``) are drawn apart per
disk tier, GPU + host + disk against the host tier's capacity.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Iterable

from shadow.atomic import atomic_path
from shadow.errors import ShadowError
from shadow.sim.category import DEFAULT_CATEGORY
from shadow.sweep.store import bad_number, read_csv_lines

logger = logging.getLogger(__name__)

#: RESULT fields that may hold a hole count, first found wins (the simulator writes holes_per_req:
#: holes per served request).
HOLE_FIELDS = ("holes_per_req", "n_holes")
_DEFAULTS = {"pin": "on", "replay_order": "deepest-first", "block_id": "prefix",
             "timing": "serial", "category": DEFAULT_CATEGORY, "replicas": "1"}
#: Line styles and markers of the routers of one figure, in router order (one engine first).
ROUTER_STYLES = ("-", "--", ":", "-.")
ROUTER_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def is_oracle(algo: str) -> bool:
    """Whether ``algo`` reads future (next-access) information, as the policy registry says."""
    try:
        from shadow.sim.registry import policy_info

        return policy_info(algo).needs_next_access
    except Exception:  # NOTE: plotting must work without the built extensions (a CSV from elsewhere)
        return "belady" in algo or algo.startswith("oracle")


def check_row(row: dict[str, str]) -> str | None:
    """What makes a CSV row unplottable, or None: an empty trace, algo or cost model, a
    cache_size that is not a positive integer, a ratio that is not a number in [0, 1] or a hole
    figure that is not a number >= 0.  An empty ratio or hole value is a figure the row does
    not have (that panel says "not in these results")."""
    for key in ("trace", "algo", "cost_model"):
        if not row[key].strip():
            return f"{key} is empty"
    size = row["cache_size"]
    if not (size.isascii() and size.isdigit() and int(size) > 0):
        return f"cache_size {size!r} is not a positive integer"
    return bad_number(row)


def _float(row: dict[str, str], key: str) -> float | None:
    v = row.get(key, "")
    try:
        return float(v) if v != "" else None
    except ValueError:
        return None


def _fmt_blocks(x: float, _pos: object = None) -> str:
    for div, suf in ((1024**3, "G"), (1024**2, "M"), (1024, "k")):
        if x >= div:
            v = x / div
            return f"{v:.0f}{suf}" if abs(v - round(v)) < 0.05 else f"{v:.1f}{suf}"
    return f"{x:.0f}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"


def _group_title(key: tuple[str, ...]) -> tuple[str, str]:
    """A group's title and PNG name from its key: trace, cost model, pin, replay order,
    block-id mode, timing, category[, replicas]."""
    trace, cost_model, pin, replay_order, block_id, timing, category = key[:7]
    replicas = key[7] if len(key) > 7 else _DEFAULTS["replicas"]
    extras = []
    if pin != _DEFAULTS["pin"]:
        extras.append("no-pin")
    if replay_order != _DEFAULTS["replay_order"]:
        extras.append(replay_order)
    if block_id != _DEFAULTS["block_id"]:
        extras.append(f"block-id {block_id}")
    if timing != _DEFAULTS["timing"]:
        extras.append(f"timing {timing}")
    if category != _DEFAULTS["category"]:
        extras.append(f"category {category}")
    if replicas != _DEFAULTS["replicas"]:
        extras.append(f"{replicas} replicas")
    title = f"{trace}  cost model {cost_model}" + (f"  ({', '.join(extras)})" if extras else "")
    name = "__".join(_slug(p) for p in (trace, cost_model, *extras)) + ".png"
    return title, name


def plot_sweep(csv_path: str | os.PathLike, out_dir: str | os.PathLike, *,
               bytes_per_block: int | None = None, dpi: int = 110) -> list[Path]:
    """Write one PNG per (trace, cost model[, options]) group of ``csv_path`` into ``out_dir``.

    Every row is checked before anything is drawn (:func:`check_row`): a damaged CSV raises a
    :class:`ShadowError` naming its line, and no PNG is written.
    """
    from shadow.sweep.curves import read_curves

    numbered = read_csv_lines(csv_path)
    if not numbered:
        raise ShadowError(f"{csv_path}: no results to plot (no completed cells)")
    for line, row in numbered:
        bad = check_row(row)
        if bad:
            raise ShadowError(f"{csv_path}:{line}: {bad}")
    curves = {(i.trace_path, i.cost_model, i.block_id, i.order): pts
              for i, pts in read_curves(Path(csv_path).parent)}
    rows = [row for _, row in numbered if not row.get("tier")]
    tier_rows = [row for _, row in numbered if row.get("tier")]
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        key = (row["trace"], row["cost_model"], row.get("pin") or _DEFAULTS["pin"],
               row.get("replay_order") or _DEFAULTS["replay_order"],
               row.get("block_id") or _DEFAULTS["block_id"],
               row.get("timing") or _DEFAULTS["timing"],
               row.get("category") or _DEFAULTS["category"],
               row.get("replicas") or _DEFAULTS["replicas"])
        groups[key].append(row)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShadowError(f"{out}: cannot create the plot directory: {exc.strerror}") from None
    paths = []
    for key in sorted(groups):
        title, name = _group_title(key)
        paths.append(_plot_group(groups[key], out / name, title, bytes_per_block, dpi,
                                 _curves_of(groups[key], key, curves)))
    tier_groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in tier_rows:
        medium, _, rest = row["tier"].partition(":")
        tier_policy = rest.partition(":")[2]
        algo = f"{row['algo']}({row['params']})" if row.get("params") else row["algo"]
        key = (row["trace"], row["cost_model"], row.get("pin") or _DEFAULTS["pin"],
               row.get("replay_order") or _DEFAULTS["replay_order"],
               row.get("block_id") or _DEFAULTS["block_id"],
               row.get("timing") or _DEFAULTS["timing"],
               row.get("category") or _DEFAULTS["category"], algo,
               f"{medium} {tier_policy}" + (f" > {row['tier2']}" if row.get("tier2") else ""))
        tier_groups[key].append(row)
    for key in sorted(tier_groups):
        title, name = _group_title(key[:7])
        title = f"{title}\n{key[7]} with a {key[8]} tier"
        name = name[:-len(".png")] + f"__{_slug(key[7])}__tier-{_slug(key[8])}.png"
        paths.append(_plot_tier_group(tier_groups[key], out / name, title, dpi))
    return paths


def _curves_of(rows: list[dict[str, str]], key: tuple[str, ...],
               curves: dict[tuple, list]) -> list[tuple[str, list]]:
    """The stored curves to draw over a group's points: (label, points)."""
    _trace, cost_model, _pin, replay_order, block_id, timing, _category = key[:7]
    if timing != "serial":
        return []
    out = []
    for path in sorted({r.get("trace_path", "") for r in rows}):
        pts = curves.get((path, cost_model, block_id, replay_order))
        if pts and any(r["algo"] == "lru" for r in rows):
            out.append(("lru, exact curve", pts))
        if replay_order != "deepest-first" and any(r["algo"] == "vllm" for r in rows):
            pts = curves.get((path, cost_model, block_id, "deepest-first"))
            if pts:
                out.append(("vllm, exact curve", pts))
        if replay_order == "deepest-first" and pts and not any(r["algo"] == "lru" for r in rows):
            out.append(("vllm, exact curve", pts))
    return out


def _draw_curve(ax, points: list, get, label: str, lo: float, hi: float, style: str) -> None:
    """A stored curve on ``ax`` as a step line over [lo, hi] (its value holds until the next
    point where it changes)."""
    xs = [x for x, _ in points]
    ys = [get(r) for _, r in points]
    keep = [i for i, x in enumerate(xs) if lo <= x <= hi]
    if not keep:
        return
    i0 = keep[0] - 1 if keep[0] > 0 else keep[0]
    px = [max(lo, xs[i0])] + [xs[i] for i in keep] + [hi]
    py = [ys[i0]] + [ys[i] for i in keep] + [ys[keep[-1]]]
    ax.step(px, py, where="post", color="black", linestyle=style, linewidth=0.8, alpha=0.8,
            label=label)


def _save(fig, path: Path, dpi: int) -> Path:
    """Write ``fig`` to ``path`` atomically and close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    finally:
        plt.close(fig)
    logger.info("wrote %s", path)
    return path


def _tier_capacity(row: dict[str, str]) -> tuple[float, str]:
    """A tier row's capacity: (GiB, "GiB") when it carries a block's bytes, else (blocks, ...)."""
    blocks = int(row["tier_chunks"]) * int(row.get("tier_chunk_blocks") or 1)
    if row.get("tier_block_bytes", "na").isdigit():
        return blocks * int(row["tier_block_bytes"]) / 1024**3, "GiB"
    return float(blocks), "blocks"


def _plot_tier_group(rows: list[dict[str, str]], path: Path, title: str, dpi: int) -> Path:
    """GPU + tier ratios against the tier's capacity, one curve per GPU cache size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_gpu: dict[int, list[tuple[float, dict[str, str]]]] = defaultdict(list)
    unit = "blocks"
    for r in rows:
        x, unit = _tier_capacity(r)
        by_gpu[int(r["cache_size"])].append((x, r))
    panels = [("GPU + tier hit ratio (first-miss)", "prefix_hit_ratio", "tier_hit_ratio"),
              ("GPU + tier compute-saving ratio", "prefix_compute_saving_ratio",
               "tier_compute_saving_ratio")]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
    cmap = plt.get_cmap("viridis")
    for ax, (ylabel, gpu_key, tier_key) in zip(axes, panels):
        for i, (gpu, pts) in enumerate(sorted(by_gpu.items())):
            pts.sort(key=lambda p: p[0])
            # NOTE: a chain's row adds its disk tier's share (tier2_*) at its host capacity
            xy = [(x, (_float(r, gpu_key) or 0.0) + (_float(r, tier_key) or 0.0)
                   + (_float(r, "tier2" + tier_key[len("tier"):]) or 0.0)) for x, r in pts]
            xs, ys = zip(*xy)
            ax.plot(xs, ys, marker="o", markersize=3, color=cmap(i / max(1, len(by_gpu) - 1)),
                    label=f"GPU {_fmt_blocks(gpu)} blocks")
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"tier capacity ({unit})")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    return _save(fig, path, dpi)


def _series(rows: Iterable[dict[str, str]]) -> dict[tuple[str, str], list[dict[str, str]]]:
    """A group's rows by (policy label, router), each sorted by capacity."""
    by_series: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for r in rows:
        label = f"{r['algo']}({r['params']})" if r.get("params") else r["algo"]
        by_series[(label, r.get("router") or "")].append(r)
    for lst in by_series.values():
        lst.sort(key=lambda r: int(r["cache_size"]))
    return dict(sorted(by_series.items()))


def series_styles(series: dict[tuple[str, str], list[dict[str, str]]]
                  ) -> dict[tuple[str, str], tuple[int, str, str, str]]:
    """How each (policy, router) series is drawn: (colour index, line style, marker, legend
    label).  A colour per policy; the routers side by side as line styles and markers (one
    engine, router '', first); without routers, oracles dashed."""
    policies = sorted({p for p, _ in series})
    routers = sorted({r for _, r in series})
    fleet = routers != [""]
    out = {}
    for (policy, router), pts in series.items():
        oracle = is_oracle(pts[0]["algo"])
        j = routers.index(router)
        label = policy + (" (oracle)" if oracle else "")
        if fleet:
            style = ROUTER_STYLES[j % len(ROUTER_STYLES)]
            label += f", {router or 'one engine'}"
        else:
            style = "--" if oracle else "-"
        out[(policy, router)] = (policies.index(policy), style,
                                 ROUTER_MARKERS[j % len(ROUTER_MARKERS)], label)
    return out


def _plot_group(rows: list[dict[str, str]], path: Path, title: str, bytes_per_block: int | None,
                dpi: int, curves: list[tuple[str, list]] = ()) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator

    series = _series(rows)
    hole_field = next((f for f in HOLE_FIELDS if any(r.get(f, "") != "" for r in rows)), None)
    curve_gets = [lambda p: p["block_hit_ratio"], lambda p: p["compute_saving_ratio"],
                  lambda p: p["block_hit_ratio"] - p["prefix_hit_ratio"]]
    sizes = [int(r["cache_size"]) for r in rows]
    lo, hi = min(sizes) / 1.5, max(sizes) * 1.5
    panels = [
        ("block hit ratio", lambda r: _float(r, "block_hit_ratio")),
        ("compute-saving ratio", lambda r: _float(r, "compute_saving_ratio")),
        ("gap-spanning gain over first-miss\n(block hit ratio - prefix hit ratio)",
         lambda r: (None if _float(r, "prefix_hit_ratio") is None or _float(r, "block_hit_ratio") is None
                    else _float(r, "block_hit_ratio") - _float(r, "prefix_hit_ratio"))),
        ({"holes_per_req": "holes per served request"}.get(hole_field or "", "holes"),
         (lambda r: _float(r, hole_field)) if hole_field else (lambda r: None)),
    ]
    if any((r.get("replicas") or "1") != "1" for r in rows):
        # NOTE: a fleet of several: how unbalanced the router left it instead of the holes
        panels[3] = ("requests on the busiest replica / mean", lambda r: _float(r, "req_imbalance"))
    styles = series_styles(series)
    n_colours = 1 + max((c for c, _, _, _ in styles.values()), default=0)
    cmap = plt.get_cmap("tab20" if n_colours > 10 else "tab10")
    fig, axes = plt.subplots(2, 2, figsize=(13, 9), constrained_layout=True)
    for k, (ax, (ylabel, get)) in enumerate(zip(axes.flat, panels)):
        drawn = 0
        for j, (label, pts) in enumerate(curves if k < len(curve_gets) else ()):
            _draw_curve(ax, pts, curve_gets[k], label, lo, hi, "-" if j == 0 else ":")
            drawn += 1
        for key, pts in series.items():
            xy = [(int(r["cache_size"]), get(r)) for r in pts]
            xy = [(x, y) for x, y in xy if y is not None]
            if not xy:
                continue
            xs, ys = zip(*xy)
            colour, style, marker, label = styles[key]
            ax.plot(xs, ys, linestyle=style, marker=marker, markersize=3,
                    color=cmap(colour % cmap.N), label=label)
            drawn += 1
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_fmt_blocks))
        ax.set_xlabel("capacity (blocks)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not in these results", ha="center", va="center", transform=ax.transAxes)
        if bytes_per_block:
            gib = bytes_per_block / 1024**3
            sec = ax.secondary_xaxis("top", functions=(lambda b, gib=gib: b * gib, lambda g, gib=gib: g / gib))
            sec.xaxis.set_major_locator(LogLocator(base=2))
            sec.xaxis.set_major_formatter(FuncFormatter(lambda g, _pos: f"{g:g}"))
            sec.set_xlabel("capacity (GiB)")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right center", fontsize="small")
    fig.suptitle(title)
    return _save(fig, path, dpi)
