"""Offline ``--timing recorded`` against the live shadow and the engine, under concurrency.

    flock /tmp/vllm.lock .venv/bin/python bench/fidelity_concurrency.py [--batches 1,4,8,16]

For each batch size a real CPU engine (the tiny model, the fidelity test's 27-block pool,
``max_num_seqs`` 16) with the ShadowConnector (policies vllm, lru, fifo, s3fifo, arc, sieve at
the engine's capacity and at 8, 16, 64 blocks; recording on) serves the connector's fidelity
workload (``_workload(7) + _workload(8)``: shared system prompts, multi-turn conversations,
one-off prompts) ``batch`` requests at a time (tests/connector/test_timing_recorded.py's
``serve_concurrently``).  The recording, joined by ``shadow convert``
(``bench/out/fidelity-conc<batch>.lcp.zst``), is served offline two ways:

* ``recorded``: ``--timing recorded`` (shadow/sim/timing/run.py), in every configured cache; its
  counters are compared with each live cache's;
* ``serial``: the same records one at a time in file (completion) order, through the same path.

Per request (the ``vllm`` policy at the engine's capacity; re-admissions after a preemption
left out, as vLLM's ``num_cached_tokens`` is the first admission's): the engine's
``num_cached_tokens``, the live shadow's prediction, ``recorded`` and ``serial``.  Prints a
markdown table (docs/connector.md) and writes ``bench/out/fidelity_concurrency.json``.  Needs
vLLM; no thresholds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))

from tests.connector.test_timing_recorded import (COUNTERS, join_recording,  # noqa: E402
                                                  serve_concurrently, serve_recorded)


def _one_at_a_time(batches):
    """The batches with times rewritten so that their requests run one after another."""
    out, base = [], 0
    for bt in batches:
        rec = bt.records.copy()
        i = np.arange(base, base + len(rec), dtype=np.int64)
        rec["start_time_us"], rec["complete_time_us"] = 2 * i, 2 * i + 1
        out.append(replace(bt, records=rec))
        base += len(rec)
    return out


def one(batch: int, work: Path, num_blocks: int | None) -> dict:
    from shadow.trace import open_trace

    live = serve_concurrently(batch, work / f"rec{batch}", num_blocks=num_blocks)
    joined = join_recording(work / f"rec{batch}", OUT / f"fidelity-conc{batch}.lcp.zst")
    keys = live["keys"]
    res, hits, start = serve_recorded(joined, keys)
    with open_trace(str(joined)) as tr:
        _r, hits_s, _s = serve_recorded(joined, keys, _one_at_a_time(list(tr)))
    counters = {k: {a: (float(getattr(r, a)), float(live["live"][k][c])) for a, c in COUNTERS}
                for k, r in zip(keys, res)}
    k0 = keys.index(f"vllm|{live['engine_blocks']}")
    order = np.argsort(start, kind="stable")       # the records in the live log's order
    assert len(order) == len(live["admitted"])
    per_req = []
    for j, (eng, live_hits, again) in zip(order, live["admitted"]):
        if not again:
            per_req.append({"engine": eng, "live": live_hits[k0],
                            "recorded": max(int(hits[j, k0]), 0),
                            "serial": max(int(hits_s[j, k0]), 0),
                            "recorded_all": np.maximum(hits[j], 0).tolist(),
                            "live_all": live_hits})
    return {"batch": batch, "requests": len(per_req), "preemptions": live["preemptions"],
            "keys": keys, "engine_blocks": live["engine_blocks"], "counters": counters,
            "per_request": per_req}


def summary(r: dict) -> str:
    pr = r["per_request"]
    eng = [p["engine"] for p in pr]

    def col(name: str) -> str:
        v = [p[name] for p in pr]
        return f"{sum(x == e for x, e in zip(v, eng))}/{len(pr)} ({sum(v)})"

    sim = [k for k in r["keys"] if not k.startswith("vllm|")]
    equal = sum(all(abs(a - b) < 1e-6 for a, b in r["counters"][k].values()) for k in sim)
    cols = [r["keys"].index(k) for k in sim]
    req_equal = sum([p["recorded_all"][c] for c in cols] == [p["live_all"][c] for c in cols]
                    for p in pr)
    return (f"| {r['batch']} | {r['requests']} | {r['preemptions']} | {sum(eng)} | {col('live')} "
            f"| {col('recorded')} | {col('serial')} | {equal}/{len(sim)} | {req_equal}/{len(pr)} |")


HEADER = ("| at a time | requests | preemptions | engine hit tokens | live `vllm` = engine "
          "(tokens) | recorded `vllm` = engine (tokens) | serial `vllm` = engine (tokens) | "
          "other caches: recorded counters = live | requests: recorded = live in every other "
          "cache |\n|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,4,8,16")
    ap.add_argument("--num-blocks", type=int, default=None,
                    help="the engine's KV blocks (default: the fidelity test's)")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for b in (int(x) for x in a.batches.split(",")):
            rows.append(one(b, Path(tmp), a.num_blocks))
            print(summary(rows[-1]), flush=True)
    (OUT / "fidelity_concurrency.json").write_text(json.dumps(rows, indent=1))
    print(HEADER)
    for r in rows:
        print(summary(r))
    for r in rows:
        for k, c in r["counters"].items():
            diff = {a: v for a, v in c.items() if abs(v[0] - v[1]) > 1e-6}
            if diff:
                print(f"batch {r['batch']} {k}: (recorded, live) {diff}")


if __name__ == "__main__":
    main()
