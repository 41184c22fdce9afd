"""A profile cost model in the connector inside vLLM's OpenAI server: the prefill seconds each
shadow cache's first-miss hits saved, and the engine's own, on vLLM's /metrics and on the
connector's own endpoint, equal to the profile's values at the cached tokens the engine reported
for each request (its HTTP usage), summed."""

from __future__ import annotations

import json
import time

import pytest

from shadow.sim.cost.profile import load_profile
from tests.vllm_support import (free_port, http_get, http_post_json, metric_sum,
                                parse_prometheus, random_token_ids, start_openai_server,
                                tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

NUM_BLOCKS = 60          # 59 usable blocks of 32 tokens


def _profile(path) -> str:
    rows = [(0, 1, 0.010), (0, 256, 0.012), (0, 1024, 0.020), (0, 2048, 0.035),
            (512, 1, 0.009), (512, 256, 0.011), (512, 1024, 0.019),
            (1024, 1, 0.011), (1024, 512, 0.016)]
    path.write_text(json.dumps({"env": True, "note": "hand-made"}) + "\n" + "".join(
        json.dumps({"cached": c, "new": n, "s": s}) + "\n" for c, n, s in rows))
    return str(path)


def test_prefill_seconds_saved_live(tmp_path):
    prof_path = _profile(tmp_path / "prof.jsonl")
    prof = load_profile(prof_path)
    own_port = free_port()
    extra = {"policies": ["vllm", "lru"], "capacity_factors": [1], "capacities": [8],
             "metrics_port": own_port, "cost_model": f"profile:{prof_path}"}
    ktc = json.dumps({"kv_connector": "ShadowConnector",
                      "kv_connector_module_path": "shadow.connector",
                      "kv_role": "kv_producer", "kv_connector_extra_config": extra})
    base = random_token_ids(600, seed=41)
    prompts = [base + random_token_ids(40 + 9 * i, seed=500 + i) for i in range(5)]
    prompts.insert(2, random_token_ids(300, seed=77))
    args = ["--kv-transfer-config", ktc, "--num-gpu-blocks-override", str(NUM_BLOCKS),
            "--enable-prompt-tokens-details", "--served-model-name", "tiny",
            "--max-model-len", "1024"]
    with start_openai_server(tiny_model_path(), extra_args=args) as url:
        own = f"http://127.0.0.1:{own_port}/metrics"
        m0 = parse_prometheus(http_get(own))
        cap = str(NUM_BLOCKS - 1)
        for pol in ("vllm", "lru"):
            for c in (cap, "8"):
                assert metric_sum(m0, "shadow_prefill_seconds_saved_total", policy=pol,
                                  capacity_blocks=c) == 0.0
        saved = no_hit = 0.0
        for p in prompts:
            body = {"model": "tiny", "prompt": p, "max_tokens": 2, "ignore_eos": True,
                    "temperature": 0.0}
            c = http_post_json(url + "/v1/completions", body)["usage"]["prompt_tokens_details"][
                "cached_tokens"]
            n = len(p)
            t0 = float(prof.seconds(0, n))
            no_hit += t0
            saved += t0 - float(prof.seconds(c, n - c))
        assert saved > 0

        def ready(m):
            return metric_sum(m, "shadow_requests_total", policy="vllm",
                              capacity_blocks=cap) >= len(prompts)

        for where in (own, url + "/metrics"):
            deadline = time.monotonic() + 30
            m = parse_prometheus(http_get(where))
            while not ready(m) and time.monotonic() < deadline:
                time.sleep(0.5)
                if where != own:
                    # NOTE: deltas reach vLLM's /metrics with the engine's next step
                    http_post_json(url + "/v1/completions", {"model": "tiny", "prompt": [5],
                                                             "max_tokens": 1})
                m = parse_prometheus(http_get(where))
            got = metric_sum(m, "shadow_engine_prefill_seconds_saved_total")
            # NOTE: on vLLM's /metrics the one-token nudges count too (they save nothing)
            assert got == pytest.approx(saved, rel=1e-9), where
            vllm_saved = metric_sum(m, "shadow_prefill_seconds_saved_total", policy="vllm",
                                    capacity_blocks=cap)
            assert vllm_saved == pytest.approx(saved, rel=1e-9), where
            vllm_s = metric_sum(m, "shadow_prefill_seconds_total", policy="vllm",
                                capacity_blocks=cap)
            if where == own:
                assert vllm_s == pytest.approx(no_hit - saved, rel=1e-9)
            else:
                assert vllm_s >= no_hit - saved - 1e-9
            small = metric_sum(m, "shadow_prefill_seconds_saved_total", policy="lru",
                               capacity_blocks="8")
            assert 0 <= small < saved, where
