"""A concurrent recording served offline with ``--timing recorded`` gives every live shadow
cache's counters exactly (shadow/sim/timing/run.py against the connector's worker).

A real CPU engine (tiny model, 32-token blocks, the fidelity test's 27-block pool, up to 16
running requests) serves the connector's fidelity workload 16 requests at a time, so requests
queue, overlap and are preempted; the connector runs live shadow caches of several policies at
several capacities and records.  The recording, joined by ``shadow convert``, is then served
offline in the order of its stamps: each simulator cache's counters, and each admission's
first-miss hits, must equal the live cache's.  (The live ``vllm`` caches are vLLM's physical
block pool, followed step by step; a recording has no steps: docs/connector.md.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.vllm_support import REPO_ROOT, inprocess_llm, random_token_ids, tiny_model_path, \
    vllm_available

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

#: The live caches: every policy at the engine's capacity (factor 1) and at these capacities.
POLICIES = ("vllm", "lru", "fifo", "s3fifo", "arc", "sieve")
CAPACITIES = (8, 16, 64)
#: The counters compared: (Result attribute, column of the connector's counter row).
COUNTERS = (("n_req", 0), ("n_req_skipped", 1), ("n_blocks", 2), ("n_hits", 3),
            ("n_prefix_hits", 4), ("total_cost", 5), ("saved_cost", 6), ("prefix_saved_cost", 7),
            ("n_eviction", 10), ("n_self_eviction", 11))


def serve_concurrently(batch: int, rec_dir: Path, *, policies=POLICIES, capacities=CAPACITIES,
                       num_blocks: int | None = None, extra_config: dict | None = None) -> dict:
    """Serve the fidelity workload (``_workload(7) + _workload(8)``) ``batch`` requests at a
    time with the connector recording into ``rec_dir`` (``extra_config``: more connector keys).
    Returns the live figures: ``keys`` (cache keys), ``engine_blocks``, ``live`` (key -> counter
    row), ``admitted`` (per admission in order: the engine's ``num_cached_tokens`` or -1, the
    live first-miss hit tokens per key, whether it was a re-admission after a preemption),
    ``preemptions``, ``payload`` (the cumulative payload), ``cfg`` (the connector's
    configuration) and ``scrape`` (the own endpoint's exposition text, when it has one)."""
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES
    from shadow.connector.schema import Payload as P
    from tests.connector.test_fidelity import NUM_BLOCKS, _workload

    steps = _workload(seed=7) + _workload(seed=8)
    extra = {"policies": list(policies), "capacity_factors": [1.0],
             "capacities": list(capacities), "record_dir": str(rec_dir),
             "prediction_log_size": 10_000, "engine_id": f"conc{batch}", **(extra_config or {})}
    ktc = KVTransferConfig(kv_connector="ShadowConnector",
                           kv_connector_module_path="shadow.connector", kv_role="kv_producer",
                           kv_connector_extra_config=extra)
    conversations: dict[int, list[int]] = {}
    engine: dict[str, int] = {}
    with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc,
                       num_gpu_blocks_override=num_blocks or NUM_BLOCKS, max_model_len=768,
                       max_num_seqs=16) as llm:
        conn = [c for c in INSTANCES if c.cfg.record_dir == str(rec_dir)][0]
        for g in range(0, len(steps), batch):
            group = steps[g:g + batch]
            prompts, sps = [], []
            for kind, k, new, max_tokens in group:
                base = (conversations.get(k, random_token_ids(50, seed=500 + k))
                        if kind == "turn" else list(k))
                prompts.append((base + new)[-700:])
                sps.append(SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0))
            outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sps,
                                use_tqdm=False)
            for (kind, k, _n, _m), prompt, out in zip(group, prompts, outs):
                if kind == "turn":
                    conversations[k] = prompt + list(out.outputs[0].token_ids)
                engine[out.request_id] = int(out.num_cached_tokens)
        assert conn.flush()
        preds = conn.predictions()
        payload = conn.cumulative_payload()
        keys = list(conn.cache_keys)
        cap = conn.cfg.engine_blocks
        cfg = conn.cfg
        scrape = None
        if conn.metrics_address:
            import urllib.request

            with urllib.request.urlopen(f"http://{conn.metrics_address}/metrics", timeout=30) as r:
                scrape = r.read().decode()
    admitted = []
    for p in preds:
        # NOTE: the engine's request id is the LLM's, or starts with it
        rid = next((r for r in engine if p.request_id == r or p.request_id.startswith(r + "-")),
                   None)
        admitted.append((engine.get(rid, -1), [p.prefix_hit_tokens.get(k, -1) for k in keys],
                         p.preempted))
    return {"keys": keys, "engine_blocks": cap, "admitted": admitted,
            "preemptions": sum(p.preempted for p in preds),
            "live": {k: payload[P.CACHES][k] for k in keys}, "payload": payload, "cfg": cfg,
            "scrape": scrape}


def join_recording(rec_dir: Path, out: Path) -> Path:
    """``shadow convert`` of every segment in ``rec_dir`` into ``out``."""
    from shadow.trace.segments import list_segments

    segs = list_segments(str(rec_dir))
    assert segs
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def serve_recorded(path: Path, keys: list[str], batches=None, cost_model: str = "uniform"):
    """``--timing recorded`` of ``path`` (or of ``batches``, its batches changed) in every cache
    ``keys`` names, under ``cost_model``: (results, per-request first-miss hit tokens per cache,
    start times), the requests in file order."""
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.timing.run import run_trace_recorded
    from shadow.trace import open_trace

    specs = [CacheSpec(k.split("|")[0], int(k.split("|")[1])) for k in keys]
    with open_trace(str(path)) as tr:
        b = tr.header.block_size_tokens
        if batches is None:
            batches = list(tr)
    start = np.concatenate([bt.records["start_time_us"] for bt in batches])
    sim = Simulator(specs, cost_model=cost_model, lookup="vllm", block_size_tokens=b, verify=True)
    hits = np.zeros((len(start), len(specs)), dtype=np.int64)
    run_trace_recorded(sim, batches, str(path), b, prefix_hits=hits)
    return sim.results(), np.where(hits >= 0, hits * b, -1), start


#: Offload tiers behind every live cache (docs/tiers.md "Live"): configured in the run below so
#: that it also shows a tier never changes a tier-1 figure; the tests after it check the tiers
#: themselves on the same run.
TIERS = ["cpu:48blk:lru", {"medium": "cpu", "size": "2MiB", "policy": "arc", "chunk_tokens": 64}]


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    """One engine run 16 at a time with the tiers behind every cache, recorded and joined, and
    its own metrics endpoint scraped: (live figures, joined recording)."""
    tmp = tmp_path_factory.mktemp("conc16")
    live = serve_concurrently(16, tmp / "rec", extra_config={
        "tiers": TIERS, "tier_caches": "all", "metrics_port": 0})
    return live, join_recording(tmp / "rec", tmp / "joined.lcp.zst")


def test_recorded_timing_gives_every_live_cache_its_counters(recorded_run):
    live, joined = recorded_run
    assert live["cfg"].tiers and live["payload"]["t"]      # with tiers configured
    keys = live["keys"]
    # NOTE: the live caches cost blocks by the served model's config.json (the connector's
    # default), so the offline run takes the same cost model
    assert live["cfg"].cost_model.startswith("model:")
    results, hits, start = serve_recorded(joined, keys, cost_model=live["cfg"].cost_model)
    sim_keys = [k for k in keys if not k.startswith("vllm|")]
    assert len(sim_keys) == (len(POLICIES) - 1) * (len(CAPACITIES) + 1)
    # the run exercises what it claims: preemptions, skipped requests, evictions
    assert live["preemptions"] > 0
    for k, r in zip(keys, results):
        if k in sim_keys:
            row = live["live"][k]
            got = {a: getattr(r, a) for a, _c in COUNTERS}
            want = {a: row[c] for a, c in COUNTERS}
            assert got == pytest.approx(want, abs=1e-9), k
    assert any(live["live"][k][1] for k in sim_keys) and all(live["live"][k][10]
                                                              for k in sim_keys)
    # per admission, in the stamps' order (a preempted admission is a record of its own)
    order = np.argsort(start, kind="stable")
    assert len(order) == len(live["admitted"])
    cols = [keys.index(k) for k in sim_keys]
    for j, (_eng, live_hits, _again) in zip(order, live["admitted"]):
        # NOTE: a skipped admission predicts no hit live (0) and -1 offline
        assert [max(int(hits[j, c]), 0) for c in cols] == [live_hits[c] for c in cols]


def _offline_tiers(joined: Path, policies: list[str], capacities: list[int],
                   bytes_per_block: int) -> dict[tuple[str, int], list[dict[str, str]]]:
    """``shadow simulate --timing recorded --tier ...`` of the recording, the tiers of
    :data:`TIERS` written as ``--tier`` text: (policy, capacity) -> its RESULT lines' keys, one
    per tier in TIERS order."""
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", str(joined),
                        "-a", ",".join(policies), "-c", ",".join(map(str, capacities)),
                        "--timing", "recorded", "--tier", "cpu:48blk:lru",
                        "--tier", "cpu:2MiB:arc:chunk=2", "--bytes-per-block",
                        str(bytes_per_block)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out: dict[tuple[str, int], list[dict[str, str]]] = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
            out.setdefault((kv["algo"], int(kv["cache_size"])), []).append(kv)
    return out


def test_live_tiers_equal_offline_simulate_tier(recorded_run):
    """Each live tier behind a simulator cache, driven per admission in the engine's order with
    the admission's first-miss hit, gives offline ``--timing recorded --tier``'s figures on the
    connector's own recording (start-time order): hit tokens, bytes loaded and stored,
    evictions, failed stores."""
    from shadow.connector.schema import TIER_FIELDS, Payload as P, split_tier_key

    live, joined = recorded_run
    cfg = live["cfg"]
    tiers = live["payload"][P.TIERS]
    assert len(tiers) == len(live["keys"]) * 2
    caps = sorted({int(k.split("|")[1]) for k in live["keys"]})
    sim_policies = [p for p in POLICIES if p != "vllm"]
    offline = _offline_tiers(joined, sim_policies, caps, cfg.bytes_per_block)
    compared = 0
    labels = [t.label for t in cfg.tiers]
    for key, row in tiers.items():
        policy, cap, label = split_tier_key(key)
        if policy == "vllm":
            continue   # NOTE: offline vllm is the serve loop, not the live pool (docs/connector.md)
        kv = offline[(policy, int(cap))][labels.index(label)]
        want = [float(kv[f"tier_{f}"]) for f in TIER_FIELDS]
        assert row == want, key
        compared += 1
    assert compared == len(sim_policies) * len(caps) * 2
    # the run exercises the tiers: hits, loads, stores and evictions somewhere, in both tiers
    for label in labels:
        rows = [r for k, r in tiers.items() if split_tier_key(k)[2] == label]
        assert all(any(r[j] for r in rows) for j in range(4)), label


def test_tier_series_on_the_own_endpoint(recorded_run):
    """The own endpoint serves every tier's series with the worker's values; the bytes of a
    block came from the engine's KV cache spec (2 layers x K and V x 4 heads x 32 dims x 32
    tokens x 4 bytes), equal to the model's config.json read by ``--kv-config``."""
    from prometheus_client.parser import text_string_to_metric_families

    from shadow.connector.schema import (TIER_CAPACITY_GAUGE, TIER_FIELDS, TIER_LABELS,
                                         TIER_OCCUPANCY_GAUGE, Payload as P, split_tier_key,
                                         tier_counter_name)
    from shadow.sim.tiers.model import kv_bytes_per_block
    from tests.vllm_support import tiny_model_path

    live, _joined = recorded_run
    cfg = live["cfg"]
    assert cfg.bytes_per_block == 65536 == kv_bytes_per_block(
        str(Path(tiny_model_path()) / "config.json"), cfg.block_size, "float32")
    samples: dict[tuple[str, tuple[str, ...]], float] = {}
    for fam in text_string_to_metric_families(live["scrape"]):
        for smp in fam.samples:
            if smp.name.startswith("shadow_tier_"):
                samples[(smp.name, tuple(smp.labels[x] for x in TIER_LABELS))] = smp.value
    pl = live["payload"]
    assert pl[P.TIERS]
    for key, row in pl[P.TIERS].items():
        lab = split_tier_key(key)
        for f, v in zip(TIER_FIELDS, row):
            assert samples[(tier_counter_name(f) + "_total", lab)] == v, (key, f)
        assert samples[(TIER_OCCUPANCY_GAUGE, lab)] == pl[P.TIER_OCCUPANCY][key]
        assert samples[(TIER_CAPACITY_GAUGE, lab)] == pl[P.TIER_CAPACITY][key]
    # 48 one-block chunks of 64 KiB; 2 MiB of two-block chunks (16 chunks)
    caps = {split_tier_key(k)[2]: v for k, v in pl[P.TIER_CAPACITY].items()}
    assert caps == {"cpu:48blk:lru": 48 * 65536, "cpu:2mib:arc": 2 << 20}
    assert any(v > 0 for v in pl[P.TIER_OCCUPANCY].values())
