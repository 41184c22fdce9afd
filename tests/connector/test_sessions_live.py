"""The recorder infers sessions, turns and parents as it writes (prefix continuation, the code
``shadow convert --infer-sessions`` runs), across segments; on a real vLLM engine's recording the
live fields are the conversations' true structure and equal the offline inference over the same
requests."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest

from shadow.connector.recorder import Recorder
from shadow.trace.annotate import TraceArrays
from shadow.trace.convert import load_lcp, write_lcp
from shadow.trace.segments import list_segments
from shadow.trace.sessions import INFERRED_FIELDS
from tests.vllm_support import (REPO_ROOT, inprocess_llm, random_token_ids,
                                tiny_model_path, vllm_available)

FIELDS = (*INFERRED_FIELDS, "session_next_req")


def _joined(segs: list[str], out) -> np.ndarray:
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return load_lcp(str(out)).records


def _offline(path, tmp_path, window: int | None = None) -> np.ndarray:
    """``shadow convert --infer-sessions`` over the recording with its session fields cleared."""
    t = load_lcp(str(path))
    rec = t.records.copy()
    for f in ("chat_id", "parent_chat_id", "session_id", "session_next_req"):
        rec[f] = -1
    rec["turn"] = 0
    stripped = tmp_path / "stripped.lcp.zst"
    write_lcp(TraceArrays(rec, t.offsets, t.block_ids, None, t.type_names, t.block_size_tokens,
                          replica_names=t.replica_names), str(stripped), producer="test")
    out = tmp_path / "offline.lcp.zst"
    args = ["--session-window", str(window)] if window else []
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", "--infer-sessions", *args,
                        str(stripped), str(out)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return load_lcp(str(out)).records


def _same_fields(a: np.ndarray, b: np.ndarray) -> None:
    for f in FIELDS:
        assert a[f].tolist() == b[f].tolist(), f


@pytest.mark.slow
@pytest.mark.parametrize("window", [2, 65536])
def test_recorder_infers_across_segments_as_convert_does(tmp_path, window):
    t = [1_780_000_000.0]
    rec = Recorder(str(tmp_path / "rec"), block_size=32, max_seconds=60, flush_ms=0,
                   clock=lambda: t[0], session_window=window)
    # two interleaved conversations (ids 1.. and 101..) and a shared-prefix one-off
    a = [1, 2]
    b = [101, 102]
    nxt = [3, 103]
    for i in range(6):
        conv = a if i % 2 == 0 else b
        n_prompt = len(conv) + 1
        conv.append(nxt[i % 2])
        conv.append(nxt[i % 2] + 1)
        nxt[i % 2] += 2
        t[0] += 25.0   # a new segment every few requests
        rec.write(t[0] - 1, t[0], 32 * n_prompt, 33, list(conv))
        if i == 2:
            rec.write(t[0], t[0] + 0.5, 32 * 3, 33, [1, 2, 900, 901])
    rec.close()
    segs = list_segments(str(tmp_path / "rec"))
    assert len(segs) >= 2
    live = _joined(segs, tmp_path / "joined.lcp.zst")
    if window == 65536:
        assert live["parent_chat_id"].tolist() == [-1, -1, 1, -1, 2, 3, 5]
        assert live["session_id"].tolist() == [1, 2, 1, 4, 2, 1, 2]
        assert live["turn"].tolist() == [1, 1, 2, 1, 2, 3, 3]
    else:   # the other conversation and the one-off push a conversation's end out
        assert (live["parent_chat_id"] >= 0).sum() < 4
    _same_fields(live, _offline(tmp_path / "joined.lcp.zst", tmp_path, window))


def test_window_zero_records_no_sessions(tmp_path):
    rec = Recorder(str(tmp_path), block_size=32, session_window=0)
    rec.write(1.0, 2.0, 64, 33, [1, 2, 3])
    rec.write(3.0, 4.0, 160, 33, [1, 2, 3, 4, 5, 6])
    rec.close()
    r = load_lcp(rec.finished[0]).records
    assert (r["session_id"] == -1).all() and (r["chat_id"] == -1).all()
    assert (r["turn"] == 0).all()


def _workload(seed: int = 11):
    """(conversation key or None, branch, new tokens, max_tokens) steps: three conversations
    whose next prompt is the previous prompt + its output + new tokens (one turn branches from
    the history before the previous turn), and one-off prompts sharing system prompts.  Every
    request's new tokens fill a block of its own, so the true structure is recoverable."""
    rng = random.Random(seed)
    steps = []
    for i in range(24):
        if rng.random() < 0.6:
            steps.append((rng.randrange(3), i == 15, random_token_ids(rng.randrange(36, 60),
                                                                     seed=1000 + i),
                          rng.choice([8, 20, 33])))
        else:
            steps.append((None, False, random_token_ids(rng.randrange(36, 70), seed=2000 + i),
                          rng.choice([4, 12])))
    return steps


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")
def test_engine_recording_carries_true_sessions_equal_to_offline(tmp_path):
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES

    rec_dir = tmp_path / "rec"
    extra = {"policies": ["lru"], "capacity_factors": [1.0], "record_dir": str(rec_dir)}
    ktc = KVTransferConfig(kv_connector="ShadowConnector", kv_connector_module_path="shadow.connector",
                           kv_role="kv_producer", kv_connector_extra_config=extra)
    systems = [random_token_ids(n, seed=100 + k) for k, n in enumerate((64, 70, 96))]
    hist: dict[int, list[tuple[list[int], int]]] = {}   # key -> [(history tokens, request)]
    parents: list[int] = []
    n_branch = 0
    with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc, max_model_len=1024) as llm:
        conn = [c for c in INSTANCES if c.cfg.record_dir == str(rec_dir)][0]
        for i, (key, branch, new, max_tokens) in enumerate(_workload()):
            if key is None:
                prompt, parent = systems[i % 3] + new, -1
            else:
                h = hist.setdefault(key, [(systems[key], -1)])
                base = h[-2] if branch and len(h) >= 3 else h[-1]
                n_branch += base is not h[-1]
                prompt, parent = base[0] + new, base[1]
            sp = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
            out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], sp, use_tqdm=False)[0]
            if key is not None:
                hist[key].append((prompt + list(out.outputs[0].token_ids), i + 1))
            parents.append(parent)
        assert conn.flush()
    assert n_branch == 1 and max(len(h) for h in hist.values()) >= 4
    segs = list_segments(str(rec_dir))
    live = _joined(segs, tmp_path / "joined.lcp.zst")
    assert live.shape[0] == len(parents)
    # the recording carries the conversations' true structure (chat ids are positions)
    assert live["chat_id"].tolist() == list(range(1, len(parents) + 1))
    assert live["parent_chat_id"].tolist() == parents
    roots = []
    for p in parents:
        roots.append(len(roots) + 1 if p < 0 else roots[p - 1])
    assert live["session_id"].tolist() == roots
    assert (live["session_next_req"] >= 0).sum() == len(parents) - len(set(roots))
    # ... and equals the offline inference over the same requests
    _same_fields(live, _offline(tmp_path / "joined.lcp.zst", tmp_path))
