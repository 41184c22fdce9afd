"""Test-only trace helpers: a tiny JSONL reader (prefix interning, next-access) and random traces.

The real reader is shadow.trace.open_trace; this one exists so the simulator's tests do not depend
on it, and as a second, independent interning for the peer-results check.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from shadow.trace.batch import Batch

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl"
PEER_RESULTS = ROOT / "tests" / "data" / "peer_results_synthetic.txt"
CONVERSATION = ROOT / "tests" / "data" / "mooncake_conversation.jsonl"


def intern_prefix(raw_requests: list[list[int]]) -> list[list[int]]:
    """Dense ids from 1: two entries share an id iff their whole paths from the root agree."""
    ids: dict[tuple[int, int], int] = {}
    out = []
    for req in raw_requests:
        parent = 0
        row = []
        for h in req:
            key = (parent, h)
            b = ids.get(key)
            if b is None:
                b = ids[key] = len(ids) + 1
            row.append(b)
            parent = b
        out.append(row)
    return out


def next_access(requests: list[list[int]]) -> list[list[int]]:
    """Absolute 1-based vtime of the next access to each entry's id (forward flattening), -1 never."""
    flat = [b for r in requests for b in r]
    nxt = [-1] * len(flat)
    seen: dict[int, int] = {}
    for pos in range(len(flat) - 1, -1, -1):
        nxt[pos] = seen.get(flat[pos], -1)
        seen[flat[pos]] = pos + 1
    out, k = [], 0
    for r in requests:
        out.append(nxt[k:k + len(r)])
        k += len(r)
    return out


def read_jsonl(path: Path = SYNTHETIC) -> list[list[int]]:
    with open(path) as f:
        raw = [json.loads(line)["hash_ids"] for line in f if line.strip()]
    return intern_prefix(raw)


@functools.lru_cache(maxsize=None)
def conversation() -> list[list[int]]:
    """The bundled Mooncake conversation trace (read once per process; do not modify it)."""
    return read_jsonl(CONVERSATION)


def batch_of(requests: list[list[int]], with_next: bool = True, first_request: int = 0) -> Batch:
    return Batch.from_lists(requests, next_access=next_access(requests) if with_next else None,
                            first_request=first_request)


def batches_of(requests: list[list[int]], size: int = 500) -> list[Batch]:
    """Split a trace into batches, with next-access computed over the whole trace."""
    nxt = next_access(requests)
    out, vt = [], 1
    for a in range(0, len(requests), size):
        chunk = requests[a:a + size]
        b = Batch.from_lists(chunk, next_access=nxt[a:a + size], first_request=a, first_vtime=vt)
        vt += b.n_blocks
        out.append(b)
    return out


def random_trace(rng: np.random.Generator, n_req: int, n_roots: int = 4, max_len: int = 12,
                 n_raw: int = 6) -> list[list[int]]:
    raw = []
    for _ in range(n_req):
        root = int(rng.integers(0, n_roots))
        n = int(rng.integers(1, max_len + 1))
        raw.append([root * 1000 + int(rng.integers(0, n_raw)) if i else root for i in range(n)])
    return intern_prefix(raw)


def hit_ratios(policy: str, sizes, trace: list[list[int]], params: str = "",
               batch: int = 2000) -> dict[int, float]:
    """Block hit ratio per size of ``policy`` over ``trace`` in the Cython loop, pins off,
    prefix order (as libcachesim serves it)."""
    from shadow.sim import CacheSpec, Simulator

    sim = Simulator([CacheSpec(policy, c, params) for c in sizes], pin=False,
                    replay_order="prefix-order")
    for b in batches_of(trace, size=batch):
        sim.feed(b)
    return {r.spec.capacity: r.n_hits / r.n_blocks for r in sim.results()}


def session_trace(rng: np.random.Generator, n_req: int, n_types: int = 3, max_len: int = 20,
                  p_new: float = 0.3, p_same_time: float = 0.15) -> tuple[list[list[int]], np.ndarray]:
    """A random multi-turn trace with its lcp records (``RECORD_DTYPE``): (requests, records).

    Each request belongs to a session of one request type (``type_id`` 0 .. n_types-1, 0 being
    untyped) and turn (1 first); a session's turn is its previous prompt plus 1-4 new blocks, its
    first turn its type's system prompt (2-4 blocks shared by the type) plus new blocks; a session
    ends once its prompt passes ``max_len`` blocks or by chance.  Arrival seconds increase by an
    exponential gap whose mean depends on the type (1, 4, 16 s ...; some requests share their
    predecessor's second exactly), so a workload policy's categories and clocks both matter.
    ``session_next_req`` is the 1-based index of the session's next request (-1 for its last).
    """
    from shadow.trace.format import RECORD_DTYPE

    raw: list[list[int]] = []
    meta: list[tuple[float, int, int, int]] = []          # (seconds, type, turn, session)
    active: list[list] = []                               # [session, type, turn, prompt]
    n_sessions, fresh, t = 0, 1_000_000, 100.0
    system = {k: [k * 1000 + j for j in range(2 + k % 3)] for k in range(n_types)}
    for _ in range(n_req):
        if not active or rng.random() < p_new:
            k = int(rng.integers(0, n_types))
            s = [n_sessions, k, 0, list(system[k])]
            n_sessions += 1
            active.append(s)
        else:
            s = active[int(rng.integers(0, len(active)))]
        s[2] += 1
        for _ in range(int(rng.integers(1, 5))):
            s[3].append(fresh)
            fresh += 1
        if rng.random() >= p_same_time:
            t += float(rng.exponential(4.0 ** s[1]))
        raw.append(list(s[3]))
        meta.append((t, s[1], s[2], s[0]))
        if len(s[3]) > max_len or rng.random() < 0.15:
            active.remove(s)
    requests = intern_prefix(raw)
    rec = np.zeros(n_req, dtype=RECORD_DTYPE)
    for f in ("chat_id", "parent_chat_id"):
        rec[f] = -1
    rec["start_time_us"] = [round(m[0] * 1e6) for m in meta]
    rec["complete_time_us"] = rec["start_time_us"] + 500_000
    rec["type_id"] = [m[1] for m in meta]
    rec["turn"] = [m[2] for m in meta]
    rec["session_id"] = [m[3] for m in meta]
    nxt, last = np.full(n_req, -1, dtype=np.int64), {}
    for i in range(n_req - 1, -1, -1):
        nxt[i] = last.get(meta[i][3], -1)
        last[meta[i][3]] = i + 1
    rec["session_next_req"] = nxt
    rec["n_blocks"] = [len(r) for r in requests]
    rec["input_length"] = [16 * len(r) for r in requests]
    rec["output_length"] = 1
    return requests, rec


def sliding_session_trace(rng: np.random.Generator, n_req: int, n_sessions: int = 5,
                          n_prompts: int = 2,
                          max_new: int = 4, p_slide: float = 0.1, p_none: float = 0.1,
                          n_types: int = 2) -> tuple[list[list[int]], np.ndarray]:
    """A multi-turn trace with context slides and requests of no session: ``(requests, records)``.

    Each session starts from one of ``n_prompts`` shared system prompts (1-3 blocks) and each of
    its turns extends its previous turn by 1..``max_new`` blocks (the last block of the previous
    turn rehashed half the time, as a partial block is); with ``p_slide`` a turn drops 1-3 blocks
    after the prompt (a context slide: a new prefix from there on).  A request without a session
    (``session_id`` -1) has probability ``p_none``.  ``records`` (lcp ``RECORD_DTYPE``) carry
    ``session_id``, ``session_next_req`` (1-based file-order index of the session's next request,
    -1 none), ``turn`` and ``type_id`` (one type per session), ``start_time_us``.
    """
    from shadow.trace.format import RECORD_DTYPE

    prompts = [[1000 * (k + 1) + j for j in range(int(rng.integers(1, 4)))] for k in range(n_prompts)]
    paths: dict[int, list[int]] = {}
    turns: dict[int, int] = {}
    raw, sess, turn = [], [], []
    fresh = 1_000_000
    for _ in range(n_req):
        if rng.random() < p_none:
            s = -1
            path = list(prompts[int(rng.integers(0, n_prompts))])
        else:
            s = int(rng.integers(0, n_sessions))
            path = list(paths.get(s) or prompts[int(rng.integers(0, n_prompts))])
            if s in paths:
                if len(path) > 3 and rng.random() < p_slide:
                    cut = 3 + int(rng.integers(1, 4))
                    path = path[:1] + path[cut:]
                elif len(path) > 1 and rng.random() < 0.5:
                    path = path[:-1]
        for _ in range(int(rng.integers(1, max_new + 1))):
            fresh += 1
            path.append(fresh)
        if s >= 0:
            paths[s] = path
            turns[s] = turns.get(s, 0) + 1
        raw.append(path)
        sess.append(s)
        turn.append(turns.get(s, 0) if s >= 0 else 0)
    # NOTE: an id's meaning is its whole path from the root (as the trace layer interns), so a
    # slid turn's blocks are new ids from the cut on
    requests = intern_prefix(raw)
    rec = np.zeros(n_req, dtype=RECORD_DTYPE)
    for f in ("start_time_us", "complete_time_us", "chat_id", "parent_chat_id"):
        rec[f] = -1
    rec["start_time_us"] = np.arange(n_req) * 1000
    rec["session_id"] = sess
    rec["turn"] = turn
    rec["type_id"] = [(s % n_types) + 1 if s >= 0 else 0 for s in sess]
    rec["n_blocks"] = [len(r) for r in requests]
    nxt = np.full(n_req, -1, dtype=np.int64)
    last: dict[int, int] = {}
    for i in range(n_req - 1, -1, -1):
        if sess[i] >= 0:
            nxt[i] = last.get(sess[i], -1)
            last[sess[i]] = i + 1
    rec["session_next_req"] = nxt
    return requests, rec


def synth(path: Path | str, *args: str) -> str:
    """``shadow synth ARGS PATH`` (in this process); the path written."""
    from click.testing import CliRunner

    from shadow.cli import cli

    res = CliRunner().invoke(cli, ["synth", *args, str(path)])
    assert res.exit_code == 0, res.output
    return str(path)
