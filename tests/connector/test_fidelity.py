"""The proof: the shadow ``vllm`` policy at the engine's own capacity reproduces, request by
request, the prefix-cache hits of a real vLLM engine (``RequestOutput.num_cached_tokens``).

A real CPU engine (tiny model, 32-token blocks, a KV pool small enough to evict, prefix caching
on) serves requests one at a time: prompts sharing system prefixes, multi-turn conversations
whose next prompt is the previous prompt + the previous output + new tokens (so generated blocks
are reused), and one-off prompts that push blocks out.  The recording of the same run, joined by
``shadow convert``, replays to the same hits.
"""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from tests.vllm_support import (BLOCK_SIZE, REPO_ROOT, compare_pools, engine_block_pool,
                                inprocess_llm, random_token_ids, serve_like_vllm,
                                tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

NUM_BLOCKS = 28  # the engine's pool, null block included: 27 usable blocks of 32 tokens


def _workload(seed: int = 7):
    """(kind, key, new tokens, max_tokens) steps; "turn" extends conversation ``key``."""
    rng = random.Random(seed)
    systems = [random_token_ids(rng.choice([64, 70, 96]), seed=100 + i) for i in range(3)]
    steps = []
    for i in range(30):
        r = rng.random()
        if r < 0.35:
            steps.append(("turn", rng.randrange(3), random_token_ids(rng.randrange(5, 40),
                                                                     seed=1000 + i),
                          rng.choice([8, 16, 31, 40])))
        elif r < 0.7:
            sysp = systems[rng.randrange(3)]
            # NOTE: some prompts end exactly on a block boundary (last block recomputed)
            n = rng.choice([32 - len(sysp) % 32, rng.randrange(1, 60)])
            steps.append(("fresh", sysp, random_token_ids(n, seed=2000 + i), rng.choice([4, 12])))
        else:
            steps.append(("fresh", [], random_token_ids(rng.randrange(100, 260), seed=3000 + i),
                          rng.choice([4, 33])))
    return steps


def test_shadow_vllm_policy_reproduces_engine_hits(tmp_path):
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES
    from shadow.connector.schema import Payload as P

    rec_dir = tmp_path / "rec"
    # NOTE: with an offload tier behind every cache: a tier never changes a tier-1 figure
    extra = {"policies": ["vllm", "lru"], "capacity_factors": [1.0], "capacities": [8, 200],
             "record_dir": str(rec_dir), "prediction_log_size": 1000,
             "tiers": {"medium": "cpu", "size": "16blk", "policy": "arc"}, "tier_caches": "all"}
    ktc = KVTransferConfig(kv_connector="ShadowConnector", kv_connector_module_path="shadow.connector",
                           kv_role="kv_producer", kv_connector_extra_config=extra)
    conversations: dict[int, list[int]] = {}
    engine_hits: list[int] = []
    lengths: list[int] = []
    with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc,
                       num_gpu_blocks_override=NUM_BLOCKS, max_model_len=768) as llm:
        conn = [c for c in INSTANCES if c.cfg.record_dir == str(rec_dir)][0]
        cap = conn.cfg.engine_blocks
        assert cap == NUM_BLOCKS - 1
        key = f"vllm|{cap}"
        pool = engine_block_pool(llm)
        state_diffs = []
        for i, (kind, k, new, max_tokens) in enumerate(_workload()):
            if kind == "turn":
                prompt = conversations.get(k, random_token_ids(50, seed=500 + k)) + new
            else:
                prompt = list(k) + new
            prompt = prompt[-700:]
            sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
            out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], sp, use_tqdm=False)[0]
            if kind == "turn":
                conversations[k] = prompt + list(out.outputs[0].token_ids)
            engine_hits.append(out.num_cached_tokens)
            lengths.append(len(prompt))
            if pool is not None:
                assert conn.flush()
                diff = compare_pools(pool, conn, key)
                if diff:
                    state_diffs.append((i, diff))
        assert conn.flush()
        preds = conn.predictions()
        payload = conn.cumulative_payload()
    assert len(preds) == len(engine_hits)
    shadow_hits = [p.prefix_hit_tokens[key] for p in preds]
    mismatches = [(i, n, e, s) for i, (n, e, s) in enumerate(zip(lengths, engine_hits,
                                                                  shadow_hits)) if e != s]
    assert not mismatches, f"(request, prompt tokens, engine hit, shadow hit): {mismatches}"
    # Stronger than equal hits: after every request the shadow holds exactly the engine's cached
    # blocks, in the engine's eviction order (read from vLLM 0.32's block pool when reachable).
    assert not state_diffs, state_diffs[:3]
    for p, n, e in zip(preds, lengths, engine_hits):
        assert p.engine_hit_tokens == e and p.num_tokens == n
        assert p.prefix_hit_tokens[key] <= (n - 1) // BLOCK_SIZE * BLOCK_SIZE
    # The workload must exercise what it claims: reuse, generated-block reuse and eviction.
    row = dict(zip(conn.cache_keys, [payload[P.CACHES][k] for k in conn.cache_keys]))[key]
    evictions = row[10]
    assert sum(engine_hits) > 0 and evictions > 0
    # A bigger cache would have hit more: the engine's cache really was too small.
    assert sum(p.prefix_hit_tokens["vllm|200"] for p in preds) > sum(engine_hits)
    assert payload[P.ENGINE]["engine_hit_tokens"] == sum(engine_hits)

    # The recording, joined by `shadow convert`, replays through the simulator to the same hits.
    from shadow.trace.segments import list_segments

    segs = list_segments(str(rec_dir), include_partial=False)
    assert segs and not list_segments(str(rec_dir))[len(segs):]  # clean shutdown: no .partial
    joined = tmp_path / "joined.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(joined)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    replayed = replay_like_vllm(str(joined), cap)
    assert replayed == shadow_hits

    # ... and the offline `shadow simulate --lookup vllm` of it (whole requests, the final partial
    # block an anonymous slot) predicts the engine's cached tokens in total.
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.core.simulator import run_trace
    from shadow.trace import open_trace

    offline = Simulator([CacheSpec("vllm", cap)], lookup="vllm", block_size_tokens=BLOCK_SIZE)
    with open_trace(str(joined)) as tr:
        run_trace(offline, tr, joined)
    r = offline.results()[0]
    assert (r.n_req, r.n_req_skipped, r.n_unexpected_eviction) == (len(engine_hits), 0, 0)
    assert r.n_prefix_hits * BLOCK_SIZE == sum(engine_hits)

    # The tier behind every cache, the engine-capacity vllm pool's included (one request at a
    # time, offline --timing recorded serves vllm as the pool did), equals offline
    # `simulate --timing recorded --tier` of the recording.
    from shadow.connector.schema import TIER_FIELDS, split_tier_key

    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", str(joined),
                        "-a", "vllm,lru", "-c", ",".join(map(str, conn.cfg.capacities)),
                        "--timing", "recorded", "--tier", "cpu:16blk:arc",
                        "--bytes-per-block", str(conn.cfg.bytes_per_block)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    offline_tiers = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
            offline_tiers[(kv["algo"], kv["cache_size"])] = [float(kv[f"tier_{f}"])
                                                             for f in TIER_FIELDS]
    live_tiers = {split_tier_key(k)[:2]: row for k, row in payload[P.TIERS].items()}
    assert len(live_tiers) == 6 and live_tiers == offline_tiers
    assert live_tiers[("vllm", str(cap))][0] > 0      # the tier served what the engine missed


def replay_like_vllm(path: str, capacity: int) -> list[int]:
    """Replay a recording one request at a time, in its order, matching as vLLM does
    (tests/vllm_support.py: serve_like_vllm)."""
    from shadow.trace import open_trace

    with open_trace(path) as tr:
        assert tr.header.block_size_tokens == BLOCK_SIZE
        reqs = [(int(b.records[i]["input_length"]), int(b.records[i]["output_length"]),
                 np.asarray(b.request_blocks(i))) for b in tr for i in range(b.n_requests)]
    # NOTE: convert sorts by completion time; sequential requests keep their order either way
    return serve_like_vllm(reqs, capacity)
