"""``shadow synth``: the synthetic multi-turn trace is deterministic, carries its ground truth
(sessions, turns, parents, types) consistently, and has the reuse structure docs/trace.md says:
system prompts shared within a type only, prompts that continue their history, interleaved
sessions."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.trace import open_trace
from shadow.trace.convert import load_lcp
from shadow.trace.synth import TYPES, SynthParams, generate
from tests.trace import bad_inputs as bi


def _same(a, b) -> bool:
    return (np.array_equal(a.records, b.records) and np.array_equal(a.offsets, b.offsets)
            and np.array_equal(a.block_ids, b.block_ids) and a.type_names == b.type_names)


@pytest.mark.slow
def test_cli_writes_a_deterministic_file(tmp_path):
    paths = [tmp_path / "a.lcp.zst", tmp_path / "b.lcp", tmp_path / "c.lcp.zst"]
    for p, seed in zip(paths, ("7", "7", "8")):
        r = bi.shadow("synth", "--seed", seed, "--sessions", "50", str(p))
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"wrote {p}: ") and "50 sessions" in r.stdout
    a, b, c = (load_lcp(str(p)) for p in paths)
    assert _same(a, b) and not _same(a, c)
    with open_trace(str(paths[0])) as tr:
        h = tr.header
    assert h.has_session_next and h.counts_valid and h.is_sorted and h.n_sessions == 50
    assert h.block_size_tokens == 16 and sorted(h.type_names) == sorted(t.name for t in TYPES)
    assert "synth seed=7 sessions=50" in h.producer


def test_ground_truth_is_consistent():
    trace, summary = generate(SynthParams(seed=5, sessions=200, branch=0.2))
    rec = trace.records
    assert summary["n_requests"] == trace.n_requests and summary["n_branches"] > 0
    pos = {int(c): i for i, c in enumerate(rec["chat_id"])}
    n_cut = 0
    for i, r in enumerate(rec):
        if r["parent_chat_id"] < 0:
            assert r["turn"] == 1
            continue
        j = pos[int(r["parent_chat_id"])]
        assert j < i                                      # the parent completed first
        p = rec[j]
        assert (p["session_id"], p["type_id"]) == (r["session_id"], r["type_id"])
        assert r["turn"] == p["turn"] + 1
        ids, pids = trace.block_ids[trace.offsets[i]:trace.offsets[i + 1]], \
            trace.block_ids[trace.offsets[j]:trace.offsets[j + 1]]
        n_prompt = int(r["input_length"]) // 16
        cont = np.array_equal(ids[:len(pids)], pids) and len(pids) <= n_prompt
        # a prompt continues its parent's whole sequence, and holds the parent's prompt and
        # output, unless it was cut to the context limit
        if cont:
            assert r["input_length"] >= p["input_length"] + p["output_length"]
        else:
            n_cut += 1
            assert r["input_length"] <= 16384
    assert n_cut == summary["n_truncated"] > 0
    # every request has a block of its own: its last one is seen first there
    ends = trace.block_ids[trace.offsets[1:] - 1]
    first = np.full(int(trace.block_ids.max()) + 1, -1)
    for i in range(trace.n_requests - 1, -1, -1):
        first[trace.block_ids[trace.offsets[i]:trace.offsets[i + 1]]] = i
    assert (first[ends] == np.arange(trace.n_requests)).all()
    # the session-next chain links the session's requests in file order
    nxt = rec["session_next_req"]
    for s in np.unique(rec["session_id"]):
        idx = np.flatnonzero(rec["session_id"] == s)
        assert nxt[idx[:-1]].tolist() == (idx[1:] + 1).tolist() and nxt[idx[-1]] == -1


def test_reuse_structure():
    trace, _ = generate(SynthParams(seed=1, sessions=300))
    rec = trace.records
    sess = np.repeat(rec["session_id"], np.diff(trace.offsets))
    typ = np.repeat(rec["type_id"], np.diff(trace.offsets))
    ids = trace.block_ids
    # blocks used by more than one session are system prompt blocks: one type each
    order = np.lexsort((sess, ids))
    i, s, t = ids[order], sess[order], typ[order]
    new_sess = np.r_[True, (i[1:] != i[:-1]) | (s[1:] != s[:-1])]
    n_sess = np.bincount(i[new_sess])
    shared = np.flatnonzero(n_sess > 1)
    assert shared.shape[0] > 100
    first_t = np.full(n_sess.shape[0], -1)
    first_t[i[::-1]] = t[::-1]
    assert all((t[i == b] == first_t[b]).all() for b in shared[:50])
    # sessions interleave: many are open at once
    start = rec["start_time_us"]
    first = {int(x): int(start[rec["session_id"] == x].min()) for x in np.unique(rec["session_id"])}
    last = {int(x): int(rec["complete_time_us"][rec["session_id"] == x].max())
            for x in first}
    mid = int(np.median(start))
    assert sum(first[x] <= mid <= last[x] for x in first) > 10
    # every type occurs, and turns go past 1
    assert set(rec["type_id"].tolist()) == set(range(1, len(TYPES) + 1))
    assert rec["turn"].max() > 5


BAD = [
    ("jsonl output", ["o.jsonl"], ["OUTPUT must be .lcp or .lcp.zst"]),
    ("context below the system prompt", ["--max-context", "4000", "o.lcp"],
     ["--max-context 4000 must exceed the longest system prompt"]),
    ("rate 0", ["--rate", "0", "o.lcp"], ["--rate"]),
    ("branch above 1", ["--branch", "1.5", "o.lcp"], ["--branch"]),
    ("no output", [], ["Missing argument 'OUTPUT'"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,args,words", BAD, ids=bi.ids(BAD))
def test_bad_input(name, args, words, tmp_path):
    r = bi.shadow("synth", *args, cwd=tmp_path)
    bi.assert_refused(r, words)
    assert bi.listing(tmp_path) == []


@pytest.mark.slow
def test_help():
    r = bi.shadow("synth", "--help")
    assert r.returncode == 0, r.stderr
    for opt in ("--seed", "--sessions", "--block-size", "--rate", "--branch", "--max-context",
                "--level"):
        assert opt in r.stdout
    r = bi.shadow("--help")
    assert "synth" in r.stdout
