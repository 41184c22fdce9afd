"""What a FLOP share misses: the prefill time a prefix hit saves on one H200, against what the
per-block cost models predict.  The table in docs/sim.md ("Seconds, not FLOPs").

    .venv/bin/python bench/profile_table.py [--profile shadow/data/h200_prefill.jsonl]

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
from shadow.sim.cost.profile import load_profile  # noqa: E402

PROFILE = ROOT / "shadow" / "data" / "h200_prefill.jsonl"
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


def rows_for(path: Path, model: str) -> list[dict]:
    full = load_profile(str(path), model)
    pts = full.points()
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "config.json"
        cfg.write_text(json.dumps(CONFIGS[model]))
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
            held = Path(d) / "held.jsonl"
            held.write_text("".join(json.dumps({"cached": cc, "new": nn, "s": ss}) + "\n"
                                    for (cc, nn), ss in pts.items() if (cc, nn) != (c, n)))
            t_loo = float(load_profile(str(held)).seconds(c, n))
            out.append({"c": c, "n": n, "t0": t0, "t": s, "measured": (t0 - s) / t0,
                        "flops": share(flops, c, n), "fit": share(fit_costs, c, n),
                        "profile": (t0 - t_loo) / t0, "t_loo": t_loo})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=PROFILE)
    args = ap.parse_args()
    for model in CONFIGS:
        rows = rows_for(args.profile, model)
        print(f"\n{model}: saved share of the prefill, measured and predicted (B = {BLOCK})\n")
        print("| cached | new | t(0, c+n) ms | t(c, n) ms | measured | FLOP share | fit: | "
              "profile, point left out |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['c']:,} | {r['n']:,} | {r['t0'] * 1e3:.1f} | {r['t'] * 1e3:.1f} | "
                  f"{r['measured']:.2f} | {r['flops']:.2f} | {r['fit']:.2f} | "
                  f"{r['profile']:.2f} |")
        m = np.array([r["measured"] for r in rows])
        for key, name in (("flops", "FLOP share"), ("fit", "fit:"),
                          ("profile", "profile, point left out")):
            e = np.array([r[key] for r in rows]) - m
            print(f"\n{name}: error mean {e.mean():+.3f}, mean |error| {np.abs(e).mean():.3f}, "
                  f"largest |error| {np.abs(e).max():.3f} (at cached "
                  f"{rows[int(np.abs(e).argmax())]['c']:,}, new "
                  f"{rows[int(np.abs(e).argmax())]['n']:,})", end="")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
