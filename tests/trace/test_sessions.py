"""Sessions where a trace has none: ``parent_chat_id`` chains (always) and prefix continuation
(``shadow convert --infer-sessions``), through the real command line and the library; the
streaming inferrer and the converter agree, and on the synthetic trace the inference recovers
the generator's ground truth wherever the prompt continues its history."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shadow.trace import open_trace
from shadow.trace.convert import load_lcp
from shadow.trace.sessions import INFERRED_FIELDS, SessionInferrer, infer_sessions
from shadow.trace.synth import SynthParams, generate
from tests.trace import bad_inputs as bi

B = 16


def _req(t: int, ids: list[int], n_prompt: int, **extra) -> dict:
    """A request in the recorder's shape: ``n_prompt`` prompt blocks, then generated blocks;
    ``input_length + output_length - 1`` covers exactly ``len(ids)`` blocks."""
    return {"timestamp": t, "input_length": B * n_prompt,
            "output_length": B * (len(ids) - n_prompt) + 1, "hash_ids": ids, **extra}


def _records(tmp_path, rows: list[dict], *options: str, name: str = "t") -> np.ndarray:
    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{name}.lcp.zst"
    r = bi.shadow("convert", "--time-unit", "s", "--block-size", str(B), *options, str(src),
                  str(out))
    assert r.returncode == 0, r.stderr
    with open_trace(str(out)) as tr:
        assert tr.header.has_session_next
        return np.concatenate([b.records for b in tr])


# A: sys 1,2 + user 3 | gen 4.  B continues A, C continues B, D continues A (a branch: the
# second continuation of A's history), E shares only the system prompt, F continues D, G repeats
# A's prompt and output (same blocks, but its prompt holds fewer tokens than A's whole sequence).
HISTORY = [
    _req(1, [1, 2, 3, 4], 3),
    _req(2, [1, 2, 3, 4, 5, 6], 5),
    _req(3, [1, 2, 3, 4, 5, 6, 7, 8], 7),
    _req(4, [1, 2, 3, 4, 9, 10], 5),
    _req(5, [1, 2, 11, 12], 3),
    _req(6, [1, 2, 3, 4, 9, 10, 13, 14], 7),
    _req(7, [1, 2, 3, 4], 3),
]


@pytest.mark.slow
def test_chains_branches_shared_system_prompt_and_repeat(tmp_path):
    rec = _records(tmp_path, HISTORY, "--infer-sessions")
    assert rec["chat_id"].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert rec["parent_chat_id"].tolist() == [-1, 1, 2, 1, -1, 4, -1]
    assert rec["session_id"].tolist() == [1, 1, 1, 1, 5, 1, 7]
    assert rec["turn"].tolist() == [1, 2, 3, 2, 1, 3, 1]
    # session_next_req: the next request of the session, 1-based in file order
    assert rec["session_next_req"].tolist() == [2, 3, 4, 6, -1, -1, -1]


@pytest.mark.slow
def test_without_the_option_nothing_is_inferred(tmp_path):
    rec = _records(tmp_path, HISTORY)
    assert (rec["session_id"] == -1).all() and (rec["parent_chat_id"] == -1).all()
    assert (rec["turn"] == 0).all() and (rec["session_next_req"] == -1).all()


@pytest.mark.slow
def test_longest_prefix_wins_over_a_later_shorter_one(tmp_path):
    # P2 continues P1; then Q repeats P1 exactly in blocks with a longer prompt (so it passes the
    # token check and continues P1 too); R continues P2: both P1/Q's and P2's sequences prefix
    # R's prompt; the longest (P2) is the parent, although Q's is more recent.
    rows = [_req(1, [1, 2], 1), _req(2, [1, 2, 3, 4], 3),
            {"timestamp": 3, "input_length": B * 3, "output_length": 1, "hash_ids": [1, 2]},
            _req(4, [1, 2, 3, 4, 5, 6], 5)]
    rec = _records(tmp_path, rows, "--infer-sessions")
    assert rec["parent_chat_id"].tolist() == [-1, 1, 1, 2]
    # equal sequences: the most recent is the parent
    rows.append(_req(5, [1, 2, 7, 8, 9, 10], 5))
    rec = _records(tmp_path, rows, "--infer-sessions", name="u")
    assert rec["parent_chat_id"][-1] == 3


@pytest.mark.slow
def test_window_bound_is_an_lru_of_request_ends(tmp_path):
    a, x = _req(1, [1, 2], 1), _req(2, [21, 22], 1)
    b = _req(3, [1, 2, 3, 4], 3)            # continues a
    d = _req(4, [1, 2, 5, 6], 3)            # continues a (a branch)
    y = _req(5, [21, 22, 23, 24], 3)        # continues x
    rows = [a, x, b, d, y]
    rec = _records(tmp_path, rows, "--infer-sessions", "--session-window", "2")
    # [a, x] -> b uses a (a is now the newest of the two) and is added: x is forgotten;
    # d still finds a; y finds nothing and roots a new session
    assert rec["parent_chat_id"].tolist() == [-1, -1, 1, 1, -1]
    assert rec["session_id"].tolist() == [1, 2, 1, 1, 5]
    rec = _records(tmp_path, rows, "--infer-sessions", "--session-window", "1", name="w1")
    assert rec["parent_chat_id"].tolist() == [-1, -1, -1, -1, -1]
    rec = _records(tmp_path, rows, "--infer-sessions", name="big")
    assert rec["parent_chat_id"].tolist() == [-1, -1, 1, 1, 2]


@pytest.mark.slow
def test_parent_chat_id_chains(tmp_path):
    rows = [{"timestamp": 1, "chat_id": 10, "parent_chat_id": -1, "hash_ids": [1]},
            {"timestamp": 2, "chat_id": 11, "parent_chat_id": 10, "hash_ids": [1, 2]},
            {"timestamp": 3, "chat_id": 20, "parent_chat_id": -1, "hash_ids": [3]},
            {"timestamp": 4, "chat_id": 12, "parent_chat_id": 11, "hash_ids": [1, 2, 4]},
            {"timestamp": 5, "chat_id": 13, "parent_chat_id": 10, "hash_ids": [1, 5]},
            {"timestamp": 6, "chat_id": 31, "parent_chat_id": 30, "hash_ids": [6]},
            {"timestamp": 7, "chat_id": 32, "parent_chat_id": 31, "turn": 7, "hash_ids": [6, 7]}]
    rec = _records(tmp_path, rows)
    assert rec["session_id"].tolist() == [10, 10, 20, 10, 10, 30, 30]
    assert rec["turn"].tolist() == [1, 2, 1, 3, 2, 1, 7]   # a given turn is kept
    assert rec["session_next_req"].tolist() == [2, 4, -1, 5, -1, 7, -1]


def test_converter_equals_the_streaming_inferrer_and_recovers_ground_truth():
    trace, summary = generate(SynthParams(seed=3, sessions=120, branch=0.2))
    assert summary["n_branches"] > 5 and summary["n_truncated"] > 0
    truth = {f: trace.records[f].copy() for f in INFERRED_FIELDS}
    for window in (40, 65536):
        rec = trace.records.copy()
        rec["chat_id"] = rec["parent_chat_id"] = rec["session_id"] = -1
        rec["turn"] = 0
        n_linked = infer_sessions(rec, trace.offsets, trace.block_ids, window=window,
                                  block_size_tokens=B)
        inf = SessionInferrer(window, B)
        stream = [inf.infer(trace.block_ids[trace.offsets[i]:trace.offsets[i + 1]].tolist(),
                            int(rec["input_length"][i]), int(rec["output_length"][i]))
                  for i in range(trace.n_requests)]
        assert len(inf) <= window
        assert np.array_equal(np.array(stream), np.stack([rec[f] for f in INFERRED_FIELDS], 1))
        assert n_linked == int((rec["parent_chat_id"] >= 0).sum())
        # the inferred parent (a position) names the generator's parent, except where the
        # prompt was cut to the context limit (it no longer continues a prefix) or, with a
        # small window, where the parent's end was forgotten
        parent = np.where(rec["parent_chat_id"] > 0,
                          truth["chat_id"][np.maximum(rec["parent_chat_id"] - 1, 0)], -1)
        wrong = parent != truth["parent_chat_id"]
        assert (parent[wrong] == -1).all()
        if window == 65536:
            assert int(wrong.sum()) == summary["n_truncated"]
        else:
            assert int(wrong.sum()) > summary["n_truncated"]


@pytest.mark.slow
def test_lcp_input_and_jsonl_output(tmp_path):
    rows = _records(tmp_path, HISTORY)            # an lcp without sessions
    src = tmp_path / "t.lcp.zst"
    out = tmp_path / "t.jsonl"
    r = bi.shadow("convert", "--infer-sessions", str(src), str(out))
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [d.get("parent_chat_id", -1) for d in lines] == [-1, 1, 2, 1, -1, 4, -1]
    assert [d["session_id"] for d in lines] == [1, 1, 1, 1, 5, 1, 7]
    assert len(rows) == len(lines)
    # a trace converted again keeps its (now given) sessions: chains agree with them
    again = tmp_path / "again.lcp"
    r = bi.shadow("convert", str(out), str(again))
    assert r.returncode == 0, r.stderr
    rec = load_lcp(str(again)).records
    assert rec["session_id"].tolist() == [1, 1, 1, 1, 5, 1, 7]


BAD = [
    ("trace with sessions", "synth", ["--infer-sessions"],
     ["already has sessions", "--infer-sessions applies only to a trace without them"]),
    ("trace with parents", "chains", ["--infer-sessions"], ["already has sessions"]),
    ("some chat ids", "some_chats", ["--infer-sessions"], ["only some requests have a chat_id"]),
    ("window without inference", "plain", ["--session-window", "5"],
     ["--session-window applies only with --infer-sessions"]),
    ("window 0", "plain", ["--infer-sessions", "--session-window", "0"],
     ["--session-window", "0"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,src,options,words", BAD, ids=bi.ids(BAD))
def test_bad_input(name, src, options, words, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    inputs = {
        "plain": [_req(1, [1], 1)],
        "chains": [{"timestamp": 1, "chat_id": 1, "hash_ids": [1]},
                   {"timestamp": 2, "chat_id": 2, "parent_chat_id": 1, "hash_ids": [1, 2]}],
        "some_chats": [{"timestamp": 1, "chat_id": 1, "hash_ids": [1]},
                       {"timestamp": 2, "hash_ids": [1, 2]}],
    }
    if src == "synth":
        path = d / "s.lcp.zst"
        assert bi.shadow("synth", "--sessions", "3", str(path)).returncode == 0
    else:
        path = d / f"{src}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in inputs[src]))
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("convert", *options, str(path), str(tmp_path / "o.lcp.zst")),
                      words)
    assert bi.listing(tmp_path) == before


@pytest.mark.slow
def test_help_names_the_options():
    r = bi.shadow("convert", "--help")
    assert r.returncode == 0, r.stderr
    assert "--infer-sessions" in r.stdout and "--session-window" in r.stdout
    assert "[default: 65536]" in " ".join(r.stdout.split())
