"""Fleet recordings of real engines: two vLLM engines (the tiny model on the CPU) run one after
the other with different PYTHONHASHSEED, so their block hashes differ, under one fleet key and
two replica names; ``shadow convert`` of both recordings gives one trace in which the same
prompt's blocks have the same ids on both replicas, another cache salt gives other ids, and each
request keeps its replica and its arrival, admission and release times."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.vllm_support import (BLOCK_SIZE, REPO_ROOT, inprocess_llm, random_token_ids,
                                tiny_model_path, vllm_available)

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]

SYSTEM = random_token_ids(2 * BLOCK_SIZE, seed=41)        # two shared blocks
TAIL_A = random_token_ids(BLOCK_SIZE + 7, seed=42)
TAIL_B = random_token_ids(BLOCK_SIZE + 3, seed=43)
#: (name, prompt, cache salt) per engine, in the order sent
ENGINE_0 = [("p1", SYSTEM + TAIL_A, None), ("p2", SYSTEM + TAIL_B, None),
            ("p3", SYSTEM + TAIL_A, "s")]
ENGINE_1 = [("p1", SYSTEM + TAIL_A, None), ("p3", SYSTEM + TAIL_A, "s"),
            ("p4", SYSTEM + TAIL_A, "t")]
MAX_TOKENS = 40


def _record(rec_dir, replica: str, seed: str, prompts, monkeypatch) -> set:
    """Serve ``prompts`` one at a time; the vLLM block hashes the connector saw."""
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES

    # NOTE: vLLM reads it when the engine core starts (init_none_hash)
    monkeypatch.setenv("PYTHONHASHSEED", seed)
    extra = {"policies": ["vllm"], "capacity_factors": [1.0], "record_dir": str(rec_dir),
             "replica": replica, "fleet_key": "fleet test key"}
    ktc = KVTransferConfig(kv_connector="ShadowConnector",
                           kv_connector_module_path="shadow.connector", kv_role="kv_producer",
                           kv_connector_extra_config=extra)
    sp = SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)
    with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc, num_gpu_blocks_override=64,
                       max_model_len=768) as llm:
        conn = [c for c in INSTANCES if c.cfg.record_dir == str(rec_dir)][0]
        assert conn.cfg.replica == replica
        for _name, prompt, salt in prompts:
            tp = TokensPrompt(prompt_token_ids=prompt)
            if salt is not None:
                tp["cache_salt"] = salt
            llm.generate([tp], sp, use_tqdm=False)
        assert conn.flush()
        interner = conn._worker.interner
        return set(interner._cur) | set(interner._old)


def test_two_engines_with_different_hash_seeds_merge_by_block_identity(tmp_path, monkeypatch):
    from shadow.trace.segments import list_segments
    from shadow.trace import open_trace

    h0 = _record(tmp_path / "r0", "east-0", "1", ENGINE_0, monkeypatch)
    h1 = _record(tmp_path / "r1", "west-1", "2", ENGINE_1, monkeypatch)
    # the engines' own block hashes of the same prompts differ (another seed) ...
    assert h0 and h1 and h0.isdisjoint(h1)
    segs = list_segments(str(tmp_path / "r0")) + list_segments(str(tmp_path / "r1"))
    assert segs and not any(s.endswith(".partial") for s in segs)
    out = tmp_path / "fleet.lcp.zst"
    r = subprocess.run([sys.executable, "-m", "shadow", "convert", *segs, str(out)],
                       capture_output=True, text=True, cwd=str(REPO_ROOT),
                       env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
    assert r.returncode == 0 and "2 replicas (east-0, west-1)" in r.stdout, (r.stdout, r.stderr)
    assert "share no block" not in r.stderr
    with open_trace(str(out)) as tr:
        h = tr.header
        rows = []
        for b in tr:
            for i in range(b.n_requests):
                rec = b.records[i]
                rows.append((h.replica_name(int(rec["replica_id"])), int(rec["arrival_time_us"]),
                             int(rec["start_time_us"]), int(rec["complete_time_us"]),
                             int(rec["input_length"]), b.request_blocks(i).tolist()))
    assert h.replica_names == ["east-0", "west-1"]
    # ... yet in the merged trace one prompt's blocks have one id on both replicas
    blocks = {}
    for replica, prompts in (("east-0", ENGINE_0), ("west-1", ENGINE_1)):
        mine = sorted(x for x in rows if x[0] == replica)   # arrival order
        assert len(mine) == len(prompts)
        for (name, prompt, _salt), (_r, arrival, start, done, n_in, ids) in zip(prompts, mine):
            assert 0 < arrival <= start < done and n_in == len(prompt)
            # prompt blocks, then the generated ones the engine cached
            assert len(ids) == (len(prompt) + MAX_TOKENS - 1) // BLOCK_SIZE
            blocks[replica, name] = ids
    assert blocks["east-0", "p1"] == blocks["west-1", "p1"]      # same tokens, same output
    assert blocks["east-0", "p3"] == blocks["west-1", "p3"]      # same salt
    assert blocks["east-0", "p2"][:2] == blocks["east-0", "p1"][:2] != blocks["east-0", "p2"][2:3]
    p1, p3, p4 = blocks["east-0", "p1"], blocks["east-0", "p3"], blocks["west-1", "p4"]
    assert not set(p1) & set(p3) and not set(p3) & set(p4) and not set(p1) & set(p4)
