"""A real fleet for tests: N vLLM OpenAI servers (the tiny model on the CPU, each with the
ShadowConnector recording under its own replica name and one fleet key) behind a real
``vllm-router`` (PyPI, pinned in pyproject.toml's test extra).

Nothing is mocked: :func:`start_fleet` runs real servers (tests/vllm_support.py), :func:`start_router`
the router's own launcher (``python -m vllm_router.launch_router``); both stop every process they
started, whatever happens.  NOTE: run under ``flock /tmp/vllm.lock`` like every engine test.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from replay.server import free_port, stop_process_group
from tests.vllm_support import (REPO_ROOT, ServerURL, http_post_json, start_openai_server,
                                 wait_for_health)

#: The fleet key every test replica records under (kv_connector_extra_config.fleet_key).
FLEET_KEY = "router test fleet"


def router_available() -> bool:
    """True when the ``vllm_router`` package (its launcher and Rust core) is installed."""
    import importlib.util

    return importlib.util.find_spec("vllm_router") is not None


def router_version() -> str:
    from importlib.metadata import version

    return version("vllm-router")


@dataclass
class Fleet:
    """Running replicas: their URLs (the router's worker URLs, in order), names, recording
    directories and KV event endpoints."""

    urls: list[ServerURL]
    names: list[str]
    record_dirs: list[Path]
    model: str
    kv_events: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """Empty every replica's prefix cache and its shadow caches (vLLM's dev endpoint with
        ``reset_external``: the connector's ``reset_cache``), waiting until each succeeds."""
        for url in self.urls:
            deadline = time.monotonic() + 60
            while True:
                out = http_post_json(url + "/reset_prefix_cache?reset_external=true", {})
                if out.get("success"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url}: the prefix cache did not reset")
                time.sleep(0.5)


def replica_args(i: int, record_dir: Path, *, kv_events_port: int | None,
                 extra_config: dict | None = None) -> tuple[list[str], dict[str, str]]:
    """The server arguments and environment of replica ``i``."""
    extra = {"policies": ["vllm"], "capacity_factors": [1.0], "record_dir": str(record_dir),
             "replica": f"r{i}", "fleet_key": FLEET_KEY, **(extra_config or {})}
    kv = {"kv_connector": "ShadowConnector", "kv_connector_module_path": "shadow.connector",
          "kv_role": "kv_producer", "kv_connector_extra_config": extra}
    args = ["--kv-transfer-config", json.dumps(kv), "--enable-prompt-tokens-details"]
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if kv_events_port is not None:
        # NOTE: vllm-router's index takes engine hashes as 32-byte digests
        # (src/kv_index/admit.rs: validate_hash), not vLLM's default 64-bit integers
        args += ["--kv-events-config", json.dumps({
            "enable_kv_cache_events": True, "publisher": "zmq",
            "endpoint": f"tcp://127.0.0.1:{kv_events_port}"})]
        env["VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"] = "0"
    return args, env


@contextlib.contextmanager
def start_fleet(model: str, n: int, work_dir: Path, *, kv_events: bool = False,
                server_args: Sequence[str] = (),
                extra_config: dict | None = None) -> Iterator[Fleet]:
    """``n`` replicas ``r0..r{n-1}``, started one after the other (a 2-core machine starts them
    no faster at once), all stopped at exit."""
    with contextlib.ExitStack() as stack:
        urls, dirs, events = [], [], []
        for i in range(n):
            rec = work_dir / f"rec-r{i}"
            port = free_port() if kv_events else None
            args, env = replica_args(i, rec, kv_events_port=port, extra_config=extra_config)
            url = stack.enter_context(start_openai_server(model, [*args, *server_args], env=env,
                                                          log_dir=work_dir))
            urls.append(url)
            dirs.append(rec)
            if port is not None:
                events.append(f"tcp://127.0.0.1:{port}")
        yield Fleet(urls, [f"r{i}" for i in range(n)], dirs, model, events)


@contextlib.contextmanager
def start_router(fleet: Fleet, policy: str, *, args: Sequence[str] = (),
                 block_size: int = 32, log_dir: Path | None = None,
                 startup_timeout_s: float = 120.0) -> Iterator[str]:
    """``vllm-router --policy policy`` in front of ``fleet`` (workers in the fleet's order; with
    KV events for ``kv_aware``); yields its base URL and stops it at exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm_router.launch_router", "--host", "127.0.0.1",
           "--port", str(port), "--policy", policy, "--worker-urls", *fleet.urls,
           "--log-level", "info", *args]
    if policy == "kv_aware":
        cmd += [f"--kv-event-source={u}={e}" for u, e in zip(fleet.urls, fleet.kv_events)]
        cmd += ["--kv-event-block-size", str(block_size), "--kv-event-model", fleet.model]
    log_dir = Path(log_dir or tempfile.mkdtemp(prefix="vllm-router-log-"))
    log_path = log_dir / f"router-{policy}-{port}.log"
    env = dict(os.environ)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + pp if pp else "")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                cwd=str(REPO_ROOT), start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_health(proc, url, log_path, startup_timeout_s, what="vllm-router", poll_s=0.3)
        yield url
    finally:
        stop_process_group(proc, grace_s=10.0)


def conversation_trace(path: Path, *, sessions: int = 8, turns: int = 4, block_size: int = 32,
                       seed: int = 0) -> Path:
    """A small multi-turn trace to drive a fleet (lcp, ids as replay turns them into tokens):
    three shared system prompts of 2 to 4 blocks; each session a user (1-based) whose turns each
    add 1 to 3 blocks to the previous prompt, the turns of the sessions interleaved; every prompt
    ends 5 tokens into a block (a partial tail, as real prompts do); 8 output tokens."""
    import random

    import numpy as np

    from shadow.trace import LcpWriter
    from shadow.trace.format import empty_records

    rng = random.Random(seed)
    next_id = [1]

    def fresh(n: int) -> list[int]:
        ids = list(range(next_id[0], next_id[0] + n))
        next_id[0] += n
        return ids

    systems = [fresh(n) for n in (2, 3, 4)]
    hist = {s: list(systems[s % 3]) for s in range(sessions)}
    order = [s for _ in range(turns) for s in rng.sample(range(sessions), sessions)]
    rows = []
    for k, s in enumerate(order):
        hist[s] = hist[s] + fresh(rng.randint(1, 3))
        rows.append((k, s, list(hist[s])))
    rec = empty_records(len(rows))
    lengths = []
    flat = []
    for i, (k, s, ids) in enumerate(rows):
        # the last id is the partial tail block (5 tokens)
        rec[i]["start_time_us"] = rec[i]["complete_time_us"] = 1_000_000 * (k + 1)
        rec[i]["session_id"], rec[i]["user_id"] = s, s + 1
        rec[i]["input_length"] = (len(ids) - 1) * block_size + 5
        rec[i]["output_length"] = 8
        lengths.append(len(ids))
        flat += ids
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    with LcpWriter(str(path), block_size_tokens=block_size, sorted=True) as w:
        w.write_arrays(rec, offsets, np.asarray(flat, dtype=np.int64))
    return path


def served_counts(urls: Sequence[str]) -> list[float]:
    """Requests each server has finished, from its own /metrics (``vllm:request_success_total``):
    which engine served what, independent of the router's counters."""
    from tests.vllm_support import http_get, parse_prometheus

    out = []
    for u in urls:
        m = parse_prometheus(http_get(u + "/metrics"))
        out.append(sum(v for (name, _lab), v in m.items()
                       if name == "vllm:request_success_total"))
    return out


def replay_through(trace: Path, endpoint: str, server: str, out: Path, *,
                   concurrency: int = 1, num_gpu_blocks: int = 64,
                   rate: float | None = None) -> tuple[list[dict], float]:
    """``replay --session-headers`` of ``trace`` through the router at ``endpoint``, at most
    ``concurrency`` requests in flight; its per-request rows in send order and the run's start
    (Unix seconds: a row's send time is that plus its ``sent_s``).

    NOTE: the server's facts are read from ``server`` (``--info-endpoint``): vllm-router 0.1.17
    forwards ``/metrics`` and ``/version`` through its policy, which would advance round_robin's
    counter before the first request (measured: 2 of 26 decisions, every request one replica
    further on).  ``rate``: send at this many requests/s with near-constant gaps (``--rate``,
    ``--burstiness 100``) instead of back to back."""
    from tests.vllm_support import BLOCK_SIZE, TINY_VOCAB_SIZE

    r = subprocess.run([sys.executable, "-m", "replay", "-t", str(trace), "--endpoint", endpoint,
                        "--info-endpoint", server, "--concurrency", str(concurrency),
                        "--session-headers", "--no-progress", "--engine-block-size",
                        str(BLOCK_SIZE), "--num-gpu-blocks", str(num_gpu_blocks),
                        "--vocab-size", str(TINY_VOCAB_SIZE), "-o", str(out),
                        *(["--rate", str(rate), "--burstiness", "100"] if rate else [])],
                       capture_output=True, text=True, cwd=str(REPO_ROOT),
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert all(x.get("error") is None for x in rows), [x["error"] for x in rows if x["error"]]
    started = json.loads((out / "run.json").read_text())["started_unix"]
    return sorted(rows, key=lambda x: x["seq"]), float(started)


def merge_recordings(dirs: Sequence[Path], out: Path) -> Path:
    """``shadow convert`` of every segment of the replicas' recording directories into one
    fleet trace (the servers stopped: their last segments are ``.partial``)."""
    from shadow.trace.segments import list_segments

    segs = [s for d in dirs for s in list_segments(str(d))]
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       capture_output=True, text=True, cwd=str(REPO_ROOT),
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), timeout=300)
    assert r.returncode == 0 and f"{len(dirs)} replicas" in r.stdout, r.stdout + r.stderr
    return out


def fleet_window(merged: Path, t0_us: int, t1_us: int, block_size: int):
    """The merged trace's requests that arrived in ``[t0_us, t1_us]`` (wall clock), one entry per
    request in arrival order, as a loaded ``shadow.sim.fleet`` trace (file order = arrival
    order), the replica names and how many admissions ended in a preemption.

    NOTE: an admission that ended in a preemption is a record of its own (type ``preempted``)
    with the request's arrival and replica; the request is its last record, started at its
    first admission (a router routes it once, at its arrival)."""
    import numpy as np

    from shadow.sim.fleet.run import FleetTrace
    from shadow.trace import read_header
    from shadow.trace.convert import load_lcp
    from shadow.trace.segments import PREEMPTED_TYPE

    header = read_header(str(merged))
    t = load_lcp(str(merged))
    rec = t.records
    arrival = rec["arrival_time_us"]
    win = np.flatnonzero((arrival >= t0_us) & (arrival <= t1_us))
    preempted = np.array([header.type_name(int(x)) == PREEMPTED_TYPE
                          for x in rec["type_id"][win]], dtype=bool)
    first_start: dict[tuple[int, int], int] = {}
    for k in win:
        key = (int(arrival[k]), int(rec["replica_id"][k]))
        first_start[key] = min(first_start.get(key, int(rec["start_time_us"][k])),
                               int(rec["start_time_us"][k]))
    order = win[~preempted]
    order = order[np.argsort(arrival[order], kind="stable")]
    out = rec[order].copy()
    out["start_time_us"] = [first_start[(int(a), int(r))]
                            for a, r in zip(out["arrival_time_us"], out["replica_id"])]
    ids = [t.block_ids[t.offsets[k]:t.offsets[k + 1]] for k in order]
    off = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids], out=off[1:])
    flat = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    ft = FleetTrace(out, off, flat, np.full(flat.shape[0], -1, dtype=np.int64), header,
                    block_size)
    return ft, list(header.replica_names), int(np.count_nonzero(preempted))


def match_sent(ft, rows: Sequence[dict], started_unix: float) -> list[int]:
    """For each request of ``ft`` (a :func:`fleet_window`), the replay row (index into ``rows``)
    that sent it.

    The recording has no request ids, so a request is matched by its prompt: the same token
    count and full blocks that map one to one onto the row's trace blocks (the map from trace
    ids to recorded ids, built as rows are matched in send order, stays a bijection); among
    equals the nearest in time (``started_unix`` + the row's ``sent_s`` and ``end_s`` against
    the arrival and the release: a first turn's full blocks may be the shared system prompt
    alone, and concurrent sends reach the engines in any order)."""
    n = ft.n
    free = set(range(n))
    d2r: dict[int, int] = {}
    taken: set[int] = set()
    out = [-1] * n
    for j in sorted(range(len(rows)), key=lambda j: rows[j]["sent_s"]):
        row = rows[j]
        blocks = [int(b) for b in row["blocks"]]
        sent_us = (started_unix + row["sent_s"]) * 1e6
        end_us = (started_unix + (row["end_s"] or row["sent_s"])) * 1e6
        best = None
        for i in free:
            if int(ft.rec["input_length"][i]) != row["prompt_tokens"]:
                continue
            ids = ft.ids[ft.off[i]:ft.off[i] + len(blocks)].tolist()
            if len(ids) != len(blocks) or not all(
                    d2r[d] == r if d in d2r else r not in taken for d, r in zip(blocks, ids)):
                continue
            gap = (abs(int(ft.rec["arrival_time_us"][i]) - sent_us)
                   + abs(int(ft.rec["complete_time_us"][i]) - end_us))
            if best is None or gap < best[0]:
                best = (gap, i, ids)
        if best is None:
            raise AssertionError(f"replay row {row['seq']} (trace request {row['index']}) "
                                 f"matches no recorded request")
        _, i, ids = best
        free.discard(i)
        out[i] = j
        for d, r in zip(blocks, ids):
            d2r[d] = r
            taken.add(r)
    return out
