"""The live sampled miss-ratio curve inside vLLM's OpenAI server: its gauges on vLLM's /metrics
and on the connector's own endpoint, one per target share and capacity fraction; with every
block tracked (rate 1) and requests one at a time they are the exact curve of the recording
(`shadow mrc -a vllm --lookup vllm`) at the engine's capacity and its multiples."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from fractions import Fraction

import pytest

from tests.vllm_support import (REPO_ROOT, free_port, http_get, http_post_json, metric_sum,
                                parse_prometheus, random_token_ids, start_openai_server,
                                tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

NUM_BLOCKS = 40  # 39 usable blocks of 32 tokens


def _prompts() -> list[list[int]]:
    """Sequential prompts over three shared prefixes, with one-offs that evict."""
    bases = [random_token_ids(n, seed=40 + n) for n in (130, 90, 200)]
    out = []
    for i in range(14):
        out.append(bases[i % 3] + random_token_ids(20 + 9 * i, seed=500 + i))
        if i in (4, 9):
            out.append(random_token_ids(700, seed=900 + i))
    return out


def _gauges(m, name: str, label: str) -> dict[str, float]:
    return {dict(k[1])[label]: v for k, v in m.items() if k[0] == name}


def test_live_curve_gauges_on_metrics_equal_the_exact_curve_of_the_recording(tmp_path):
    from shadow.sim.lockstep.curve import FRACTIONS, TARGETS, label
    from shadow.sim.mrc.offline import curve_of_trace, curve_spec
    from shadow.trace.segments import list_segments

    model = tiny_model_path()
    rec_dir = tmp_path / "rec"
    own_port = free_port()
    extra = {"policies": ["vllm"], "capacity_factors": [1], "record_dir": str(rec_dir),
             "record_flush_ms": 0, "metrics_port": own_port, "mrc": {"rate": 1}}
    ktc = json.dumps({"kv_connector": "ShadowConnector", "kv_connector_module_path":
                      "shadow.connector", "kv_role": "kv_producer",
                      "kv_connector_extra_config": extra})
    args = ["--kv-transfer-config", ktc, "--num-gpu-blocks-override", str(NUM_BLOCKS),
            "--served-model-name", "tiny", "--max-model-len", "1024"]
    prompts = _prompts()
    with start_openai_server(model, extra_args=args) as url:
        own_url = f"http://127.0.0.1:{own_port}/metrics"
        for p in prompts:
            http_post_json(url + "/v1/completions", {"model": "tiny", "prompt": p,
                                                     "max_tokens": 5, "ignore_eos": True,
                                                     "temperature": 0.0})
        deadline = time.monotonic() + 30
        while True:
            own = parse_prometheus(http_get(own_url))
            if (metric_sum(own, "shadow_recorded_requests_total") == len(prompts)
                    or time.monotonic() > deadline):
                break
            time.sleep(0.5)
        # one more request carries the worker's last snapshot to vLLM's /metrics
        http_post_json(url + "/v1/completions", {"model": "tiny", "prompt": prompts[0],
                                                 "max_tokens": 5, "ignore_eos": True,
                                                 "temperature": 0.0})
        deadline = time.monotonic() + 30
        while True:
            own = parse_prometheus(http_get(own_url))
            vm = parse_prometheus(http_get(url + "/metrics"))
            if (metric_sum(own, "shadow_recorded_requests_total") == len(prompts) + 1
                    and _gauges(vm, "shadow_mrc_hit_ratio", "capacity_fraction")
                    == _gauges(own, "shadow_mrc_hit_ratio", "capacity_fraction")) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    for where, m in (("own", own), ("vllm", vm)):
        caps = _gauges(m, "shadow_mrc_capacity_blocks", "target")
        ratios = _gauges(m, "shadow_mrc_hit_ratio", "capacity_fraction")
        assert set(caps) == {label(t) for t in TARGETS}, (where, caps)
        assert set(ratios) == {label(f) for f in FRACTIONS}, (where, ratios)
        assert {dict(k[1])["model_name"] for k in m if k[0] == "shadow_mrc_hit_ratio"} == {"tiny"}
    assert _gauges(vm, "shadow_mrc_hit_ratio", "capacity_fraction") == ratios
    assert _gauges(vm, "shadow_mrc_capacity_blocks", "target") == caps
    # the recording, offline: the same curve at the engine's capacity and its integer multiples
    segs = list_segments(str(rec_dir))
    assert segs
    joined = tmp_path / "joined.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(joined)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    spec = curve_spec("vllm", lookup="vllm")
    with spec.open_trace(str(joined)) as tr:
        exact = curve_of_trace(tr, str(joined), spec)
    cap = NUM_BLOCKS - 1
    compared = 0
    for f in FRACTIONS:
        c = f * cap
        if c == int(c) and c >= exact.exact_from:
            assert ratios[label(f)] == pytest.approx(exact.ratios(int(c))["block_hit_ratio"],
                                                     abs=1e-9), f
            compared += 1
    assert compared >= 4 and 0 < ratios["1"] < ratios["8"]
    for t in TARGETS:
        got = caps[label(t)]
        want = exact.capacity_for(Fraction(str(t)), "block_hit_ratio")
        # bins of 1/128 of the engine's capacity, interpolated: within one bin of the exact one
        assert math.isfinite(got) and abs(got - want) <= 1 + cap / 128, (t, got, want)
