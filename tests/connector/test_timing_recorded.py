"""A concurrent recording served offline with ``--timing recorded`` gives every live shadow
cache's counters exactly (shadow/sim/timing.py against the connector's worker).

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
                       num_blocks: int | None = None) -> dict:
    """Serve the fidelity workload (``_workload(7) + _workload(8)``) ``batch`` requests at a
    time with the connector recording into ``rec_dir``.  Returns the live figures: ``keys``
    (cache keys), ``engine_blocks``, ``live`` (key -> counter row), ``admitted`` (per admission
    in order: the engine's ``num_cached_tokens`` or -1, the live first-miss hit tokens per key,
    whether it was a re-admission after a preemption) and ``preemptions``."""
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES
    from shadow.connector.metrics import Payload as P
    from tests.connector.test_fidelity import NUM_BLOCKS, _workload

    steps = _workload(seed=7) + _workload(seed=8)
    extra = {"policies": list(policies), "capacity_factors": [1.0],
             "capacities": list(capacities), "record_dir": str(rec_dir),
             "prediction_log_size": 10_000, "engine_id": f"conc{batch}"}
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
    admitted = []
    for p in preds:
        # NOTE: the engine's request id is the LLM's, or starts with it
        rid = next((r for r in engine if p.request_id == r or p.request_id.startswith(r + "-")),
                   None)
        admitted.append((engine.get(rid, -1), [p.prefix_hit_tokens.get(k, -1) for k in keys],
                         p.preempted))
    return {"keys": keys, "engine_blocks": cap, "admitted": admitted,
            "preemptions": sum(p.preempted for p in preds),
            "live": {k: payload[P.CACHES][k] for k in keys}}


def join_recording(rec_dir: Path, out: Path) -> Path:
    """``shadow convert`` of every segment in ``rec_dir`` into ``out``."""
    from shadow.connector.recorder import list_segments

    segs = list_segments(str(rec_dir))
    assert segs
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def serve_recorded(path: Path, keys: list[str], batches=None):
    """``--timing recorded`` of ``path`` (or of ``batches``, its batches changed) in every cache
    ``keys`` names: (results, per-request first-miss hit tokens per cache, start times), the
    requests in file order."""
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.timing import run_trace_recorded
    from shadow.trace import open_trace

    specs = [CacheSpec(k.split("|")[0], int(k.split("|")[1])) for k in keys]
    with open_trace(str(path)) as tr:
        b = tr.header.block_size_tokens
        if batches is None:
            batches = list(tr)
    start = np.concatenate([bt.records["start_time_us"] for bt in batches])
    sim = Simulator(specs, lookup="vllm", block_size_tokens=b, verify=True)
    hits = np.zeros((len(start), len(specs)), dtype=np.int64)
    run_trace_recorded(sim, batches, str(path), b, prefix_hits=hits)
    return sim.results(), np.where(hits >= 0, hits * b, -1), start


def test_recorded_timing_gives_every_live_cache_its_counters(tmp_path):
    live = serve_concurrently(16, tmp_path / "rec")
    joined = join_recording(tmp_path / "rec", tmp_path / "joined.lcp.zst")
    keys = live["keys"]
    results, hits, start = serve_recorded(joined, keys)
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
