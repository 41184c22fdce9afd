"""``shadow simulate --tier``: RESULT lines keep their keys and gain the tier's, a tier never
changes tier 1, hand-traced tier hits, bytes from a config, bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shadow.sim.core.results import EXTRA_KEYS, RESULT_KEYS
from shadow.sim.tiers.run import TIER_KEYS
from tests.sim.test_timing import _recording, _simulate
from tests.tiers import unit_rows

# B = 4 tokens per block.  A and C share blocks 1-4 (17 prompt tokens: 4 full blocks); B pushes
# them out of a 4-block GPU cache; the tier still holds them when C comes.
ABC = [(0, 10, 17, 1, [1, 2, 3, 4]), (20, 30, 17, 1, [5, 6, 7, 8]),
       (40, 50, 17, 1, [1, 2, 3, 4])]


def _lines(out: str) -> list[dict[str, str]]:
    return [dict(x.split("=", 1) for x in line.split()[1:])
            for line in out.splitlines() if line.startswith("RESULT ")]


def test_result_keys_unchanged_and_tier_keys_appended(tmp_path):
    t = _recording(tmp_path / "t.lcp", ABC)
    code, out, _ = _simulate(t, "-a", "lru,fifo", "-c", "4,8", "--tier", "cpu:8blk,16blk:lru")
    assert code == 0
    lines = _lines(out)
    assert len(lines) == 2 * 2 * 2                       # caches x tier sizes
    for kv in lines:
        assert list(kv) == list(RESULT_KEYS + EXTRA_KEYS + TIER_KEYS)
    assert {kv["tier"] for kv in lines} == {"cpu:8blk:lru", "cpu:16blk:lru"}


def test_tier_serves_what_the_gpu_lost(tmp_path):
    t = _recording(tmp_path / "t.lcp", ABC)
    _, out, _ = _simulate(t, "-a", "lru", "-c", "5", "--tier", "cpu:8blk:lru")
    (kv,) = _lines(out)
    # C's 4 blocks: GPU prefix hit 0 (B evicted them from the 5-block cache: 4 + the partial block's slot), the tier holds all 4 chunks: 16 tokens
    assert kv["prefix_hit_ratio"] == "0.000000"
    assert kv["tier_hit_tokens"] == "16"
    assert float(kv["tier_hit_ratio"]) == pytest.approx(4 / int(kv["n_blocks"]))
    assert kv["tier_evictions"] == "0" and kv["tier_block_bytes"] == "na"
    # a 4-block tier: B's store evicts A's chunks, C finds nothing and evicts B's
    _, out, _ = _simulate(t, "-a", "lru", "-c", "5", "--tier", "cpu:4blk:lru")
    (kv,) = _lines(out)
    assert kv["tier_hit_tokens"] == "0" and kv["tier_evictions"] == "8"


@pytest.mark.parametrize("timing", [[], ["--timing", "recorded"]])
def test_a_tier_never_changes_tier_one(tmp_path, timing):
    import random
    rng = random.Random(3)
    reqs, t0 = [], 0
    for _ in range(60):
        n = rng.randint(1, 6)
        ids = [rng.randint(1, 25) for _ in range(n)]
        ids = list(dict.fromkeys(ids))
        start = t0 + rng.randint(0, 30)
        reqs.append((start, start + rng.randint(1, 90), 4 * len(ids) + 1, 3, ids))
        t0 = start
    t = _recording(tmp_path / "t.lcp", reqs)
    base_args = ["-a", "lru,arc,s3fifo,vllm", "-c", "6,12"]
    ref = ["--timing", "recorded"] if not timing else timing
    # serial --tier runs the requests one at a time in file order: a recording of them
    if not timing:
        seq = [(2 * i, 2 * i + 1, *r[2:]) for i, r in enumerate(sorted(reqs, key=lambda r: r[1]))]
        t_ref = _recording(tmp_path / "seq.lcp", seq)
    else:
        t_ref = t
    _, out_ref, _ = _simulate(t_ref, *base_args, *ref)
    _, out, _ = _simulate(t, *base_args, *timing, "--tier", "cpu:8blk:arc:chunk=2")
    skip = {"trace"} | set(TIER_KEYS)
    want = {(kv["algo"], kv["cache_size"]): {k: v for k, v in kv.items() if k not in skip}
            for kv in _lines(out_ref)}
    got = {(kv["algo"], kv["cache_size"]): {k: v for k, v in kv.items() if k not in skip}
           for kv in _lines(out)}
    assert got == want


def test_bytes_from_a_config(tmp_path):
    t = _recording(tmp_path / "t.lcp", ABC)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                               "hidden_size": 64, "num_key_value_heads": 1}))
    per_block = 2 * 2 * 1 * 16 * 4 * 2                  # layers, K+V, heads, dim, tokens, bytes
    _, out, _ = _simulate(t, "-a", "lru", "-c", "5", "--tier", f"cpu:{8 * per_block}:lru",
                          "--kv-config", str(cfg))
    (kv,) = _lines(out)
    assert kv["tier_chunks"] == "8" and kv["tier_block_bytes"] == str(per_block)
    assert kv["tier_loaded_bytes"] == str(4 * per_block)
    assert float(kv["tier_load_s"]) == pytest.approx(4 * per_block / 50e9, rel=1e-3)


@pytest.mark.parametrize("args,words", unit_rows([
    (["--tier", "cpu:3blk:lru:chunk=4"], "smaller than one offload chunk"),
    (["--tier", "cpu:1g:lru"], "needs the bytes of a KV block"),
    (["--tier", "nvram:1g:lru"], "unknown medium"),
    (["--tier", "cpu:8blk:lfu"], "unknown tier policy"),
    (["--tier", "cpu:8blk:lru:chunk=x"], "chunk=x"),
    (["--bytes-per-block", "100"], "no --tier given"),
    (["--tier", "cpu:8blk:lru", "--bytes-per-block", "0"], "not a positive byte count"),
    (["--tier", "cpu:8blk:lru", "-a", "belady"], "cannot run belady"),
    (["--tier", "cpu:8blk:lru", "--lookup", "prompt"], "--lookup vllm"),
    (["--tier", "cpu:1g:lru", "--kv-config", "/nonexistent.json"], "cannot read it"),
], 5))
def test_bad_tier_input_is_one_line(tmp_path, args, words):
    t = _recording(tmp_path / "t.lcp", ABC)
    out = tmp_path / "out.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", t, "-c", "4",
                        *(["-a", "lru"] if "-a" not in args else []), *args, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
    assert not out.exists()
