"""The router models against vllm-router 0.1.17 under concurrency: how far assignments agree.

    flock /tmp/vllm.lock .venv/bin/python bench/fleet_router.py [--concurrency 1,4] [--sessions 12]

Three real vLLM servers (the tiny model on the CPU, the ShadowConnector recording as r0..r2 under
one fleet key, KV events on) behind the real router (tests/router_support.py), driven by
``replay --session-headers`` with tests/router_support.py's multi-turn trace, ``--concurrency C``
for each C and each policy.  The replicas' recordings, merged by ``shadow convert``, are then
re-routed by the same model (``shadow.sim.fleet``, names = the router's worker order) under
``--timing recorded`` (each request routed at its recorded start, in flight until its recorded
release), and every request's replica is compared with the real one.  Printed per (C, policy):
requests, agreement, requests whose engine admission order differs from the send order, and
requests routed while others were in flight; bench/out/fleet_router.json keeps every figure.
One request at a time the agreement must be total (tests/sim/fleet/test_vllm_router.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POLICIES = [("round_robin", "round_robin"), ("consistent_hash", "consistent_hash:key=header"),
            ("cache_aware", "cache_aware"), ("kv_aware", "kv_aware:score=cost")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "fleet_router.json"))
    args = ap.parse_args()
    import tempfile

    import numpy as np

    from shadow.sim import CacheSpec
    from shadow.sim.fleet.router import parse_router
    from shadow.sim.fleet.run import FleetSetup, run_fleet
    from tests.router_support import (conversation_trace, fleet_window, merge_recordings,
                                      replay_through, served_counts, start_fleet, start_router)
    from tests.sim.fleet.test_vllm_router import NUM_GPU_BLOCKS, REPLICAS
    from tests.vllm_support import BLOCK_SIZE, http_get, tiny_model_path

    work = Path(tempfile.mkdtemp(prefix="fleet-router-"))
    drive = conversation_trace(work / "drive.lcp", sessions=args.sessions, turns=args.turns)
    cs = [int(c) for c in args.concurrency.split(",")]
    runs = []
    server_args = ["--num-gpu-blocks-override", str(NUM_GPU_BLOCKS), "--max-model-len", "1024"]
    with start_fleet(tiny_model_path(), REPLICAS, work, kv_events=True,
                     server_args=server_args) as fleet:
        urls = [str(u) for u in fleet.urls]
        for c in cs:
            for policy, model in POLICIES:
                fleet.reset()
                with start_router(fleet, policy, log_dir=work) as rurl:
                    order = json.loads(http_get(rurl + "/list_workers"))["urls"]
                    if policy == "kv_aware":
                        time.sleep(2.0)
                    before = served_counts(urls)
                    t0 = time.time()
                    rows = replay_through(drive, rurl, urls[0], work / f"out-{policy}-{c}",
                                          concurrency=c, num_gpu_blocks=NUM_GPU_BLOCKS)
                    t1 = time.time()
                    served = [a - b for a, b in zip(served_counts(urls), before)]
                runs.append((c, policy, model, order, rows, served, int(t0 * 1e6), int(t1 * 1e6)))
        dirs = fleet.record_dirs
    merged = merge_recordings(dirs, work / "fleet.lcp.zst")
    replica_of_url = {u: f"r{i}" for i, u in enumerate(urls)}
    out = []
    print(f"{'C':>3} {'policy':16} {'requests':>8} {'agree':>7} {'admission order != send':>24}"
          f" {'routed with others in flight':>29}")
    for c, policy, model, order, rows, served, t0, t1 in runs:
        ft, names = fleet_window(merged, t0, t1, BLOCK_SIZE)
        real = [names[int(x) - 1] for x in ft.rec["replica_id"]]
        sent = sorted(range(len(rows)), key=lambda i: rows[i]["sent_s"])
        by_start = np.argsort(ft.rec["start_time_us"], kind="stable")
        reordered = int(np.count_nonzero(by_start != np.arange(ft.n)))
        start, done = ft.rec["start_time_us"], ft.rec["complete_time_us"]
        busy = int(sum(1 for i in range(ft.n) if np.any((start < start[i]) & (done > start[i]))))
        (res,) = run_fleet([CacheSpec("vllm", NUM_GPU_BLOCKS - 1)], ft, REPLICAS,
                           parse_router(model),
                           FleetSetup({"lookup": "vllm", "block_size_tokens": BLOCK_SIZE},
                                      timing="recorded", names=order))
        routed = [replica_of_url[order[int(a)]] for a in res.assign]
        agree = sum(a == b for a, b in zip(real, routed))
        print(f"{c:>3} {policy:16} {ft.n:>8} {agree:>4}/{ft.n:<3} {reordered:>24} {busy:>29}")
        out.append({"concurrency": c, "policy": policy, "model": model, "requests": ft.n,
                    "agree": agree, "served": served, "send_order": sent,
                    "admission_reordered": reordered, "routed_while_busy": busy,
                    "real": real, "model_routed": routed})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
