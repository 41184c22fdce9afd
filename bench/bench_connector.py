"""The live shadow's costs, with baselines measured in the same run.

    flock /tmp/vllm.lock .venv/bin/python bench/bench_connector.py [--quick]

Measures (writes bench/out/bench_connector.json; figures go to docs/performance.md):

* hooks    the scheduler-side hook cost per request (``get_num_new_matched_tokens`` +
           ``update_state_after_alloc`` + the step's ``build_connector_meta`` +
           ``request_finished``) of a real ShadowConnector inside a
           real in-process engine (default policies x capacities), on real ``vllm.v1.request.
           Request`` objects hashed by the engine's own block hasher, for 8, 64 and 512 blocks;
           once with the worker drained between requests (the hook alone) and once back to back
           (the worker competing for the GIL).  Target: median <= 20 us + 0.1 us/block.  Also
           ``build_connector_meta`` alone for a decode step of 256 running requests.
* worker   the worker's sustained rate with 5 policies x 4 capacities: admissions and releases of
           the bundled trace's requests (hashes as 32-byte digests, interning included) queued
           up front, then drained by the worker thread; rounds alternate between one
           ``serve_live`` call per event (the old per-request pattern) and batches of up to
           ``BATCH_MAX`` events, and must give the same counters.  Target: >= 1M block lookups/s.
* worker-mrc  (``--only worker-mrc``) batched rounds without and with the sampled miss-ratio
           curve (``mrc``), alternating: its worker CPU per request.
* worker-ab  (``--only worker-ab --trees BASE TREE...``) the same batched rounds, without and
           with two offload tiers, in each built source tree (its own process, PYTHONPATH),
           interleaved; every tree must give the same counters.  Reports the median per-round
           ratio of the baseline's worker CPU seconds to each tree's.
* concurrency  the gap between the shadow ``vllm`` policy at the engine's capacity and the
           engine's own per-request hits, with the fidelity workload sent 1, 4 and 8 at a time.
* engine   request latency with and without the connector: three in-process engines alive at
           once in their own processes (off-1, on, off-2; same model, settings and prompts), each
           request sent to each in turn (order rotated), one running at a time, two passes over
           the prompts.  Reports medians and p90 per engine, on/off ratios with a bootstrap 90%
           interval, and the A/A ratio off-2/off-1 as the noise.  Target: no difference beyond
           noise.

Timing thresholds live here, never in tests.  The machine is shared: read the ratios.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
# NOTE: appended, so a PYTHONPATH tree comes first (the worker A/B runs other trees' shadow)
sys.path.append(str(ROOT))

from tests.vllm_support import (BLOCK_SIZE, inprocess_llm, random_token_ids,  # noqa: E402
                                tiny_model_path)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _shadow_ktc(extra: dict):
    from vllm.config import KVTransferConfig

    return KVTransferConfig(kv_connector="ShadowConnector",
                            kv_connector_module_path="shadow.connector", kv_role="kv_producer",
                            kv_connector_extra_config=extra)


# ---------------------------------------------------------------------------------------------
def bench_hooks(n_per_size: int, extra: dict | None = None) -> dict:
    from vllm import SamplingParams
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

    from shadow.connector.connector import INSTANCES

    out: dict = {}
    # NOTE: ``extra`` adds connector keys (e.g. tiers, docs/performance.md "Connector")
    with inprocess_llm(tiny_model_path(),
                       kv_transfer_config=_shadow_ktc({**(extra or {}), "engine_id": "bench"}),
                       num_gpu_blocks_override=4096, max_model_len=2048) as llm:
        core = llm.llm_engine.engine_core.engine_core
        hasher = core.request_block_hasher
        conn = [c for c in INSTANCES if c.cfg.engine_id == "bench"][0]
        out["caches"] = len(conn.cache_keys)
        out["extra"] = extra or {}
        sp = SamplingParams(max_tokens=1)
        for n_blocks in (8, 64, 512):
            for mode in ("drained", "back_to_back"):
                reqs = []
                for i in range(n_per_size):
                    # NOTE: a shared prefix of half the blocks, so lookups hit and miss
                    toks = (random_token_ids(n_blocks * BLOCK_SIZE // 2, seed=n_blocks)
                            + random_token_ids(n_blocks * BLOCK_SIZE // 2 + 5,
                                               seed=10_000 * n_blocks + i))
                    reqs.append(Request(f"bench-{mode}-{n_blocks}-{i}", toks, sp, None,
                                        block_hasher=hasher))
                assert len(reqs[0].block_hashes) == n_blocks
                admit_us, finish_us = [], []
                pc = time.perf_counter_ns
                dropped0 = conn.counters.dropped
                outs = []
                for r in reqs:
                    so = SchedulerOutput.make_empty()
                    so.num_scheduled_tokens[r.request_id] = r.num_tokens
                    outs.append(so)
                for r, so in zip(reqs, outs):
                    # NOTE: the admission's step ends with build_connector_meta (the step event)
                    t0 = pc()
                    conn.get_num_new_matched_tokens(r, 0)
                    conn.update_state_after_alloc(r, None, 0)
                    conn.build_connector_meta(so)
                    t1 = pc()
                    r.num_computed_tokens = r.num_tokens - 1
                    t2 = pc()
                    conn.request_finished(r, [])
                    t3 = pc()
                    admit_us.append((t1 - t0) / 1e3)
                    finish_us.append((t3 - t2) / 1e3)
                    if mode == "drained":
                        conn.flush()
                conn.flush(600)
                total = [a + f for a, f in zip(admit_us, finish_us)]
                target = 20.0 + 0.1 * n_blocks
                out[f"{mode}/{n_blocks}"] = {
                    "blocks": n_blocks, "requests": n_per_size,
                    "median_us": round(statistics.median(total), 2),
                    "p90_us": round(_pct(total, 0.9), 2), "p99_us": round(_pct(total, 0.99), 2),
                    "admit_median_us": round(statistics.median(admit_us), 2),
                    "finish_median_us": round(statistics.median(finish_us), 2),
                    "target_us": target,
                    "meets_target": statistics.median(total) <= target,
                    "dropped": conn.counters.dropped - dropped0,
                }
                print("hooks", mode, out[f"{mode}/{n_blocks}"], flush=True)
        # a decode step of 256 running requests: build_connector_meta alone, per step
        running = [Request(f"bench-step-{i}", random_token_ids(70, seed=i), sp, None,
                           block_hasher=hasher) for i in range(256)]
        so = SchedulerOutput.make_empty()
        for r in running:
            so.num_scheduled_tokens[r.request_id] = r.num_tokens
            conn.get_num_new_matched_tokens(r, 0)
            conn.update_state_after_alloc(r, None, 0)
        conn.build_connector_meta(so)
        conn.flush(600)
        cached = so.scheduled_cached_reqs
        for r in running:
            so.num_scheduled_tokens[r.request_id] = 1
            cached.req_ids.append(r.request_id)
            cached.num_computed_tokens.append(r.num_tokens - 1)
        so.scheduled_new_reqs = []
        step_us = []
        for _ in range(n_per_size):
            t0 = time.perf_counter_ns()
            conn.build_connector_meta(so)
            step_us.append((time.perf_counter_ns() - t0) / 1e3)
        conn.flush(600)
        out["step/256"] = {"running": 256, "steps": n_per_size,
                           "median_us": round(statistics.median(step_us), 2),
                           "p90_us": round(_pct(step_us, 0.9), 2)}
        print("hooks step", out["step/256"], flush=True)
        for r in running:
            r.num_computed_tokens = r.num_tokens - 1
            conn.request_finished(r, [])
        conn.flush(600)
    return out


# ---------------------------------------------------------------------------------------------
def _worker_requests(max_requests: int) -> list[tuple[list[bytes], int]]:
    from shadow.trace import bundled_trace_path, open_trace

    reqs = []
    with open_trace(bundled_trace_path()) as tr:
        for batch in tr:
            for i in range(batch.n_requests):
                ids = batch.request_blocks(i)
                n_in = int(batch.records[i]["input_length"])
                reqs.append(([int(x).to_bytes(32, "little") for x in ids], n_in))
                if len(reqs) >= max_requests:
                    return reqs
    return reqs


def worker_round(reqs: list, batch_max: int, extra: dict | None = None) -> dict:
    """One fresh worker drains every request's admission and release, ``batch_max`` events per
    ``Simulator.serve_live`` call (1: one call per request per cache, the old pattern)."""
    from shadow.connector import worker as wmod
    from shadow.connector.config import parse_extra_config
    try:
        from shadow.connector.schema import CACHE_FIELDS
    except ImportError:   # NOTE: a tree older than the schema module (the worker A/B)
        CACHE_FIELDS = wmod.CACHE_FIELDS

    B = 512  # the bundled Mooncake trace's tokens per block
    # NOTE: engine capacity chosen so the 4 capacities span "thrashing" to "holds most"
    cfg = parse_extra_config({"policies": ["vllm", "lru", "s3fifo", "arc", "sieve"],
                              "queue_size": 4 * len(reqs) + 16, "prediction_log_size": 1024,
                              **(extra or {})},
                             block_size=B, engine_blocks=4096)
    w = wmod.ShadowWorker(cfg, start=False)
    w.batch_max = batch_max
    for k, (hashes, n_in) in enumerate(reqs):
        w.submit(wmod.Admit(f"r{k}", hashes, n_in, 0, False, float(k)))
        w.submit_control(wmod.Release(f"r{k}", [], 10, float(k) + 0.5, n_in,
                          1 if n_in % B else 0))
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    w.start()
    assert w.flush(3600)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    w.stop()
    snap = w.snapshot
    li = CACHE_FIELDS.index("block_lookups")
    lookups = sum(row[li] for row in snap.caches)
    admitted_blocks = sum(len(h) for h, _ in reqs) * len(snap.caches)
    return {"batch_max": batch_max, "caches": len(snap.caches),
            "capacities": list(cfg.capacities), "requests": len(reqs),
            "lookups": int(lookups), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "lookups_per_s": round(lookups / wall),
            "blocks_admitted_per_s": round(admitted_blocks / wall),
            "requests_per_s": round(len(reqs) / wall),
            # same counters whatever the batching: the batched path changes no result
            "counters": hash(snap.caches),
            # every figure the worker keeps (the worker A/B compares trees by it)
            "outcome": hashlib.sha1(repr((snap.caches, snap.stopped, snap.tiers,
                                          snap.tier_occupancy, list(w.predictions))).encode()
                                    ).hexdigest()}


def bench_worker_tiers(max_requests: int, repeats: int = 3) -> dict:
    """Batched worker rounds without and with two offload tiers behind the engine-capacity
    ``vllm`` cache (8k and 32k one-block chunks), alternating, on the same requests: what the
    tier model (pure Python, on the worker thread) costs the worker's rate."""
    from shadow.connector.worker import BATCH_MAX

    reqs = _worker_requests(max_requests)
    extra = {"tiers": "cpu:8kblk,32kblk:lru"}
    rounds = []
    for _ in range(repeats):
        for x in (None, extra):
            r = worker_round(reqs, BATCH_MAX, x)
            r["tiers"] = bool(x)
            print("worker-tiers", r, flush=True)
            rounds.append(r)
    plain = [r for r in rounds if not r["tiers"]]
    tiered = [r for r in rounds if r["tiers"]]
    assert len({r["counters"] for r in rounds}) == 1, "a tier changed a tier-1 counter"
    # NOTE: the worker's CPU seconds (every thread of the process), not the wall clock: the
    # caches serve without the GIL on the other core, the tiers in Python with it
    best = (min(r["cpu_s"] for r in plain), min(r["cpu_s"] for r in tiered))
    res = {"rounds": [{k: v for k, v in r.items() if k not in ("counters", "outcome")}
                      for r in rounds],
           "requests": len(reqs), "tiers": extra["tiers"], "cpu_s_without": best[0],
           "cpu_s_with": best[1], "cpu_ratio": round(best[1] / best[0], 3),
           "tier_us_per_request": round((best[1] - best[0]) / len(reqs) * 1e6, 1)}
    print("worker-tiers", {k: v for k, v in res.items() if k != "rounds"}, flush=True)
    return res


def bench_worker_mrc(max_requests: int, repeats: int = 5) -> dict:
    """Batched worker rounds without and with the sampled miss-ratio curve (``mrc``: off, and
    the default 16,384 tracked ids), alternating, on the same requests: what the curve costs the
    worker per request (its CPU seconds over every thread)."""
    from shadow.connector.worker import BATCH_MAX

    reqs = _worker_requests(max_requests)
    rounds = []
    for _ in range(repeats):
        for on in (False, True):
            r = worker_round(reqs, BATCH_MAX, {"mrc": on})
            r["mrc"] = on
            print("worker-mrc", r, flush=True)
            rounds.append(r)
    assert len({r["counters"] for r in rounds}) == 1, "the curve changed a cache's counter"
    med = [statistics.median(r["cpu_s"] for r in rounds if r["mrc"] == on)
           for on in (False, True)]
    res = {"rounds": [{k: v for k, v in r.items() if k not in ("counters", "outcome")}
                      for r in rounds],
           "requests": len(reqs), "cpu_s_without": med[0], "cpu_s_with": med[1],
           "cpu_ratio": round(med[1] / med[0], 3),
           "mrc_us_per_request": round((med[1] - med[0]) / len(reqs) * 1e6, 2)}
    print("worker-mrc", {k: v for k, v in res.items() if k != "rounds"}, flush=True)
    return res


def bench_worker(max_requests: int, repeats: int = 2) -> dict:
    """Per-event (batch 1) and batched worker rounds, alternating, on the same requests."""
    from shadow.connector.worker import BATCH_MAX

    reqs = _worker_requests(max_requests)
    rounds = []
    for _ in range(repeats):
        for bm in (1, BATCH_MAX):
            r = worker_round(reqs, bm)
            print("worker", r, flush=True)
            rounds.append(r)
    assert len({r["counters"] for r in rounds}) == 1, "batching changed the shadow's counters"
    best = {bm: max(r["lookups_per_s"] for r in rounds if r["batch_max"] == bm)
            for bm in (1, BATCH_MAX)}
    res = {"rounds": [{k: v for k, v in r.items() if k not in ("counters", "outcome")}
                      for r in rounds],
           "requests": len(reqs), "caches": rounds[0]["caches"],
           "lookups_per_s_per_event": best[1], "lookups_per_s_batched": best[BATCH_MAX],
           "speedup": round(best[BATCH_MAX] / best[1], 2),
           "meets_target": best[BATCH_MAX] >= 1e6}
    print("worker", {k: v for k, v in res.items() if k != "rounds"}, flush=True)
    return res


def worker_server(max_requests: int) -> None:
    """Serve worker rounds of this process's ``shadow`` (PYTHONPATH): one JSON line in
    (``{"batch_max": n, "extra": {...}}``), one :func:`worker_round` result out."""
    reqs = _worker_requests(max_requests)
    print(MARK + json.dumps({"ready": len(reqs)}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        q = json.loads(line)
        print(MARK + json.dumps(worker_round(reqs, q["batch_max"], q["extra"] or None)),
              flush=True)


def bench_worker_ab(trees: list[str], max_requests: int, rounds: int = 5) -> dict:
    """The worker's CPU per request in each of ``trees`` (built source trees; the first is the
    baseline), batched rounds without and with two offload tiers, the trees' order reversed on
    odd rounds.  Every tree must give the same counters (the same shadow); the figure is the
    median per-round ratio of the baseline's CPU seconds to each tree's (>1: faster)."""
    import subprocess

    trees = [str(Path(t).resolve()) for t in trees]
    procs = {}
    for t in trees:
        procs[t] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker-server",
             "--requests", str(max_requests)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd="/", env=dict(os.environ, PYTHONPATH=t))
    configs = {"plain": None, "tiers": {"tiers": "cpu:8kblk,32kblk:lru"}}

    def read(p):
        for line in p.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise RuntimeError(f"worker server exited (rc {p.wait()})")

    try:
        for t in trees:
            read(procs[t])
        cpu: dict[str, dict[str, list[float]]] = {c: {t: [] for t in trees} for c in configs}
        for r in range(rounds):
            for name, extra in configs.items():
                counters = set()
                for t in (trees if r % 2 == 0 else trees[::-1]):
                    p = procs[t]
                    p.stdin.write(json.dumps({"batch_max": 256, "extra": extra}) + "\n")
                    p.stdin.flush()
                    res = read(p)
                    cpu[name][t].append(res["cpu_s"])
                    counters.add(res["outcome"])
                assert len(counters) == 1, f"{name}: the trees' figures differ"
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    base = trees[0]
    out: dict = {"trees": trees, "requests": max_requests, "rounds": rounds, "configs": {}}
    for name in configs:
        d = cpu[name]
        out["configs"][name] = {
            "cpu_s_median": {t: statistics.median(d[t]) for t in trees},
            "speed_ratio_to_base": {t: round(statistics.median(
                [b / a for a, b in zip(d[t], d[base])]), 3) for t in trees[1:]},
            "cpu_s": d}
        print("worker-ab", name, {k: v for k, v in out["configs"][name].items()
                                  if k != "cpu_s"}, flush=True)
    return out


# ---------------------------------------------------------------------------------------------
def _engine_prompts(n_requests: int, seed0: int = 900) -> list[list[int]]:
    systems = [random_token_ids(n, seed=70 + n) for n in (200, 330, 480)]
    return [systems[i % 3] + random_token_ids(20 + (i * 37) % 150, seed=seed0 + i)
            for i in range(n_requests)]


MARK = "SHADOWBENCH "


def engine_server(label: str, n_requests: int, on_extra: dict | None = None) -> None:
    """A persistent in-process engine, with (``on``) or without (``off``) the connector (default
    policies x capacities): reads prompt indices on stdin, answers each request's latency."""
    from vllm import SamplingParams, TokensPrompt

    prompts = _engine_prompts(n_requests)
    sp = SamplingParams(max_tokens=8, ignore_eos=True, temperature=0.0)
    kw = dict(num_gpu_blocks_override=256, max_model_len=1024)
    if label == "on":
        kw["kv_transfer_config"] = _shadow_ktc({"engine_id": "latency", **(on_extra or {})})
    with inprocess_llm(tiny_model_path(), **kw) as llm:
        warm = _engine_prompts(3, seed0=5000)
        for p in warm:  # warm-up on prompts of the same shape, not the measured ones
            llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)
        print(MARK + json.dumps({"ready": label}), flush=True)
        for line in sys.stdin:
            if not line.strip() or line.strip() == "quit":
                break
            p = prompts[int(line)]
            t = time.perf_counter()
            out = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)
            ms = (time.perf_counter() - t) * 1e3
            print(MARK + json.dumps({"ms": ms, "cached": out[0].num_cached_tokens}), flush=True)


class _Engine:
    def __init__(self, label: str, n_requests: int, log, on_extra: str = "{}") -> None:
        import subprocess

        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--engine-server", label.split("-")[0],
             "--requests", str(n_requests), "--on-extra", on_extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, text=True, cwd=ROOT, start_new_session=True)

    def read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith(MARK):
                return json.loads(line[len(MARK):])
        raise RuntimeError(f"engine {self.label} exited (rc {self.proc.wait()})")

    def ask(self, i: int) -> dict:
        self.proc.stdin.write(f"{i}\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        import signal

        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _ratio_ci(a: list[float], b: list[float], stat, n_boot: int = 2000) -> list[float]:
    """90% bootstrap interval of stat(a) / stat(b), requests resampled in pairs."""
    import random

    rng = random.Random(1)
    n = len(a)
    out = []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        out.append(stat([a[i] for i in idx]) / stat([b[i] for i in idx]))
    out.sort()
    return [round(out[int(0.05 * n_boot)], 4), round(out[int(0.95 * n_boot)], 4)]


def _p90(xs: list[float]) -> float:
    return _pct(xs, 0.9)


def bench_engine(n_requests: int, passes: int = 2, on_extra: str = "{}") -> dict:
    """Interleaved A/B with an A/A control: three engines alive at once, ``off-1``, ``on`` and
    ``off-2`` (same model, settings and prompts), each request sent to each engine in turn
    (the order rotated per request), one request running at a time; ``passes`` passes over the
    prompts (the second hits the prefix cache).  The two "off" engines give the noise."""
    import tempfile

    labels = ("off-1", "on", "off-2")
    log = tempfile.TemporaryFile(mode="w+")
    engines = [_Engine(lb, n_requests, log, on_extra) for lb in labels]
    lat: dict[str, list[float]] = {lb: [] for lb in labels}
    cached: dict[str, list[int]] = {lb: [] for lb in labels}
    t0 = time.monotonic()
    try:
        for e in engines:
            e.read()  # ready
        start_s = time.monotonic() - t0
        k = 0
        for _ in range(passes):
            for i in range(n_requests):
                order = engines[k % 3:] + engines[:k % 3]
                k += 1
                for e in order:
                    r = e.ask(i)
                    lat[e.label].append(r["ms"])
                    cached[e.label].append(r["cached"])
    except Exception:
        log.seek(0)
        print(log.read()[-4000:], file=sys.stderr)
        raise
    finally:
        for e in engines:
            e.close()
    assert cached["on"] == cached["off-1"] == cached["off-2"], "engines diverged"
    per = {lb: {"median_ms": round(statistics.median(v), 3), "p90_ms": round(_pct(v, 0.9), 3),
                "mean_ms": round(statistics.fmean(v), 3)} for lb, v in lat.items()}
    # NOTE: unpaired figures pool the two "off" engines; paired ones divide each request's
    # latency by off-1's on the same prompt in the same turn, for "on" and for "off-2" alike
    off = lat["off-1"] + lat["off-2"]
    med = statistics.median
    on2 = lat["on"] + lat["on"]  # paired with off-1 then off-2 for the bootstrap
    res = {"engines": per, "requests": n_requests * passes, "passes": passes,
           "on_extra_config": json.loads(on_extra),
           "start_s": round(start_s, 1),
           "on_over_off_median": round(med(lat["on"]) / med(off), 4),
           "on_over_off_median_ci90": _ratio_ci(on2, off, med),
           "on_over_off_p90": round(_p90(lat["on"]) / _p90(off), 4),
           "on_over_off_p90_ci90": _ratio_ci(on2, off, _p90),
           "aa_off2_over_off1_median": round(med(lat["off-2"]) / med(lat["off-1"]), 4),
           "aa_off2_over_off1_median_ci90": _ratio_ci(lat["off-2"], lat["off-1"], med),
           "aa_off2_over_off1_p90": round(_p90(lat["off-2"]) / _p90(lat["off-1"]), 4),
           "aa_off2_over_off1_p90_ci90": _ratio_ci(lat["off-2"], lat["off-1"], _p90),
           "paired_on_over_off1_median": round(
               med([x / y for x, y in zip(lat["on"], lat["off-1"])]), 4),
           "paired_off2_over_off1_median": round(
               med([x / y for x, y in zip(lat["off-2"], lat["off-1"])]), 4),
           "prefix_hit_share": round(sum(cached["on"]) / sum(
               len(p) for p in _engine_prompts(n_requests)) / passes, 3)}
    print("engine", res, flush=True)
    return res


def bench_concurrency(batch: int) -> dict:
    """The gap between the shadow ``vllm`` policy at the engine's capacity and the engine's own
    hits when ``batch`` requests run at once (the fidelity workload, sent ``batch`` at a time)."""
    from vllm import SamplingParams, TokensPrompt

    from shadow.connector.connector import INSTANCES
    from tests.connector.test_fidelity import NUM_BLOCKS, _workload

    steps = _workload(seed=7) + _workload(seed=8)
    conversations: dict[int, list[int]] = {}
    eng, sh, lens = [], [], []
    tag = f"conc{batch}"
    with inprocess_llm(tiny_model_path(), kv_transfer_config=_shadow_ktc(
            {"policies": ["vllm"], "capacity_factors": [1], "engine_id": tag,
             "prediction_log_size": 10_000}),
            num_gpu_blocks_override=NUM_BLOCKS, max_model_len=768) as llm:
        conn = [c for c in INSTANCES if c.cfg.engine_id == tag][0]
        key = f"vllm|{conn.cfg.engine_blocks}"
        for g in range(0, len(steps), batch):
            group = steps[g:g + batch]
            prompts, sps = [], []
            for kind, k, new, max_tokens in group:
                if kind == "turn":
                    prompt = conversations.get(k, random_token_ids(50, seed=500 + k)) + new
                else:
                    prompt = list(k) + new
                prompts.append(prompt[-700:])
                sps.append(SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                          temperature=0.0))
            n_before = len(conn.predictions())
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps,
                                use_tqdm=False)
            assert conn.flush()
            preds = conn.predictions()[n_before:]
            by_len: dict[int, list] = {}
            for p in preds:
                by_len.setdefault(p.num_tokens, []).append(p)
            for (kind, k, _n, _m), prompt, out in zip(group, prompts, outs):
                if kind == "turn":
                    conversations[k] = prompt + list(out.outputs[0].token_ids)
                # NOTE: admissions follow submission order; equal lengths pair up in that order
                p = by_len[len(prompt)].pop(0)
                eng.append(out.num_cached_tokens)
                sh.append(p.prefix_hit_tokens[key])
                lens.append(len(prompt))
    diff = [s - e for s, e in zip(sh, eng)]
    res = {"batch": batch, "requests": len(eng), "exact": sum(d == 0 for d in diff),
           "shadow_more": sum(d > 0 for d in diff), "shadow_less": sum(d < 0 for d in diff),
           "engine_hit_tokens": sum(eng), "shadow_hit_tokens": sum(sh),
           "query_tokens": sum(lens), "mean_abs_diff_tokens": round(
               statistics.fmean(abs(d) for d in diff), 2)}
    print("concurrency", res, flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--only", default=None, metavar="PARTS",
                    help="comma-separated: hooks, worker, engine, concurrency (default: all), "
                         "worker-tiers, worker-mrc, worker-ab (only when named)")
    ap.add_argument("--engine-server", choices=["on", "off"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5, help="worker-ab: rounds (default 5)")
    ap.add_argument("--trees", nargs="+", metavar="TREE",
                    help="worker-ab: built source trees, the baseline first (e.g. a worktree of "
                         "the commit before and this one)")
    ap.add_argument("--requests", type=int, default=60, help=argparse.SUPPRESS)
    ap.add_argument("--on-extra", default="{}", metavar="JSON",
                    help="engine bench: kv_connector_extra_config entries for the 'on' engine "
                         "(e.g. '{\"worker_nice\": 0}')")
    ap.add_argument("--hooks-extra", default="{}", metavar="JSON",
                    help="hooks bench: kv_connector_extra_config entries (e.g. "
                         "'{\"tiers\": \"cpu:64MiB,256MiB:lru\"}'); the result goes to the key "
                         "hooks+extra when given")
    a = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if a.engine_server:
        engine_server(a.engine_server, a.requests, json.loads(a.on_extra))
        return
    if a.worker_server:
        worker_server(a.requests)
        return
    parts = {"hooks", "worker", "worker-tiers", "worker-mrc", "worker-ab", "engine",
             "concurrency"}
    only = parts if a.only is None else set(a.only.split(","))
    if not only <= parts:
        ap.error(f"--only: unknown part(s) {','.join(sorted(only - parts))}")
    res: dict = {}
    if "worker" in only:
        res["worker"] = bench_worker(1000 if a.quick else 4000)
    if "worker-tiers" in only and a.only is not None:
        res["worker-tiers"] = bench_worker_tiers(1000 if a.quick else 4000)
    if "worker-mrc" in only and a.only is not None:
        res["worker-mrc"] = bench_worker_mrc(1000 if a.quick else 4000)
    if "worker-ab" in only and a.only is not None:
        if not a.trees or len(a.trees) < 2:
            ap.error("worker-ab: --trees needs a baseline tree and at least one more")
        res["worker-ab"] = bench_worker_ab(a.trees, 1000 if a.quick else 4000, a.rounds)
    if "hooks" in only:
        hx = json.loads(a.hooks_extra)
        res["hooks+extra" if hx else "hooks"] = bench_hooks(100 if a.quick else 400, hx)
    if "concurrency" in only:
        res["concurrency"] = [bench_concurrency(b) for b in (1, 4, 8)]
    if "engine" in only:
        res["engine"] = bench_engine(10 if a.quick else 80, on_extra=a.on_extra)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "bench_connector.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update(res)
    path.write_text(json.dumps(old, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
