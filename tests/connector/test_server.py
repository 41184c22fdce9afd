"""The connector inside vLLM's OpenAI server: the shadow series on vLLM's /metrics (labels
model_name, engine, policy, capacity_blocks) and on the connector's own endpoint, consistent with
the engine's own vllm:prefix_cache_* counters; a kill -9 of the server leaves finished segments
intact and every request written before it; a bad configuration stops the server at start-up with a
message naming the key.  And, in-process: an unwritable record_dir turns recording off while
serving and simulating go on."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.vllm_support import (REPO_ROOT, free_port, http_get, http_post_json,
                                inprocess_llm, metric_sum, parse_prometheus, random_token_ids,
                                start_openai_server, tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

NUM_BLOCKS = 40  # 39 usable blocks of 32 tokens


def _ktc(extra: dict) -> str:
    return json.dumps({"kv_connector": "ShadowConnector",
                       "kv_connector_module_path": "shadow.connector",
                       "kv_role": "kv_producer", "kv_connector_extra_config": extra})


def _prompts() -> list[list[int]]:
    """Sequential prompts: two shared system prefixes, a one-off that evicts, repeats."""
    sys_a, sys_b = random_token_ids(100, seed=21), random_token_ids(70, seed=22)
    out = []
    for i in range(8):
        base = sys_a if i % 3 != 2 else sys_b
        out.append(base + random_token_ids(10 + 7 * i, seed=300 + i))
    out.insert(5, random_token_ids(900, seed=99))  # 28 blocks: pushes most of the cache out
    return out


def _wait_metrics(url: str, ready, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while True:
        parsed = parse_prometheus(http_get(url))
        if ready(parsed) or time.monotonic() > deadline:
            return parsed
        time.sleep(0.5)


def _assert_every_series_at_zero(vllm_url: str, own_url: str, cap: str) -> None:
    """Right after start-up, before any request: every counter of every policy x capacity label
    set exists at 0 on both endpoints (so rate() windows that start at start-up agree), and so
    does every cache's stopped gauge (none is stopped)."""
    from shadow.connector.schema import CACHE_FIELDS, ENGINE_FIELDS

    want = {(p, c) for p in ("vllm", "lru") for c in (cap, str(2 * int(cap)))}
    for where, url in (("vllm", vllm_url), ("own", own_url)):
        m = parse_prometheus(http_get(url))
        for f in CACHE_FIELDS:
            series = {(dict(k[1])["policy"], dict(k[1])["capacity_blocks"]): v
                      for k, v in m.items() if k[0] == f"shadow_{f}_total"}
            assert set(series) == want, (where, f, sorted(series))
            assert all(v == 0 for v in series.values()), (where, f, series)
        stopped = {(dict(k[1])["policy"], dict(k[1])["capacity_blocks"]): v
                   for k, v in m.items() if k[0] == "shadow_cache_stopped"}
        assert stopped == dict.fromkeys(want, 0.0), (where, stopped)
        for f in ENGINE_FIELDS:
            series = [v for k, v in m.items() if k[0] == f"shadow_{f}_total"]
            assert series == [0.0], (where, f, series)
        assert metric_sum(m, "shadow_engine_capacity_blocks") == int(cap), where


def test_openai_server_metrics_recording_and_kill_9(tmp_path):
    model = tiny_model_path()
    rec_dir = tmp_path / "rec"
    own_port = free_port()
    extra = {"policies": ["vllm", "lru"], "capacity_factors": [1, 2], "record_dir": str(rec_dir),
             "segment_max_bytes": 4096, "record_flush_ms": 0, "metrics_port": own_port,
             "engine_id": "srv"}
    prompts = _prompts()
    args = ["--kv-transfer-config", _ktc(extra), "--num-gpu-blocks-override", str(NUM_BLOCKS),
            "--enable-prompt-tokens-details", "--served-model-name", "tiny", "--max-model-len", "1024"]
    with start_openai_server(model, extra_args=args) as url:
        own_url = f"http://127.0.0.1:{own_port}/metrics"
        _assert_every_series_at_zero(url + "/metrics", own_url, str(NUM_BLOCKS - 1))
        cached = []

        def send(p):
            body = {"model": "tiny", "prompt": p, "max_tokens": 4, "ignore_eos": True,
                    "temperature": 0.0}
            cached.append(http_post_json(url + "/v1/completions", body)
                          ["usage"]["prompt_tokens_details"]["cached_tokens"])

        for p in prompts[:-1]:
            send(p)
        # NOTE: shadow deltas reach vLLM's /metrics with the engine's next step; wait until the
        # worker has caught up (own endpoint, read at scrape time), then send the last request,
        # whose steps carry everything before it.
        _wait_metrics(own_url, lambda o: metric_sum(o, "shadow_recorded_requests_total")
                      == len(prompts) - 1)
        send(prompts[-1])
        n = len(prompts)
        cap = str(NUM_BLOCKS - 1)

        # vLLM's /metrics: the connector-stats path, in the frontend process
        def vllm_ready(m):
            return (metric_sum(m, "shadow_observed_requests_total") == n and
                    metric_sum(m, "shadow_requests_total", policy="vllm",
                               capacity_blocks=cap) == n)

        m = _wait_metrics(url + "/metrics", vllm_ready)
        assert vllm_ready(m), {k: v for k, v in m.items() if k[0].startswith("shadow_")}
        hits = metric_sum(m, "vllm:prefix_cache_hits_total")
        queries = metric_sum(m, "vllm:prefix_cache_queries_total")
        assert hits == sum(cached) > 0
        assert metric_sum(m, "shadow_engine_hit_tokens_total") == hits
        assert metric_sum(m, "shadow_engine_query_tokens_total") == queries
        # the fidelity shadow at the engine's capacity reproduces the engine's hits
        assert metric_sum(m, "shadow_prefix_hit_tokens_total", policy="vllm",
                          capacity_blocks=cap) == hits
        assert metric_sum(m, "shadow_query_tokens_total", policy="vllm",
                          capacity_blocks=cap) == queries
        # a cache twice as large hits at least as much
        assert metric_sum(m, "shadow_prefix_hit_tokens_total", policy="vllm",
                          capacity_blocks=str(2 * (NUM_BLOCKS - 1))) >= hits
        assert metric_sum(m, "shadow_evictions_total", policy="vllm", capacity_blocks=cap) > 0
        labels = {dict(k[1]).get("model_name") for k in m if k[0] == "shadow_block_lookups_total"}
        assert labels == {"tiny"}
        keys = {(dict(k[1])["policy"], dict(k[1])["capacity_blocks"])
                for k in m if k[0] == "shadow_block_prefix_hits_total"}
        assert keys == {(p, c) for p in ("vllm", "lru") for c in (cap, str(2 * int(cap)))}
        assert metric_sum(m, "shadow_engine_capacity_blocks") == NUM_BLOCKS - 1
        assert metric_sum(m, "shadow_recording_enabled") == 1
        assert metric_sum(m, "shadow_dropped_requests_total") == 0
        assert metric_sum(m, "shadow_errors_total") == 0
        assert metric_sum(m, "shadow_cache_stopped") == 0     # every cache still serving

        # the own endpoint (engine-core process, 127.0.0.1): same names, cumulative values
        own = _wait_metrics(own_url,
                            lambda o: metric_sum(o, "shadow_recorded_requests_total") == n)
        assert metric_sum(own, "shadow_recorded_requests_total") == n
        assert metric_sum(own, "shadow_prefix_hit_tokens_total", policy="vllm",
                          capacity_blocks=cap) == hits
        assert metric_sum(own, "shadow_engine_hit_tokens_total", model_name="tiny",
                          engine="0") == hits
        assert metric_sum(own, "shadow_recorded_bytes_total") > 0

        # kill -9 of the whole server (frontend and engine core) while recording
        os.killpg(url.proc.pid, signal.SIGKILL)
        url.proc.wait(timeout=30)

    from shadow.trace.segments import PARTIAL_SUFFIX, list_segments

    segs = list_segments(str(rec_dir))
    finished = [s for s in segs if not s.endswith(PARTIAL_SUFFIX)]
    # NOTE: a segment holds its 8 KiB header, so 4096 bytes rotate right after every request
    # is written: each is finished before the next arrives, none is left open by the kill
    assert len(finished) == len(segs) == len(prompts)
    assert all("shadow-esrv-dp0-" in os.path.basename(s) for s in segs)
    joined = tmp_path / "joined.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(joined)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    from shadow.trace import open_trace

    lengths = []
    with open_trace(str(joined)) as tr:
        for batch in tr:
            lengths += [int(x) for x in batch.records["input_length"]]
    # every request finished before the kill is in the recording (flushed per request)
    assert sorted(lengths) == sorted(len(p) for p in prompts)
    for s in finished:  # finished segments read cleanly on their own
        with open_trace(s) as tr:
            assert sum(b.n_requests for b in tr) > 0


def test_openai_server_resends_and_concurrency_keep_fidelity():
    """The same prompts sent twice one at a time, then in rounds of 16 at a time until the
    engine has preempted: the shadow ``vllm`` cache at the engine's capacity counts exactly the engine's
    hit and query tokens on vLLM's /metrics, so ``shadow:vllm_fidelity_error:rate5m`` (the
    difference of the two ratios, deploy/prometheus/rules.yml) is 0 and ShadowFidelityDrift
    cannot fire."""
    from concurrent.futures import ThreadPoolExecutor

    own_port = free_port()
    extra = {"policies": ["vllm"], "capacity_factors": [1], "metrics_port": own_port}
    sys_a = random_token_ids(96, seed=31)   # block-aligned: a full hit recomputes its last block
    prompts = [sys_a + random_token_ids(k, seed=400 + k) for k in (0, 5, 32, 40, 64, 77)]
    prompts += [random_token_ids(130 + 9 * i, seed=500 + i) for i in range(10)]
    args = ["--kv-transfer-config", _ktc(extra), "--num-gpu-blocks-override", str(NUM_BLOCKS),
            "--served-model-name", "tiny", "--max-model-len", "1024"]
    cap = str(NUM_BLOCKS - 1)
    with start_openai_server(tiny_model_path(), extra_args=args) as url:
        own_url = f"http://127.0.0.1:{own_port}/metrics"

        def send(p, max_tokens=40):
            body = {"model": "tiny", "prompt": p, "max_tokens": max_tokens, "ignore_eos": True,
                    "temperature": 0.0}
            http_post_json(url + "/v1/completions", body)

        def preemptions():
            return metric_sum(parse_prometheus(http_get(url + "/metrics")),
                              "vllm:num_preemptions_total")

        for _ in range(2):
            for p in prompts:
                send(p)
        # NOTE: whether 16 requests in flight preempt depends on how many the scheduler holds at
        # once, which the machine's speed decides: 120 decode tokens grow each request by 3-4
        # blocks, and rounds go on (at most 8) until vLLM has counted a preemption
        rounds = 0
        with ThreadPoolExecutor(16) as ex:
            while rounds < 2 or (preemptions() == 0 and rounds < 8):
                list(ex.map(lambda p: send(p, 120), prompts))
                rounds += 1
        n = (2 + rounds) * len(prompts)
        # NOTE: shadow deltas reach vLLM's /metrics with the engine's next step: wait for the
        # worker (own endpoint), then one more request carries everything before it
        _wait_metrics(own_url, lambda o: metric_sum(o, "shadow_requests_total") == n)
        send(prompts[0])

        def ready(m):
            return metric_sum(m, "shadow_observed_requests_total") == n + 1 == metric_sum(
                m, "shadow_requests_total", policy="vllm", capacity_blocks=cap)

        m = _wait_metrics(url + "/metrics", ready)
        assert ready(m), {k: v for k, v in m.items() if k[0].startswith("shadow_")}
        hits = metric_sum(m, "vllm:prefix_cache_hits_total")
        queries = metric_sum(m, "vllm:prefix_cache_queries_total")
        assert hits > 0
        assert metric_sum(m, "vllm:num_preemptions_total") > 0, "no preemption: pool too large"
        shadow_hits = metric_sum(m, "shadow_prefix_hit_tokens_total", policy="vllm",
                                 capacity_blocks=cap)
        shadow_queries = metric_sum(m, "shadow_query_tokens_total", policy="vllm",
                                    capacity_blocks=cap)
        assert (shadow_hits, shadow_queries) == (hits, queries)
        assert shadow_hits / shadow_queries - hits / queries == 0.0
        assert metric_sum(m, "shadow_dropped_requests_total") == 0
        assert metric_sum(m, "shadow_errors_total") == 0


def test_bad_config_stops_the_server_at_start_up():
    args = ["--kv-transfer-config", _ktc({"policies": ["lru", "nosuch"]})]
    with pytest.raises(RuntimeError) as ei:
        with start_openai_server(tiny_model_path(), extra_args=args, startup_timeout_s=240):
            pass
    msg = str(ei.value)
    assert "exited with status" in msg
    assert "kv_connector_extra_config.policies[1]: unknown policy 'nosuch'" in msg


def test_unwritable_record_dir_turns_recording_off_and_serving_goes_on(tmp_path, caplog):
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.schema import Payload as P

    from shadow.connector.connector import INSTANCES

    # NOTE: the directory is usable at start-up (a record_dir that is not is refused there);
    # it becomes a regular file before the first request, when the first segment opens
    blocker = tmp_path / "not-a-dir"
    own_port = free_port()
    extra = {"policies": ["vllm"], "capacity_factors": [1], "record_dir": str(blocker),
             "engine_id": "unwritable", "metrics_port": own_port}
    ktc = KVTransferConfig(kv_connector="ShadowConnector",
                           kv_connector_module_path="shadow.connector", kv_role="kv_producer",
                           kv_connector_extra_config=extra)
    prefix = random_token_ids(80, seed=5)
    sp = SamplingParams(max_tokens=3, ignore_eos=True, temperature=0.0)
    with caplog.at_level(logging.ERROR, logger="shadow.connector.recorder"):
        with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc,
                           num_gpu_blocks_override=32, max_model_len=512) as llm:
            shutil.rmtree(blocker)   # NOTE: with the stream lock file the recorder made
            blocker.write_text("x")
            outs = [llm.generate([TokensPrompt(prompt_token_ids=prefix + [7 + s] * 5)], sp,
                                 use_tqdm=False)[0] for s in range(3)]
            conn = [c for c in INSTANCES if c.cfg.engine_id == "unwritable"][0]
            assert conn.flush()
            payload = conn.cumulative_payload()
            preds = conn.predictions()
            own = parse_prometheus(http_get(f"http://127.0.0.1:{own_port}/metrics"))
            from prometheus_client import REGISTRY

            # vLLM's path: the gauge that the stat logger set in this process's registry
            gauges = [s.value for fam in REGISTRY.collect() for s in fam.samples
                      if s.name == "shadow_recording_enabled"]
    assert [len(o.outputs[0].token_ids) for o in outs] == [3, 3, 3]
    assert [o.num_cached_tokens for o in outs] == [0, 64, 64]
    assert [p.engine_hit_tokens for p in preds] == [0, 64, 64]
    assert payload[P.RECORDING] == 0 and payload[P.ENGINE]["recorded_requests"] == 0
    assert payload[P.ENGINE]["errors"] == 0
    lines = [r for r in caplog.records if "turned off" in r.getMessage()]
    assert len(lines) == 1 and "not-a-dir" in lines[0].getMessage()
    assert gauges == [0.0]
    assert metric_sum(own, "shadow_recording_enabled") == 0
    assert metric_sum(own, "shadow_observed_requests_total") == 3
    assert metric_sum(own, "shadow_prefix_hit_tokens_total", policy="vllm") == 128
