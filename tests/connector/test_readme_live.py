"""The README's live CPU command (README.md, "Use"), run as written: its environment, its vLLM
options and its connector configuration (only ``record_dir``, every other key at its default),
with the tiny model for ``M``, a temporary directory for ``/var/lib/shadow`` and a free port.
Requests with shared prefixes, then SIGTERM to the API server (as Kubernetes and systemd stop
it) while long requests run.  The server exits 0, or its HTTP server waits for the cut-off
requests' connections (vLLM 0.32 with the default ``--shutdown-timeout 0``, now and then) and
the supervisor's SIGKILL comes after a 30 s grace period; either way only final segments are
left (the API server seals the engine core's open one as soon as the engine core is gone),
which ``shadow convert DIR OUT`` and ``shadow stat DIR`` read without a warning, and every
request the client saw complete is recorded exactly once.

The command is read from README.md itself, so an edit there is what this test runs.  Marked
``slow`` and ``vllm``: about a minute on two cores.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests.vllm_support import (REPO_ROOT, StoppedClient, convert_quietly, random_token_ids,
                                start_openai_server, tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

MODULE = "vllm.entrypoints.openai.api_server"
#: Seconds a supervisor waits after SIGTERM before its SIGKILL (Kubernetes'
#: terminationGracePeriodSeconds default).
GRACE_S = 30
README_RECORD_DIR = "/var/lib/shadow"


def readme_cpu_command() -> tuple[dict[str, str], list[str]]:
    """The README's CPU command: its environment assignments and the arguments after
    ``python -m vllm.entrypoints.openai.api_server``, as bash would split them."""
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^VLLM_CPU_KVCACHE_SPACE=.*?(?=^```)", text, re.M | re.S)
    assert m, "README.md has no command line starting with VLLM_CPU_KVCACHE_SPACE="
    # NOTE: backslash-newline outside quotes is a line continuation in bash
    words = shlex.split(m.group(0).replace("\\\n", " "))
    env = {}
    while "=" in words[0] and not words[0].startswith("-"):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[:3] == ["python", "-m", MODULE], words[:3]
    return env, words[3:]


def _open_segments(d) -> list[str]:
    from shadow.trace.segments import PARTIAL_SUFFIX, list_segments

    return [s for s in list_segments(str(d)) if s.endswith(PARTIAL_SUFFIX)] if d.exists() else []


def _live_args(args: list[str], model: str, record_dir: str) -> list[str]:
    """``args`` with the model and the recording directory put in; everything else as written."""
    out = list(args)
    i = out.index("--model")
    out[i + 1] = model
    i = out.index("--kv-transfer-config")
    ktc = json.loads(out[i + 1])
    extra = ktc["kv_connector_extra_config"]
    assert extra == {"record_dir": README_RECORD_DIR}, extra
    extra["record_dir"] = record_dir
    out[i + 1] = json.dumps(ktc)
    return out


def test_the_readme_live_command_stopped_with_sigterm_leaves_final_segments(tmp_path):
    from shadow.trace.segments import list_segments

    env, args = readme_cpu_command()
    model = tiny_model_path()
    rec = tmp_path / "rec"
    args = _live_args(args, model, str(rec))
    prefixes = [random_token_ids(96 + 64 * p, seed=700 + p) for p in range(3)]
    prompts = [prefixes[i % 3] + random_token_ids(1 + i, seed=900 + i) for i in range(34)]

    with start_openai_server(model, extra_args=args, env=env, defaults=(),
                             log_dir=tmp_path) as url:
        client = StoppedClient(url, model)
        for p in prompts[:30]:
            client.send(p, 4)
        threads = client.start(prompts[30:], 1000)
        t0 = time.monotonic()
        url.proc.send_signal(signal.SIGTERM)
        sealed_s = None
        while url.proc.poll() is None and time.monotonic() - t0 < GRACE_S:
            if sealed_s is None and not _open_segments(rec):
                sealed_s = time.monotonic() - t0
            time.sleep(0.1)
        stop_s = time.monotonic() - t0
        rc = url.proc.poll()
        if sealed_s is None and not _open_segments(rec):
            sealed_s = stop_s
        if rc is None:
            # NOTE: the HTTP server still waits for the cut-off requests' connections (vLLM
            # 0.32 with --shutdown-timeout 0): the supervisor's SIGKILL after its grace period
            os.killpg(url.proc.pid, signal.SIGKILL)
            url.proc.wait(30)
        for t in threads:
            t.join(60)
        assert rc in (0, None), url.log_tail()
    sealed = "not" if sealed_s is None else f"{sealed_s:.1f} s"
    print(f"readme live: SIGTERM -> segments sealed after {sealed}, server "
          f"{'exited' if rc == 0 else 'killed'} after {stop_s:.1f} s; {len(client.done)} "
          f"requests completed, {len(client.failed)} cut off")

    segs = list_segments(str(rec))
    assert segs and not _open_segments(rec), segs
    summary, lengths = convert_quietly(rec, tmp_path / "out.lcp.zst")
    assert f"{len(segs)} segment" in summary and "0 restarts, 0 torn tails" in summary, summary
    r = subprocess.run([sys.executable, "-m", "shadow", "stat", str(rec)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert len(client.done) == 30
    client.check_recorded(lengths)
