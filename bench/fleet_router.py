"""The router models against vllm-router 0.1.17 under concurrency: how far assignments agree.

    flock /tmp/vllm.lock .venv/bin/python bench/fleet_router.py [--concurrency 1,4,8] [--sessions 12]
    .venv/bin/python bench/fleet_router.py --analyze DIR     # again, from a run's DIR, no engine

Three real vLLM servers (the tiny model on the CPU, the ShadowConnector recording as r0..r2 under
one fleet key, KV events on) behind the real router (tests/router_support.py), driven by
``replay --session-headers`` with tests/router_support.py's multi-turn trace, ``--concurrency C``
for each C and each policy.  DIR (printed; ``--work``) keeps the replicas' recordings merged by
``shadow convert``, replay's rows and ``runs.json`` (each run's router worker order, send window
and served counts), so the comparison can be made again without engines.

The comparison: each run's requests (one per request: an admission that ended in a preemption
is folded into the request) are matched to the rows that sent them (prompt and blocks,
tests/router_support.py ``match_sent``) to take the session the client sent, then re-routed by
the same model (``shadow.sim.fleet``, names = the router's worker order) under ``--timing
recorded`` (each request routed at its recorded arrival, in flight until its recorded release),
and every request's replica is compared with the real one.  Printed per (C, policy): requests,
agreement, the first request (in arrival order) routed differently, requests whose arrival
order differs from the send order, requests routed while others were in flight, admissions
that ended in a preemption; for kv_aware the agreement given the same history (the model asked
at each decision while the real choices are kept: ``FollowReal``), and for a request routed
differently how near (ms) its arrival is to a neighbour's, the largest.  Then, for
kv_aware, the agreement given the same history with the client's times (routed at its send,
its new tokens active until its first token), and for cache_aware the decisions where its real key (characters)
and the model's (blocks) could decide differently (``text_gap``).
bench/out/fleet_router.json keeps every figure and both assignments.  One request at a time the agreement must be total
(tests/sim/fleet/test_vllm_router.py); docs/fleet.md says why it is not under concurrency.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: kv_aware index lags (s) tried given the same history
LAGS = (0.005, 0.05, 0.2)
POLICIES = [("round_robin", "round_robin"), ("consistent_hash", "consistent_hash:key=header"),
            ("cache_aware", "cache_aware"), ("kv_aware", "kv_aware:score=cost")]


def collect(work: Path, cs: list[int], sessions: int, turns: int) -> None:
    """Every (C, policy) run through the real router; writes ``work/runs.json``."""
    from tests.router_support import (conversation_trace, merge_recordings, replay_through,
                                      served_counts, start_fleet, start_router)
    from tests.sim.fleet.test_vllm_router import NUM_GPU_BLOCKS, REPLICAS
    from tests.vllm_support import http_get, tiny_model_path

    drive = conversation_trace(work / "drive.lcp", sessions=sessions, turns=turns)
    runs = []
    server_args = ["--num-gpu-blocks-override", str(NUM_GPU_BLOCKS), "--max-model-len", "1024"]
    with start_fleet(tiny_model_path(), REPLICAS, work, kv_events=True,
                     server_args=server_args) as fleet:
        urls = [str(u) for u in fleet.urls]
        for c in cs:
            for policy, model in POLICIES:
                fleet.reset()
                out = work / f"out-{policy}-{c}"
                with start_router(fleet, policy, log_dir=work) as rurl:
                    order = json.loads(http_get(rurl + "/list_workers"))["urls"]
                    if policy == "kv_aware":
                        # NOTE: ZMQ subscriptions take a moment to join; nothing is stored yet
                        time.sleep(2.0)
                    before = served_counts(urls)
                    t0 = time.time()
                    _, started = replay_through(drive, rurl, urls[0], out, concurrency=c,
                                                num_gpu_blocks=NUM_GPU_BLOCKS)
                    t1 = time.time()
                    served = [a - b for a, b in zip(served_counts(urls), before)]
                runs.append({"concurrency": c, "policy": policy, "model": model, "order": order,
                             "served": served, "t0_us": int(t0 * 1e6), "t1_us": int(t1 * 1e6),
                             "started_unix": started, "out": out.name})
        dirs = fleet.record_dirs
    merge_recordings(dirs, work / "fleet.lcp.zst")
    (work / "runs.json").write_text(json.dumps({"urls": urls, "runs": runs}, indent=1))


#: vllm-router 0.1.17's cache_aware key of a token-id prompt: this namespace, then 8 lowercase
#: hex characters a token (``src/protocols/spec.rs:2797-2852``, ``token_ids_with_prefix``)
CA_NAMESPACE = "\0ca:i:"


def _lcp(a, b) -> int:
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k


def text_gap(prompts: list[list[int]], blocks: list[list[int]], real: list[int],
             replicas: int, block_size: int, threshold: float) -> dict:
    """cache_aware on characters (the real tree's keys) against on blocks (the model), with
    the real router's own choices as the history: per decision, each replica's match rate
    both ways (the longest prefix the prompts routed to it share with this one: what a tree
    without eviction holds); counts the decisions where the best rate falls on the other side
    of ``threshold`` or the replicas at the best rate differ (the only ways the key can change
    a decision, loads equal), and the largest difference of a rate."""
    texts: list[list[str]] = [[] for _ in range(replicas)]
    held: list[list[list[int]]] = [[] for _ in range(replicas)]
    flips = best_sets = 0
    worst = 0.0
    for toks, ids, r in zip(prompts, blocks, real):
        text = CA_NAMESPACE + "".join(f"{t:08x}" for t in toks)
        full = ids[:len(toks) // block_size]
        rc = [max((_lcp(text, t) for t in texts[k]), default=0) / len(text)
              for k in range(replicas)]
        rb = [max((_lcp(full, h) for h in held[k]), default=0) * block_size / len(toks)
              for k in range(replicas)]
        worst = max(worst, max(abs(a - b) for a, b in zip(rc, rb)))
        flips += (max(rc) > threshold) != (max(rb) > threshold)
        best_sets += ({k for k in range(replicas) if rc[k] == max(rc)}
                      != {k for k in range(replicas) if rb[k] == max(rb)})
        texts[r].append(text)
        held[r].append(full)
    return {"threshold_flips": int(flips), "best_replicas_differ": int(best_sets),
            "max_rate_difference": round(worst, 4)}


class FollowReal:
    """A router model asked at every decision while the real router's choice is kept (its
    state follows the real assignments: kv_aware score=cost's active prefill tokens; the
    replicas' caches serve what the real router sent them): how often the model decides as
    the real router did given the same history, so one early difference does not count
    again in every later decision.  Duck-types :class:`shadow.sim.fleet.router.RouterChoice`."""

    def __init__(self, choice, to_model: list[int], prefill_end_us: list[int] | None = None
                 ) -> None:
        self.choice = choice
        self.to_model = to_model
        self.prefill_end_us = prefill_end_us
        self.picks: dict[int, int] = {}

    def __getattr__(self, key):
        return getattr(self.choice, key)

    def make(self, replicas: int, ctx):
        return _Follow(self.choice.make(replicas, ctx), self)


class _Follow:
    def __init__(self, inner, owner: FollowReal) -> None:
        self.inner = inner
        self.owner = owner

    def __getattr__(self, key):
        return getattr(self.inner, key)

    def route(self, q, view) -> int:
        _, new = self.inner.costs(q, view)
        self.owner.picks[q.index] = self.inner.route(q, view)
        real = self.owner.to_model[q.replica]
        self.inner._last = (real, new[real])
        self._index = q.index
        return real

    def placed(self, r: int, prefill_end_us: int) -> None:
        ends = self.owner.prefill_end_us
        self.inner.placed(r, prefill_end_us if ends is None else ends[self._index])


def same_history(trace, model: str, ends: list[int] | None, to_model: list[int],
                 real: list[int], setup) -> int:
    """Decisions of ``trace`` the model takes as the real router did (``real``: its replicas
    in the model's numbering), the real choices kept (:class:`FollowReal`)."""
    from shadow.sim import CacheSpec
    from shadow.sim.fleet.router import parse_router
    from shadow.sim.fleet.run import run_fleet
    from tests.sim.fleet.test_vllm_router import NUM_GPU_BLOCKS, REPLICAS

    follow = FollowReal(parse_router(model), to_model, ends)
    (res,) = run_fleet([CacheSpec("vllm", NUM_GPU_BLOCKS - 1)], trace, REPLICAS, follow, setup)
    assert [int(a) for a in res.assign] == real
    return sum(follow.picks[i] == real[i] for i in range(len(real)))


def analyze(work: Path, out_path: Path) -> None:
    import numpy as np

    from shadow.sim import CacheSpec
    from shadow.sim.fleet.router import parse_router
    from shadow.sim.fleet.run import FleetSetup, run_fleet
    from shadow.trace import open_trace
    from tests.router_support import fleet_window, match_sent
    from tests.sim.fleet.test_vllm_router import NUM_GPU_BLOCKS, REPLICAS
    from tests.vllm_support import BLOCK_SIZE

    from replay.tokens import TokenSynth, Vocab, vocab_from_model_dir
    from tests.vllm_support import tiny_model_path

    # NOTE: replay's vocabulary: --vocab-size with the model's special ids (replay/cli.py _vocab)
    special = vocab_from_model_dir(Path(tiny_model_path())).special
    gaps = []
    meta = json.loads((work / "runs.json").read_text())
    replica_of_url = {u: f"r{i}" for i, u in enumerate(meta["urls"])}
    with open_trace(str(work / "drive.lcp")) as tr:
        sent_rec = np.concatenate([b.records for b in tr])
    out = []
    print(f"{'C':>3} {'policy':16} {'requests':>8} {'agree':>7} {'first differs':>13} "
          f"{'arrival order != send':>21} {'routed with others in flight':>28} "
          f"{'preempted':>9} {'same history':>15} {'nearest (ms)':>12}")
    for run in meta["runs"]:
        rows = [json.loads(x) for x in (work / run["out"] / "requests.jsonl").read_text()
                .splitlines()]
        rows.sort(key=lambda x: x["seq"])
        ft, names, preempted = fleet_window(work / "fleet.lcp.zst", run["t0_us"], run["t1_us"],
                                            BLOCK_SIZE)
        match = match_sent(ft, rows, run["started_unix"])
        idx = [rows[j]["index"] for j in match]
        # NOTE: the recording cannot see the client's headers: the session it sent is the
        # driving trace's (consistent_hash's key)
        ft.rec["session_id"] = sent_rec["session_id"][idx]
        ft.rec["user_id"] = sent_rec["user_id"][idx]
        real = [names[int(x) - 1] for x in ft.rec["replica_id"]]
        arr, done = ft.rec["arrival_time_us"], ft.rec["complete_time_us"]
        # NOTE: replay's clock starts after started_unix; the offset is taken as the smallest
        # arrival - send (the quickest forward through the router)
        sent = np.array([(run["started_unix"] + rows[j]["sent_s"]) * 1e6 for j in match])
        off = float((arr - sent).min())
        spread = int((arr - sent - off).max())
        reordered = int(sum(1 for k, j in enumerate(sorted(range(ft.n), key=lambda i: match[i]))
                            if j != k))
        busy = int(sum(1 for i in range(ft.n) if np.any((arr < arr[i]) & (done > arr[i]))))
        setup = FleetSetup({"lookup": "vllm", "block_size_tokens": BLOCK_SIZE},
                           timing="recorded", names=run["order"])
        (res,) = run_fleet([CacheSpec("vllm", NUM_GPU_BLOCKS - 1)], ft, REPLICAS,
                           parse_router(run["model"]), setup)
        routed = [replica_of_url[run["order"][int(a)]] for a in res.assign]
        given = given_ttft = lagged = None
        if run["policy"] == "kv_aware":
            # the model's replica k is the router's k-th worker; names index the recording's
            to_model = [run["order"].index(meta["urls"][int(nm[1:])]) for nm in names]

            real_k = [to_model[int(x) - 1] for x in ft.rec["replica_id"]]
            given = same_history(ft, run["model"], None, to_model, real_k, setup)
            # the same with the client's times where the recording has the engine's: routed when
            # sent (the router decides one forward before the engine's arrival), each request's
            # new tokens active until its first token (the real router's begin_decode) instead
            # of until its admission
            ttft = [int((run["started_unix"] + rows[j]["first_token_s"]) * 1e6 + off)
                    for j in match]
            client = type(ft)(ft.rec.copy(), ft.off, ft.ids, ft.nxt, ft.header, ft.block_size)
            client.rec["arrival_time_us"] = np.minimum((sent + off).astype(np.int64), arr)
            given_ttft = same_history(client, run["model"], ttft, to_model, real_k, setup)
            # and with a late index: every store seen lag seconds late
            lagged = {lag: same_history(client, f"{run['model']},lag={lag}", ttft, to_model,
                                        real_k, setup) for lag in LAGS}
            print(f"kv_aware C={run['concurrency']}: same history {given}/{ft.n}; with the "
                  f"client's send and first-token times {given_ttft}/{ft.n}; and an index "
                  f"late by " + ", ".join(f"{k * 1e3:g} ms {v}" for k, v in lagged.items()))
        agree = sum(a == b for a, b in zip(real, routed))
        first = next((i for i in range(ft.n) if real[i] != routed[i]), None)
        # a request routed differently: how close (us) its arrival is to a neighbour's (in
        # arrival order), the largest over those requests
        near = max((min(int(arr[i] - arr[i - 1]) if i else 1 << 62,
                        int(arr[i + 1] - arr[i]) if i + 1 < ft.n else 1 << 62)
                    for i in range(ft.n) if real[i] != routed[i]), default=None)
        c, policy = run["concurrency"], run["policy"]
        gap = None
        if policy == "cache_aware":
            info = json.loads((work / run["out"] / "run.json").read_text())
            synth = TokenSynth(Vocab(size=info["vocab"]["size"], special=special), seed=info["seed"])
            prompts = [synth.prompt(rows[j]["blocks"], info["tokens_per_block"],
                                    rows[j]["index"], rows[j]["tail"]) for j in match]
            gap = text_gap(prompts, [ft.ids[ft.off[i]:ft.off[i + 1]].tolist() for i in
                                     range(ft.n)], [int(x) - 1 for x in ft.rec["replica_id"]],
                           REPLICAS, BLOCK_SIZE, parse_router(run["model"]).params
                           ["cache_threshold"])
            gaps.append((c, gap))
        print(f"{c:>3} {policy:16} {ft.n:>8} {agree:>4}/{ft.n:<3}"
              f"{'-' if first is None else first:>13} {reordered:>21} {busy:>28} {preempted:>9}"
              f"{'' if given is None else f'{given:>6}/{ft.n}':>16}"
              f"{'-' if near is None else f'{near / 1e3:.1f}':>13}")
        out.append({"concurrency": c, "policy": policy, "model": run["model"], "requests": ft.n,
                    "agree": agree, "first_differs": first, "served": run["served"],
                    "arrival_reordered": reordered, "routed_while_busy": busy,
                    "preempted_admissions": preempted, "agree_given_history": given,
                    "agree_given_history_client_times": given_ttft,
                    "agree_given_history_client_times_lag": lagged,
                    "differing_nearest_arrival_us": near, "forward_spread_us": spread,
                    "queued_us_max": int((ft.rec["start_time_us"] - arr).max()),
                    "text_gap": gap, "real": real,
                    "model_routed": routed})
    print("forwards slower than the quickest by up to (ms): " + ", ".join(
        f"C={r['concurrency']} {r['policy']} {r['forward_spread_us'] / 1e3:.0f}" for r in out))
    for c, gap in gaps:
        print(f"cache_aware, C={c}, characters against blocks: {gap}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(out, indent=1))
    print(f"wrote {out_path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", default="1,4,8")
    ap.add_argument("--sessions", type=int, default=12)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--work", default=None, help="where the run's files go (default: a new "
                                                   "temporary directory)")
    ap.add_argument("--analyze", default=None, metavar="DIR",
                    help="compare again from an earlier run's DIR (no engine starts)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "fleet_router.json"))
    args = ap.parse_args()
    if args.analyze:
        work = Path(args.analyze)
    else:
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fleet-router-"))
        work.mkdir(parents=True, exist_ok=True)
        print(f"run files in {work}")
        collect(work, [int(c) for c in args.concurrency.split(",")], args.sessions, args.turns)
    analyze(work, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
