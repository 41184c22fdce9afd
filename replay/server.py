"""The server side of a replay: start a vLLM OpenAI server (``--launch``) and learn what it runs.

:func:`launch` starts ``python -m vllm.entrypoints.openai.api_server`` on 127.0.0.1 in its own
process group (stdout and stderr to a log file), waits for ``GET /health`` and stops the whole group
with SIGTERM (SIGKILL after a grace period) on exit.  :func:`server_info` reads ``/v1/models`` (the
model name, its ``root`` path and ``max_model_len``) and ``/metrics`` (the engine's block size and
number of KV blocks from the ``vllm:cache_config_info`` info gauge).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from shadow.errors import ShadowError

logger = logging.getLogger(__name__)


@dataclass
class ServerInfo:
    model: str
    root: str | None = None
    max_model_len: int | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    prefix_caching: bool | None = None
    version: str | None = None


def _get(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - user-given endpoint
        return resp.read().decode("utf-8", "replace")


_INFO_RE = re.compile(r"^vllm:cache_config_info\{(?P<labels>.*)\}\s+\S+\s*$", re.M)
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_cache_config_info(metrics_text: str) -> dict[str, str]:
    """The labels of the first ``vllm:cache_config_info`` sample in a Prometheus text page."""
    m = _INFO_RE.search(metrics_text)
    if not m:
        return {}
    return {k: v for k, v in _LABEL_RE.findall(m.group("labels"))}


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "", "None") else None
    except ValueError:
        return None


def server_info(endpoint: str, model: str | None = None) -> ServerInfo:
    """Ask a running server what it serves; errors say which URL failed."""
    base = endpoint.rstrip("/")
    try:
        import json

        models = json.loads(_get(f"{base}/v1/models")).get("data") or []
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ShadowError(f"{base}/v1/models: cannot read the server's models: {exc}") from None
    card = None
    for c in models:
        if model is None or c.get("id") == model:
            card = c
            break
    if card is None:
        names = ", ".join(str(c.get("id")) for c in models) or "none"
        raise ShadowError(f"{base}/v1/models: model {model!r} not served (served: {names})")
    info = ServerInfo(model=str(card["id"]), root=card.get("root"),
                      max_model_len=_int_or_none(str(card.get("max_model_len"))))
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
        labels = parse_cache_config_info(_get(f"{base}/metrics"))
        info.block_size = _int_or_none(labels.get("block_size"))
        info.num_gpu_blocks = _int_or_none(labels.get("num_gpu_blocks"))
        if labels.get("enable_prefix_caching") is not None:
            info.prefix_caching = labels["enable_prefix_caching"] == "True"
    with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
        import json

        info.version = json.loads(_get(f"{base}/version")).get("version")
    return info


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(base: str, proc: subprocess.Popen | None, timeout_s: float, log_path: Path | None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            tail = ""
            if log_path and log_path.is_file():
                tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
            raise ShadowError(f"the launched server exited with status {proc.returncode} before "
                              f"it was healthy (log {log_path}): {tail}")
        with contextlib.suppress(urllib.error.URLError, OSError):
            _get(f"{base}/health", timeout=2.0)
            return
        time.sleep(0.5)
    raise ShadowError(f"{base}/health: not healthy after {timeout_s:g} s (log {log_path})")


def stop_process_group(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the process group, then SIGKILL it after ``grace_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def launch_command(server_args: str, port: int) -> list[str]:
    args = shlex.split(server_args)
    for flag in ("--host", "--port"):
        if any(a == flag or a.startswith(flag + "=") for a in args):
            raise ShadowError(f"--launch: do not pass {flag}; the replay binds the server to 127.0.0.1 itself")
    if "--enable-prompt-tokens-details" not in args:
        # NOTE: without it the server does not report cached tokens, the quantity being validated.
        args.append("--enable-prompt-tokens-details")
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--host", "127.0.0.1", "--port", str(port), *args]


@contextlib.contextmanager
def launch(server_args: str, *, log_path: Path, timeout_s: float = 900.0,
           env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start a vLLM OpenAI server on a free port of 127.0.0.1; yield ``(base_url, process)``."""
    port = free_port()
    cmd = launch_command(server_args, port)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logger.info("launching: %s", shlex.join(cmd))
    with open(log_path, "ab") as log:
        log.write(f"# replay --launch: {shlex.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**os.environ, **(env or {})})
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "ab") as log:
        # NOTE: first lines of the log say where the server is, for whoever watches the run
        log.write(f"# replay --launch: server {base} pid {proc.pid} (process group {proc.pid})\n".encode())

    def _on_term(signum, frame):  # NOTE: SIGTERM must still stop the server we started
        raise SystemExit(143)

    try:
        prev = signal.signal(signal.SIGTERM, _on_term)
    except ValueError:  # not the main thread: the caller owns signal handling
        prev = None
    try:
        wait_healthy(base, proc, timeout_s, log_path)
        yield base, proc
    finally:
        stop_process_group(proc)
        if prev is not None:
            signal.signal(signal.SIGTERM, prev)
