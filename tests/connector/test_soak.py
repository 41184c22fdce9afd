"""Weeks beside production, in a few minutes: a real OpenAI server with the connector recording
into small segments (many rotations), a client sending 3,000 requests with shared system
prompts four at a time, one SIGTERM restart (the client's traffic drained first, as a rolling
restart does) and one SIGKILL restart (the whole process group, requests in flight) in the
middle, then a clean SIGTERM stop.  Afterwards:

* the directory holds only final segments (the SIGTERM stops sealed by the API server at its
  exit, the SIGKILL's orphan by the restarted recorder), and ``shadow convert DIR`` reads it
  without a warning: 3 runs of one stream, 2 restarts, 0 torn tails;
* every request the client saw complete is in the recording exactly once (each request has its
  own prompt and output length), and only in the SIGKILL's run can requests be missing: at most
  as many as were in flight;
* the shadow ``vllm`` cache at the engine's capacity counts exactly the engine's cached tokens
  (its counters on the own endpoint against the responses' ``cached_tokens``, per run: the
  counters start again at 0 after each restart), and the recording, served with ``--timing
  recorded``, predicts each response's cached tokens;
* the engine core's memory stays flat over the first run once warm (RSS sampled every 100
  requests; the connector's state is bounded by configuration: see docs/connector.md "Running
  for weeks").

Marked ``slow`` and ``vllm``: about 4 minutes on two cores.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.vllm_support import (REPO_ROOT, free_port, http_get, http_post_json, metric_sum,
                                parse_prometheus, random_token_ids, start_openai_server,
                                tiny_model_path, vllm_available, wait_for_exit)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

#: Requests per run: the first stopped by SIGTERM, the second killed (SIGKILL) once KILL_AFTER
#: of its requests completed, the third stopped by SIGTERM at the end.
RUNS = (1200, 900, 900)
KILL_AFTER = 600
IN_FLIGHT = 4
#: System prompts (tokens): 100 apart, so that (prompt length, output length) names a request.
PREFIX_LENGTHS = (64, 164, 264, 364, 464, 564)
#: Memory of the engine-core process may grow this much from the first run's 30% point to its
#: end (vLLM's own allocations and allocator noise included; the connector's state is bounded
#: by the configuration below).
RSS_GROWTH_BOUND = 24 << 20
#: The connector's bounds, small so that they are reached within the run.
EXTRA = {"policies": ["vllm"], "capacity_factors": [1], "segment_max_bytes": 16384,
         "id_horizon_s": 5, "record_session_window": 256, "prediction_log_size": 64,
         "engine_id": "soak"}


def _spec(i: int) -> tuple[list[int], int]:
    """Request ``i``: a shared system prompt and its own suffix (prompt ids), its output length.
    (prompt length, output length) differs for every i < 3,000."""
    p = i % len(PREFIX_LENGTHS)
    prefix = random_token_ids(PREFIX_LENGTHS[p], seed=1000 + p)
    k = 1 + (i // len(PREFIX_LENGTHS)) % 8
    s = 1 + i // (len(PREFIX_LENGTHS) * 8)
    return prefix + random_token_ids(s, seed=50_000 + i), k


class Client:
    """Sends specs ``IN_FLIGHT`` at a time; records (prompt length, output length, cached
    tokens) of every completed request, and counts the requests that failed."""

    def __init__(self, url: str, model: str) -> None:
        self.url, self.model = url, model
        self.done: list[tuple[int, int, int]] = []
        self.failed = 0
        self._lock = threading.Lock()
        self.stop = threading.Event()

    def _one(self, i: int) -> None:
        if self.stop.is_set():
            return
        prompt, k = _spec(i)
        try:
            out = http_post_json(self.url + "/v1/completions",
                                 {"model": self.model, "prompt": prompt, "max_tokens": k,
                                  "min_tokens": k, "ignore_eos": True, "temperature": 0},
                                 timeout_s=60)
        except Exception:  # noqa: BLE001 - a request cut off by the kill
            with self._lock:
                self.failed += 1
            return
        u = out["usage"]
        assert u["prompt_tokens"] == len(prompt) and u["completion_tokens"] == k
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        with self._lock:
            self.done.append((len(prompt), k, cached))

    def run(self, ids: range, on_progress=None) -> None:
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            futures = [pool.submit(self._one, i) for i in ids]
            for n, f in enumerate(futures, 1):
                f.result()
                if on_progress is not None:
                    on_progress(n)


def _engine_core(api_pid: int):
    import psutil

    for c in psutil.Process(api_pid).children(recursive=True):
        try:
            if "EngineCore" in " ".join(c.cmdline()) or "EngineCore" in c.name():
                return c
        except psutil.Error:
            continue
    return None


def _own(port: int) -> dict:
    return parse_prometheus(http_get(f"http://127.0.0.1:{port}/metrics"))


def _wait_recorded(port: int, n: int, timeout_s: float = 60.0) -> dict:
    """The own endpoint once the worker has recorded ``n`` requests (it runs behind the
    engine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        m = _own(port)
        if metric_sum(m, "shadow_recorded_requests_total") >= n or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def _records(paths: list[str]) -> list[tuple[int, int, int]]:
    """(input length, output length, type id) of every record of ``paths``, in file order."""
    from shadow.trace import open_trace

    out = []
    for p in paths:
        with open_trace(p) as tr:
            for b in tr:
                r = b.records
                out += list(zip(r["input_length"].tolist(), r["output_length"].tolist(),
                                r["type_id"].tolist()))
    return out


def _predicted(paths: list[str], tmp: Path, cap: int) -> dict[tuple[int, int], int]:
    """The run's recording served with ``--timing recorded`` in ``vllm`` at the engine's
    capacity: first-miss hit tokens per (prompt length, output length)."""
    from shadow.trace import open_trace
    from tests.connector.test_timing_recorded import serve_recorded

    joined = tmp / f"run-{abs(hash(tuple(paths)))}.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *paths, str(joined)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    _res, hits, _start = serve_recorded(joined, [f"vllm|{cap}"])
    with open_trace(str(joined)) as tr:
        rec = np.concatenate([b.records for b in tr])
    return {(int(a), int(b)): int(h) for a, b, h in zip(rec["input_length"],
                                                        rec["output_length"], hits[:, 0])}


def test_weeks_of_restarts_in_minutes(tmp_path):
    from shadow.trace.segments import (PARTIAL_SUFFIX, SEALED_MARK, list_segments,
                                       scan_segments, split_runs)
    from shadow.trace import read_header

    model = tiny_model_path()
    rec_dir = tmp_path / "rec"
    own_port = free_port()
    extra = dict(EXTRA, record_dir=str(rec_dir), metrics_port=own_port)
    args = ["--kv-transfer-config", json.dumps(
                {"kv_connector": "ShadowConnector", "kv_connector_module_path": "shadow.connector",
                 "kv_role": "kv_producer", "kv_connector_extra_config": extra}),
            "--enable-prompt-tokens-details", "--served-model-name", "tiny"]
    clients: list[Client] = []
    caps: dict[int, int] = {}
    rss: list[int] = []
    first = 0
    for run, n in enumerate(RUNS):
        ids = range(first, first + n)
        first += n
        with start_openai_server(model, extra_args=args, log_dir=tmp_path) as url:
            client = Client(url, "tiny")
            clients.append(client)
            m0 = _own(own_port)
            # counters start at 0 in every run, as vLLM's do
            assert metric_sum(m0, "shadow_observed_requests_total") == 0
            assert metric_sum(m0, "shadow_recorded_requests_total") == 0
            if run == 1:
                def kill(done: int, url=url, client=client) -> None:
                    if done == KILL_AFTER:
                        os.killpg(url.proc.pid, signal.SIGKILL)
                        client.stop.set()
                client.run(ids, kill)
                url.proc.wait(timeout=30)
                continue
            core = _engine_core(url.proc.pid) if run == 0 else None

            def sample(done: int, core=core) -> None:
                if core is not None and done % 100 == 0:
                    rss.append(core.memory_info().rss)
            client.run(ids, sample)
            assert client.failed == 0 and len(client.done) == n
            # the live shadow counted exactly the engine's cached tokens in this run
            m = _wait_recorded(own_port, n)
            cap = caps[run] = int(metric_sum(m, "shadow_engine_capacity_blocks"))
            hit = metric_sum(m, "shadow_prefix_hit_tokens_total", policy="vllm",
                             capacity_blocks=str(cap))
            assert metric_sum(m, "shadow_recorded_requests_total") == n
            assert hit == sum(c for _p, _k, c in client.done) > 0
            assert metric_sum(m, "shadow_engine_hit_tokens_total") == hit
            assert metric_sum(m, "shadow_dropped_requests_total") == 0
            # drained (as a rolling restart does), then SIGTERM to the API server alone, as
            # Kubernetes and systemd send it
            url.proc.send_signal(signal.SIGTERM)
            assert wait_for_exit(url.proc, 60) == 0
            # the API server sealed the engine core's open segment at its exit
            assert not [s for s in list_segments(str(rec_dir)) if s.endswith(PARTIAL_SUFFIX)]

    # -- the directory: final segments only, read as one trace without a warning ---------------
    segs = scan_segments(str(rec_dir))
    assert segs and not [s for s in segs if s.partial]
    runs = split_runs(segs)
    assert len(runs) == 3 and all(len(r) >= 3 for r in runs)      # several rotations each
    out = tmp_path / "all.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", str(rec_dir), str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert f"{len(segs)} segments of 1 engine/rank stream, 2 restarts, 0 torn tails" in r.stdout
    # the SIGKILL's orphan was sealed by the restarted recorder
    assert read_header(runs[1][-1].path).producer.endswith(SEALED_MARK)

    # -- every completed request recorded exactly once --------------------------------------
    for run, (client, segs_run) in enumerate(zip(clients, runs)):
        recorded = _records([s.path for s in segs_run])
        assert all(t == 0 for _i, _o, t in recorded)               # no preemption
        got = collections.Counter((i, o) for i, o, _t in recorded)
        assert max(got.values()) == 1                              # nothing twice
        done = collections.Counter((p, k) for p, k, _c in client.done)
        if run != 1:
            assert got == done
            continue
        missing = done - got
        extra = got - done
        assert sum(missing.values()) <= IN_FLIGHT, missing
        # recorded but never answered: finished in the engine as the kill came
        assert sum(extra.values()) <= IN_FLIGHT and client.failed >= sum(extra.values())
        assert len(client.done) >= KILL_AFTER

    # -- each response's cached tokens, predicted from the recording --------------------------
    for run, (client, segs_run) in enumerate(zip(clients, runs)):
        if run == 1:
            continue
        pred = _predicted([s.path for s in segs_run], tmp_path, caps[run])
        wrong = [(p, k, c, pred[(p, k)]) for p, k, c in client.done if pred[(p, k)] != c]
        assert not wrong, wrong[:10]

    # -- the engine core's memory over the first run, once warm ------------------------------
    assert len(rss) == RUNS[0] // 100
    warm = rss[len(rss) * 3 // 10]
    growth = max(rss) - warm
    print(f"soak: engine-core RSS {warm / 2**20:.1f} MiB at 30% of run 1, max"
          f" {max(rss) / 2**20:.1f} MiB, growth {growth / 2**20:.2f} MiB over"
          f" {RUNS[0] * 7 // 10} requests; {len(segs)} segments")
    assert growth <= RSS_GROWTH_BOUND
