"""What a FLOP share misses: the prefill time a prefix hit saves on one H200, against what the
per-block cost models predict.  The table in docs/sim.md ("Seconds, not FLOPs").

    .venv/bin/python bench/profile_table.py [--profile shadow/data/h200_prefill.jsonl]
        [--config NAME=config.json ...]

Another profile (``replay --measure-profile``'s) needs each of its models' shapes: ``--config
NAME=PATH`` names a Hugging Face config.json per ``model`` key of the file (``--config PATH``
alone for a file without ``model`` keys).

For every point of the profile with ``c > 0`` cached and ``n`` new tokens whose no-hit prefill
``t(0, c + n)`` is measured too, the measured share of the prefill a hit saves,
``(t(0, c + n) - t(c, n)) / t(0, c + n)``, beside what each cost model says the same request
saves (the ``compute_saving_ratio`` of a request whose first ``c / B`` blocks hit, B = 16):

* ``model:CONFIG``: the FLOP share (shadow/sim/cost/arch.py) from the model's shapes, as
  h200_prefill.md gives them;
* ``fit:REPORT``: replay's three-term prefill model fitted to the table's points the way
  ``replay report`` fits measured TTFT (replay/prefill.py, ordinary least squares), as per-block
  costs ``b*B + d*B*B*(p + 1/2)``;
* ``profile:FILE``, leave one out: the point itself is dropped from the table and ``t(c, n)``
  read from the rest (interpolated, or extrapolated past the row's edge), so the column shows
  the interpolation's error, not the exact figure the full table gives (every measured point is
  read back exactly).

Prints a Markdown table per model and the mean and largest error of each column.  Deterministic:
the figures are a function of the file.

``--holdout FILE`` (what ``replay/gpu/prefill_holdout.py`` wrote, ``bench/h200_prefill_holdout.jsonl``
by default) adds, per model, the points measured on the GPU again: for a point the table does not
hold, the profile's value (interpolated or extrapolated) and the fitted form's alone against the
measurement; for a point of the table measured again, the table's value against the new one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.prefill import fit_prefill  # noqa: E402
from shadow.sim.cost.arch import model_cost_fn  # noqa: E402
from shadow.errors import ShadowError  # noqa: E402
from shadow.sim.cost.profile import load_profile, profile_models  # noqa: E402

PROFILE = ROOT / "shadow" / "data" / "h200_prefill.jsonl"
HOLDOUT = ROOT / "bench" / "h200_prefill_holdout.jsonl"
BLOCK = 16
#: The shapes h200_prefill.md gives (Hugging Face config.json fields the FLOP count reads).
CONFIGS = {
    "llama3_8b": {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256},
    "qwen25_7b": {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
                  "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064},
}


def share(costs: np.ndarray, c: int, n: int) -> float:
    """The cost share of the first ``c`` of ``c + n`` tokens (whole blocks)."""
    return float(costs[:c // BLOCK].sum() / costs[:(c + n) // BLOCK].sum())


def rows_for(path: Path, model: str | None) -> list[dict]:
    full = load_profile(str(path), model)
    pts = full.points()
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "config.json"
        cfg.write_text(json.dumps(CONFIGS[model or ""]))
        longest = max(c + n for c, n in pts) // BLOCK + 1
        flops = model_cost_fn(f"{cfg},{BLOCK}")[1](longest)
        c_all = np.array([k[0] for k in pts], dtype=np.float64)
        n_all = np.array([k[1] for k in pts], dtype=np.float64)
        fit = fit_prefill(np.array(list(pts.values())), n_all, c_all + n_all)
        b, dd = (list(fit.coef) + [0.0, 0.0])[1:3]
        p = np.arange(longest, dtype=np.float64)
        fit_costs = b * BLOCK + dd * BLOCK * BLOCK * (p + 0.5)
        out = []
        for (c, n), s in sorted(pts.items()):
            if c == 0 or (0, c + n) not in pts:
                continue
            t0 = pts[(0, c + n)]
            row = [nn for cc, nn in pts if cc == c]
            loo = None
            if min(row) < n < max(row):
                # NOTE: only a point with row neighbours on both sides is interpolated when left
                # out; an edge point would be extrapolated far past the rest of its row
                held = Path(d) / "held.jsonl"
                held.write_text("".join(json.dumps({"cached": cc, "new": nn, "s": ss}) + "\n"
                                        for (cc, nn), ss in pts.items() if (cc, nn) != (c, n)))
                loo = (t0 - float(load_profile(str(held)).seconds(c, n))) / t0
            out.append({"c": c, "n": n, "t0": t0, "t": s, "measured": (t0 - s) / t0,
                        "flops": share(flops, c, n), "fit": share(fit_costs, c, n),
                        "profile": (t0 - float(full.seconds(c, n))) / t0, "loo": loo})
    return out


def decreases(path: Path, model: str) -> list[str]:
    """Where the profile's t falls as a token count grows, on a grid of 64-token steps to 40k:
    in new tokens per cell of cached rows, in cached tokens per pair of adjacent rows."""
    prof = load_profile(str(path), model)
    C = np.arange(0, 40961, 64, dtype=np.float64)
    N = np.arange(1, 40961, 16, dtype=np.float64)
    T = prof.seconds(C[:, None], N[None, :])
    rc = [r.cached for r in prof.rows] + [float("inf")]
    out = []
    dn = np.diff(T, axis=1) < -1e-12
    dc = np.diff(T, axis=0) < -1e-12
    for lo, hi in zip(rc, rc[1:]):
        # NOTE: a step's lower end decides its cell (in cached: C[i] of C[i] -> C[i + 1])
        for what, m, cs, ns in (("new", dn, C, N[1:]), ("cached", dc, C[:-1], N)):
            inside = (cs >= lo) & (cs < hi)
            ci, ni = np.nonzero(m & inside[:, None])
            if not ci.size:
                continue
            out.append(f"t falls with {what} tokens between the rows at cached {lo:,} and "
                       f"{hi:,}: cached {cs[ci].min():,.0f} to {cs[ci].max() + (64 if what == 'cached' else 0):,.0f}, "
                       f"new {ns[ni].min():,.0f} to {ns[ni].max():,.0f}")
    return out


def holdout_rows(path: Path, holdout: Path, model: str) -> list[dict]:
    """The GPU's points of ``model`` beside the profile's and the fitted form's values."""
    prof = load_profile(str(path), model)
    table = prof.points()
    out = []
    for line in holdout.read_text().splitlines():
        d = json.loads(line)
        if d.get("model") != model or "s" not in d:
            continue
        c, n = d["cached"], d["new"]
        out.append({"c": c, "n": n, "set": d["set"], "s": d["s"], "spread":
                    (d["max_s"] - d["min_s"]) / d["s"],
                    "profile": float(prof.seconds(c, n)), "fit": float(prof.fitted(c, n)),
                    "table": table.get((c, n))})
    return out


def print_holdout(rows: list[dict], model: str) -> None:
    print(f"\n{model}: measured again on the GPU (ms), against the profile of the table\n")
    print("| set | cached | new | measured | repeats' spread | profile | error | fitted form "
          "alone | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        e_p = r["profile"] / r["s"] - 1
        e_f = r["fit"] / r["s"] - 1
        print(f"| {r['set']} | {r['c']:,} | {r['n']:,} | {r['s'] * 1e3:.1f} | "
              f"{r['spread']:.0%} | {r['profile'] * 1e3:.1f} | {e_p:+.0%} | "
              f"{r['fit'] * 1e3:.1f} | {e_f:+.0%} |")
    for which in ("holdout", "table"):
        sub = [r for r in rows if r["set"] == which]
        if not sub:
            continue
        e_p = np.array([r["profile"] / r["s"] - 1 for r in sub])
        e_f = np.array([r["fit"] / r["s"] - 1 for r in sub])
        big = [r for r in sub if r["s"] >= 0.1]
        e_big = np.array([r["profile"] / r["s"] - 1 for r in big])
        print(f"\n{which} ({len(sub)} points): profile mean |error| {np.abs(e_p).mean():.1%}, "
              f"largest {np.abs(e_p).max():.1%}; fitted form alone mean |error| "
              f"{np.abs(e_f).mean():.1%}, largest {np.abs(e_f).max():.1%}"
              + (f"; points of 100 ms and more ({len(big)}): profile mean |error| "
                 f"{np.abs(e_big).mean():.1%}, largest {np.abs(e_big).max():.1%}" if big else ""),
              end="")
    print()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=PROFILE)
    ap.add_argument("--holdout", type=Path, default=HOLDOUT,
                    help="the GPU's points measured again (empty: none)")
    ap.add_argument("--config", action="append", default=[], metavar="[NAME=]PATH",
                    help="a model's config.json (its shapes for the FLOP share)")
    args = ap.parse_args()
    for item in args.config:
        name, _, path = item.rpartition("=")
        try:
            CONFIGS[name] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            ap.error(f"--config {item}: {exc}")
    try:
        models = profile_models(str(args.profile)) or [None]
    except ShadowError as exc:
        ap.error(str(exc))
    missing = [m for m in models if (m or "") not in CONFIGS]
    if missing:
        ap.error(f"{args.profile}: no shapes for model {missing[0] or '(no model key)'}: pass "
                 f"--config {missing[0] + '=' if missing[0] else ''}config.json")
    for model in models:
        rows = rows_for(args.profile, model)
        print(f"\n{model}: saved share of the prefill, measured and predicted (B = {BLOCK})\n")
        print("| cached | new | t(0, c+n) ms | t(c, n) ms | measured | FLOP share | fit: | "
              "profile | profile, point left out |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            loo = "-" if r["loo"] is None else f"{r['loo']:.2f}"
            print(f"| {r['c']:,} | {r['n']:,} | {r['t0'] * 1e3:.1f} | {r['t'] * 1e3:.1f} | "
                  f"{r['measured']:.2f} | {r['flops']:.2f} | {r['fit']:.2f} | "
                  f"{r['profile']:.2f} | {loo} |")
        for key, name in (("flops", "FLOP share"), ("fit", "fit:"), ("profile", "profile"),
                          ("loo", "profile, point left out (the interior points)")):
            sub = [r for r in rows if r[key] is not None]
            m = np.array([r["measured"] for r in sub])
            e = np.array([r[key] for r in sub]) - m
            print(f"\n{name}: error mean {e.mean():+.3f}, mean |error| {np.abs(e).mean():.3f}, "
                  f"largest |error| {np.abs(e).max():.3f} (at cached "
                  f"{sub[int(np.abs(e).argmax())]['c']:,}, new "
                  f"{sub[int(np.abs(e).argmax())]['n']:,})", end="")
        print()
        for line in decreases(args.profile, model) or ["t never falls as a token count grows"]:
            print(f"- {line}")
        if str(args.holdout) and args.holdout.is_file():
            print_holdout(holdout_rows(args.profile, args.holdout, model), model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
