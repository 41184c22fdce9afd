"""The recording closes cleanly on vLLM's shutdown paths (docs/connector.md, "Running for
weeks"): an in-process engine shut down, or its process exiting without vLLM's shutdown reaching
the connector (the exit hook), leaves final segments and a free stream lock; SIGINT to the OpenAI server with requests in flight and a
``--shutdown-timeout`` leaves only final segments holding every request the client saw complete,
read by ``shadow convert DIR`` without a warning.  (SIGTERM with vLLM's default timeout and a
SIGKILL restart: tests/connector/test_soak.py.)"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from tests.vllm_support import (REPO_ROOT, StoppedClient, convert_quietly, inprocess_llm,
                                random_token_ids, start_openai_server, tiny_model_path,
                                vllm_available, wait_for_exit)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

EXTRA = {"policies": ["vllm"], "capacity_factors": [1], "segment_max_bytes": 16384}


def _ktc(record_dir) -> dict:
    return {"kv_connector": "ShadowConnector", "kv_connector_module_path": "shadow.connector",
            "kv_role": "kv_producer",
            "kv_connector_extra_config": dict(EXTRA, record_dir=str(record_dir))}


def _generate(llm, n: int, seed: int) -> None:
    from vllm import SamplingParams, TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=random_token_ids(60 + 7 * i, seed=seed + i))
               for i in range(n)]
    llm.generate(prompts, SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)


def _assert_closed(d, n: int | None = None) -> None:
    """Only final segments, ``n`` requests in them (if given), the stream lock free."""
    from shadow.trace.recording import load_recording
    from shadow.trace.segments import list_segments, stream_is_live

    segs = list_segments(str(d))
    assert segs and not [s for s in segs if s.endswith(".partial")]
    assert not stream_is_live(str(d), "shadow-e0-dp0")
    _trace, summary = load_recording(str(d))
    assert (summary.torn_tails, summary.open_segments) == (0, 0)
    assert n is None or summary.requests == n


def test_an_in_process_engine_closes_its_recording_at_shutdown(tmp_path):
    from vllm.config import KVTransferConfig

    d = tmp_path / "rec"
    with inprocess_llm(tiny_model_path(), kv_transfer_config=KVTransferConfig(**_ktc(d))) as llm:
        _generate(llm, 12, seed=100)
    _assert_closed(d, 12)


EXIT_CHILD = """
import os, sys
sys.path.insert(0, {root!r})
from tests.vllm_support import set_inprocess_env, llm_kwargs
set_inprocess_env()
from vllm import LLM, SamplingParams, TokensPrompt
from vllm.config import KVTransferConfig
from shadow.connector.connector import ShadowConnector
ShadowConnector.shutdown = lambda self: None      # vLLM's shutdown path does not reach it
llm = LLM(**llm_kwargs({model!r}, kv_transfer_config=KVTransferConfig(**{ktc!r})))
llm.generate([TokensPrompt(prompt_token_ids=[5 + i] * (40 + i)) for i in range(7)],
             SamplingParams(max_tokens=4), use_tqdm=False)
print("generated", flush=True)
"""


def test_the_exit_hook_closes_the_recording_when_vllm_does_not(tmp_path):
    """An engine whose process exits without vLLM's shutdown reaching the connector (here its
    shutdown made a no-op): the exit hook (multiprocessing.util.Finalize, run at the process's
    exit) drains the worker and closes the segment."""
    d = tmp_path / "rec"
    code = EXIT_CHILD.format(root=str(REPO_ROOT), model=tiny_model_path(), ktc=_ktc(d))
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "generated" in r.stdout, r.stderr[-3000:]
    _assert_closed(d, 7)


def test_sigint_with_requests_in_flight_leaves_only_final_segments(tmp_path):
    d = tmp_path / "rec"
    args = ["--kv-transfer-config", json.dumps(_ktc(d)), "--served-model-name", "tiny",
            "--shutdown-timeout", "120"]
    with start_openai_server(tiny_model_path(), extra_args=args, log_dir=tmp_path) as url:
        client = StoppedClient(url, "tiny")
        for i in range(20):
            client.send(random_token_ids(40 + 3 * i, seed=300 + i), 24)
        # six long requests; the stop comes once the engine runs some of them
        threads = client.start([random_token_ids(40 + 3 * i, seed=300 + i)
                                for i in range(20, 26)], 400)
        # NOTE: Ctrl-C reaches the whole foreground group; the API server's handler is what
        # stops the engine, so the signal goes to it
        url.proc.send_signal(signal.SIGINT)
        # NOTE: the drain ends when the last request does; the timeout only bounds it on a
        # loaded machine (10 s cut all six off on two busy cores)
        for t in threads:
            t.join(150)
        assert wait_for_exit(url.proc, 150) is not None
    _assert_closed(d)
    summary, lengths = convert_quietly(d, tmp_path / "all.lcp.zst")
    assert "0 restarts, 0 torn tails" in summary
    # every request the client saw complete is there once (the in-flight ones drained)
    client.check_recorded(lengths)
    assert len(client.done) >= 21 and len(client.done) + len(client.failed) == 26
