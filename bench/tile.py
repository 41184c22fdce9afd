"""Build a large JSONL trace by tiling the bundled Mooncake traces with id and time offsets.

Tile k shifts every hash id by ``k * (max id + 1)`` (so tiles share no blocks) and every
timestamp by ``k * (span + 1)`` ms (so the tiled trace stays sorted tile after tile).

    python bench/tile.py --min-accesses 10000000 --out bench/out/tiled.jsonl
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl",
           ROOT.parent / "shared" / "traces" / "mooncake_conversation.jsonl"]


def load(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f if line.strip()]


def tile(min_accesses: int, out: str) -> tuple[int, int]:
    """Write the tiled trace; returns (requests, block accesses)."""
    rows = []
    base = 0
    for src in SOURCES:  # NOTE: the sources' id spaces overlap: shift each past the previous
        if src.exists():
            part = load(src)
            for d in part:
                d["hash_ids"] = [h + base for h in d["hash_ids"]]
            base = max(base, 1 + max(max(d["hash_ids"], default=0) for d in part))
            rows.extend(part)
    if not rows:
        sys.exit("no source trace found")
    rows.sort(key=lambda d: d["timestamp"])  # stable: one merged, sorted base tile
    max_id = max(max(d["hash_ids"], default=0) for d in rows)
    span = max(d["timestamp"] for d in rows)
    per_tile = sum(len(d["hash_ids"]) for d in rows)
    n_tiles = max(1, -(-min_accesses // per_tile))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    n_req = 0
    with open(out, "wb") as f:
        for k in range(n_tiles):
            id_off, t_off = k * (max_id + 1), k * (span + 1)
            buf = []
            for d in rows:
                e = dict(d)
                e["timestamp"] = d["timestamp"] + t_off
                e["hash_ids"] = [h + id_off for h in d["hash_ids"]]
                buf.append(orjson.dumps(e))
            buf.append(b"")
            f.write(b"\n".join(buf))
            n_req += len(rows)
    return n_req, n_tiles * per_tile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-accesses", type=int, default=10_000_000)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "tiled.jsonl"))
    a = ap.parse_args()
    n_req, n_acc = tile(a.min_accesses, a.out)
    print(f"wrote {a.out}: {n_req} requests, {n_acc} block accesses")


if __name__ == "__main__":
    main()
