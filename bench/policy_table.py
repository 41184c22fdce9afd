"""Every registered policy's `--no-pin` block hit ratio on both bundled Mooncake traces at
several sizes, next to lru and belady: the table in docs/policies.md ("Every policy on the
bundled traces").

    .venv/bin/python bench/policy_table.py [--sizes 2k,8k,32k] [--policies lru,arc,...]

The policy list is the registry's built policies (`shadow.sim.registry.policy_specs`, in its
order; an unbuilt one is left out) unless `--policies` names some (lru and belady are always added: they are the reference points); each
trace is one `shadow simulate --no-pin` pass over every (policy, size) cache.  Prints a Markdown
table: one row per policy, one column per (trace, size), the block hit ratio to 4 places, with a
`*` where that is above lru's to 4 places; policies that read the future (`needs_future`) are marked
"oracle" and are not counted in the last row, the best policy without the future per column.
Hit ratios are deterministic (fixed seeds), so one pass is the figure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = (ROOT / "tests" / "data" / "mooncake_conversation.jsonl",
          ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")
# NOTE: ratios are compared as printed, so a `*` never marks a cell that reads the same as lru's.
PLACES = 4


def run_trace(trace: Path, policies: list[str], sizes: str) -> dict[tuple[str, int], float]:
    """(policy, size) -> block hit ratio of one `shadow simulate --no-pin` pass."""
    cmd = [sys.executable, "-m", "shadow", "simulate", "--trace", str(trace), "--no-pin",
           "--algo", ",".join(policies), "--cache-size", sizes, "--format", "result"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
    res = {}
    for line in out.splitlines():
        if not line.startswith("RESULT "):
            continue
        kv = dict(f.split("=", 1) for f in line.split()[1:])
        res[(kv["algo"], int(kv["cache_size"]))] = float(kv["block_hit_ratio"])
    return res


def table(results: dict[str, dict[tuple[str, int], float]], policies: list[str],
          sizes: list[int], oracles: set[str]) -> list[str]:
    """Markdown lines: header, one row per policy, the best policy without the future."""
    head = ["policy"] + [f"{t.split('_')[1].split('.')[0]} {s // 1024}k"
                         for t in results for s in sizes]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for p in policies:
        cells = []
        for res in results.values():
            for s in sizes:
                v, lru = res[(p, s)], res[("lru", s)]
                shown, lru_shown = f"{v:.{PLACES}f}", f"{lru:.{PLACES}f}"
                beats = float(shown) > float(lru_shown) and p != "lru"
                cells.append(shown + (" *" if beats else ""))
        name = f"{p} (oracle)" if p in oracles else p
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    best = []
    for res in results.values():
        for s in sizes:
            v, p = max((res[(p, s)], p) for p in policies if p not in oracles)
            best.append(f"{p} {v:.{PLACES}f}")
    lines.append("| best without the future | " + " | ".join(best) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2k,8k,32k", help="cache sizes in blocks, k suffix x1024")
    ap.add_argument("--policies", default="",
                    help="comma list (default: every built policy); lru and belady added")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from bench._common import parse_size
    from shadow.sim.registry import policy_specs
    specs = policy_specs()
    if args.policies:
        chosen = set(args.policies.split(",")) | {"lru", "belady"}
        unknown = chosen - set(specs)
        if unknown:
            sys.exit(f"policy_table: unknown or unbuilt policy {', '.join(sorted(unknown))}")
        policies = [p for p in specs if p in chosen]
    else:
        policies = list(specs)
    oracles = {p for p in policies if specs[p].needs_future}
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    results = {t.name: run_trace(t, policies, args.sizes) for t in TRACES}
    print("\n".join(table(results, policies, sizes, oracles)))


if __name__ == "__main__":
    main()
