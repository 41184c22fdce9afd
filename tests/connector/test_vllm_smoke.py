"""Smoke test of the shared vLLM helpers: the tiny model builds and a real CPU engine serves a
prefix-cached generation in-process."""

from __future__ import annotations

import pytest

from tests.vllm_support import (BLOCK_SIZE, inprocess_llm, random_token_ids, start_openai_server,
                                tiny_model_path,
                                vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]


def test_tiny_model_prefix_cached_generation():
    from vllm import SamplingParams, TokensPrompt

    model = tiny_model_path()
    assert tiny_model_path() == model  # built once per session
    prefix = random_token_ids(200, seed=1)
    first = prefix + random_token_ids(20, seed=2)
    second = prefix + random_token_ids(20, seed=3)
    sp = SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0)
    with inprocess_llm(model) as llm:
        out1 = llm.generate([TokensPrompt(prompt_token_ids=first)], sp, use_tqdm=False)[0]
        out2 = llm.generate([TokensPrompt(prompt_token_ids=second)], sp, use_tqdm=False)[0]
    assert len(out1.outputs[0].token_ids) == 4
    assert out1.num_cached_tokens == 0
    # The shared 200-token prefix holds 6 full blocks of 32 tokens.
    assert out2.num_cached_tokens == (200 // BLOCK_SIZE) * BLOCK_SIZE


def test_openai_server_helper_serves_and_stops():
    from tests.vllm_support import http_get, http_post_json, metric_sum, parse_prometheus

    model = tiny_model_path()
    prompt = random_token_ids(70, seed=4)
    with start_openai_server(model, extra_args=["--enable-prompt-tokens-details"]) as url:
        assert url.startswith("http://127.0.0.1:")
        body = {"model": model, "prompt": prompt, "max_tokens": 2, "ignore_eos": True}
        http_post_json(url + "/v1/completions", body)
        second = http_post_json(url + "/v1/completions", body)
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == 2 * BLOCK_SIZE
        parsed = parse_prometheus(http_get(url + "/metrics"))
        assert metric_sum(parsed, "vllm:prefix_cache_hits_total") == 2 * BLOCK_SIZE
        proc = url.proc
    assert proc.poll() is not None  # the whole group was stopped at exit
