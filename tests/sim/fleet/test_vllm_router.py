"""The router models against the real router: vllm-router 0.1.17 (PyPI) in front of three real
vLLM servers (the tiny model on the CPU, each with the ShadowConnector recording as replica r<i>
under one fleet key, KV events on), driven by ``replay --session-headers`` one request at a time
with a small multi-turn trace, for round_robin, consistent_hash, cache_aware and kv_aware.

Then, from the replicas' recordings merged by ``shadow convert`` (tests/router_support.py):

* every request is in the merged trace once, with its arrival <= admission < release, on the
  replica whose engine counted it (``vllm:request_success_total`` of each server, before and
  after the run; the router's own ``vllm_router_processed_requests_total`` also counts the
  ``/v1/models`` and ``/metrics`` calls it forwards, and ``kv_aware`` does not count there);
* each replica's ``vllm`` cache at the engine's capacity, serving that replica's requests,
  predicts each request's ``num_cached_tokens`` exactly (the usage the engine answered);
* re-routing the same requests with the same router model and parameters
  (``shadow.sim.fleet``, names = the router's worker URLs in its own order) puts every request
  on the replica the real router chose.

Run under the machine's engine lock: ``flock /tmp/vllm.lock .venv/bin/python -m pytest -q
tests/sim/fleet/test_vllm_router.py`` (about 3 minutes).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tests.router_support import (conversation_trace, fleet_window, match_sent,
                                  merge_recordings, replay_through, router_available,
                                  served_counts, start_fleet, start_router)
from tests.vllm_support import (BLOCK_SIZE, http_get, serve_like_vllm, tiny_model_path,
                                vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed"),
              pytest.mark.skipif(not router_available(),
                                 reason="vllm-router is not installed (make test-deps)")]

REPLICAS = 3
NUM_GPU_BLOCKS = 64            # per server; 63 usable: the engine's capacity
#: (vllm-router --policy, its arguments, the model in shadow.sim.fleet with the same rules)
#: Requests/s for kv_aware: a gap of about 0.7 s after each send for its KV events to arrive.
KV_EVENTS_RATE = 1.5

POLICIES = [
    ("round_robin", [], "round_robin"),
    ("consistent_hash", [], "consistent_hash:key=header"),
    ("cache_aware", [], "cache_aware"),
    ("kv_aware", [], "kv_aware:score=cost"),
]


@pytest.fixture(scope="module")
def fleet_runs(tmp_path_factory):
    """Every policy's run: (policy, the router's worker order, replay's rows, the requests each
    server finished, the send window in wall-clock us); the merged recording; the URLs."""
    work = tmp_path_factory.mktemp("router-fleet")
    drive = conversation_trace(work / "drive.lcp", sessions=6, turns=4)
    model = tiny_model_path()
    runs = []
    server_args = ["--num-gpu-blocks-override", str(NUM_GPU_BLOCKS), "--max-model-len", "1024"]
    with start_fleet(model, REPLICAS, work, kv_events=True, server_args=server_args) as fleet:
        urls = [str(u) for u in fleet.urls]
        for policy, args, _model in POLICIES:
            fleet.reset()
            with start_router(fleet, policy, args=args, log_dir=work) as rurl:
                order = json.loads(http_get(rurl + "/list_workers"))["urls"]
                if policy == "kv_aware":
                    # NOTE: ZMQ subscriptions take a moment to join; nothing is stored yet
                    time.sleep(2.0)
                before = served_counts(urls)
                t0 = time.time()
                # NOTE: kv_aware reads the KV events of the previous request's stores and
                # evictions; back to back on two loaded cores, one of 24 decisions once came
                # before the router had them (a lag the one-at-a-time comparison leaves out)
                rows, started = replay_through(drive, rurl, urls[0], work / f"out-{policy}",
                                               num_gpu_blocks=NUM_GPU_BLOCKS,
                                               rate=KV_EVENTS_RATE if policy == "kv_aware" else None)
                t1 = time.time()
                served = [a - b for a, b in zip(served_counts(urls), before)]
            runs.append((policy, order, rows, started, served, (int(t0 * 1e6), int(t1 * 1e6))))
        dirs = fleet.record_dirs
    merged = merge_recordings(dirs, work / "fleet.lcp.zst")
    return runs, merged, urls, drive


@pytest.mark.parametrize("k", range(len(POLICIES)), ids=[p[0] for p in POLICIES])
def test_real_router_against_the_models(fleet_runs, k):
    from shadow.sim import CacheSpec
    from shadow.sim.fleet.router import parse_router
    from shadow.sim.fleet.run import FleetSetup, run_fleet

    runs, merged, urls, drive = fleet_runs
    policy, order, rows, started, served, (t0, t1) = runs[k]
    model = POLICIES[k][2]
    ft, names, preempted = fleet_window(merged, t0, t1, BLOCK_SIZE)
    assert preempted == 0
    replica_of_url = {u: f"r{i}" for i, u in enumerate(urls)}
    assert sorted(order) == sorted(urls)

    # every request sent is in the recording once, in send order, with its times
    assert ft.n == len(rows)
    assert match_sent(ft, rows, started) == list(range(ft.n))
    assert [int(x) for x in ft.rec["input_length"]] == [r["prompt_tokens"] for r in rows]
    rec_replica = [names[int(x) - 1] for x in ft.rec["replica_id"]]
    assert all(0 < a <= s < c for a, s, c in zip(ft.rec["arrival_time_us"],
                                                 ft.rec["start_time_us"],
                                                 ft.rec["complete_time_us"]))
    # ... on the replica whose engine served it
    assert [rec_replica.count(f"r{i}") for i in range(REPLICAS)] == served

    # each replica's vllm cache predicts its engine's cached tokens, request by request
    cap = NUM_GPU_BLOCKS - 1
    predicted = [0] * ft.n
    for r in sorted(set(rec_replica)):
        mine = [i for i in range(ft.n) if rec_replica[i] == r]
        reqs = [(int(ft.rec[i]["input_length"]), int(ft.rec[i]["output_length"]),
                 ft.ids[ft.off[i]:ft.off[i + 1]]) for i in mine]
        for i, h in zip(mine, serve_like_vllm(reqs, cap)):
            predicted[i] = h
    engine = [r["cached_tokens"] for r in rows]
    assert predicted == engine, list(zip(rec_replica, engine, predicted))
    assert sum(engine) > 0

    # the model routes the same requests (in arrival order, one at a time: serial) to the same
    # replicas; consistent_hash's key is the session the client sent (the driving trace's:
    # the recording cannot see headers), every other model reads the recording alone
    if policy == "consistent_hash":
        from shadow.trace import open_trace

        with open_trace(str(drive)) as tr:
            sent = np.concatenate([b.records for b in tr])
        idx = [r["index"] for r in rows]
        ft.rec["session_id"] = sent["session_id"][idx]
        ft.rec["user_id"] = sent["user_id"][idx]
    (res,) = run_fleet([CacheSpec("vllm", cap)], ft, REPLICAS, parse_router(model),
                       FleetSetup({"lookup": "vllm", "block_size_tokens": BLOCK_SIZE},
                                  names=order))
    routed = [replica_of_url[order[int(a)]] for a in res.assign]
    differ = [(i, rec_replica[i], routed[i]) for i in range(ft.n) if rec_replica[i] != routed[i]]
    print(f"\n{policy}: {ft.n} requests, replicas {[rec_replica.count(r) for r in names]}, "
          f"model = router for {ft.n - len(differ)}/{ft.n}, engine cached tokens "
          f"{sum(engine)}")
    assert not differ, f"(request, real router, model): {differ}"
