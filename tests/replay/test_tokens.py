"""Token synthesis: deterministic across processes, inside the vocabulary, clear of special ids."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from replay.tokens import DOMAIN_BLOCK, DOMAIN_TAIL, TokenSynth, Vocab, splitmix64, vocab_from_model_dir
from shadow.errors import ShadowError
from tests.vllm_support import REPO_ROOT

VOCAB = Vocab(size=1000, special=(0, 1, 2, 3))


def test_splitmix64_known_values():
    # SplitMix64 from state 0: the first outputs of the reference generator (state += gamma first)
    out = splitmix64(np.array([0, 0x9E3779B97F4A7C15], dtype=np.uint64))
    assert int(out[0]) == 0xE220A8397B1DCDAF
    assert int(out[1]) == 0x6E789E6AA1B965F4


def test_same_block_same_tokens_and_concatenation():
    s = TokenSynth(VOCAB, seed=7)
    a = s.block_tokens([5, 9], 32)
    assert a.shape == (64,)
    assert np.array_equal(a[:32], s.block_tokens([5], 32))
    assert np.array_equal(a[32:], s.block_tokens([9], 32))
    assert not np.array_equal(s.block_tokens([5], 32), s.block_tokens([6], 32))
    # a prefix of a longer block is the shorter block: index i of a block's stream is fixed
    assert np.array_equal(s.block_tokens([5], 16), s.block_tokens([5], 32)[:16])


def test_ids_in_vocab_and_not_special():
    s = TokenSynth(Vocab(size=50, special=(0, 1, 2, 49, 17)), seed=0)
    ids = s.block_tokens(np.arange(1, 400), 64)
    assert ids.min() >= 3 and ids.max() <= 48
    assert not set(ids.tolist()) & {0, 1, 2, 17, 49}
    assert len(set(ids.tolist())) == 50 - 5  # every allowed id gets used


def test_tail_tokens_never_collide_with_blocks():
    s = TokenSynth(VOCAB, seed=0)
    # the same integer as a block id and as a request index gives different streams
    assert not np.array_equal(s.tail_tokens(12, 32), s.block_tokens([12], 32))
    assert not np.array_equal(s.tail_tokens(12, 32), s.tail_tokens(13, 32))
    assert DOMAIN_BLOCK != DOMAIN_TAIL


def test_seed_changes_everything():
    a = TokenSynth(VOCAB, seed=0).block_tokens([1, 2, 3], 32)
    b = TokenSynth(VOCAB, seed=1).block_tokens([1, 2, 3], 32)
    assert (a != b).mean() > 0.9


def test_prompt_layout():
    s = TokenSynth(VOCAB, seed=3)
    p = s.prompt([4, 5], 32, request_index=77, tail=5)
    assert len(p) == 69 and all(isinstance(x, int) for x in p)
    assert p[:64] == s.block_tokens([4, 5], 32).tolist()
    assert p[64:] == s.tail_tokens(77, 5).tolist()
    assert s.prompt([], 32, 0, 0) == []


@pytest.mark.slow
def test_deterministic_across_processes():
    code = ("import json; from replay.tokens import TokenSynth, Vocab; "
            "s = TokenSynth(Vocab(size=1000, special=(0, 1, 2, 3)), seed=11); "
            "print(json.dumps(s.prompt([1, 2, 3, 1 << 40], 32, 99, 7)))")
    outs = []
    for hashseed in ("0", "12345"):
        r = subprocess.run([sys.executable, "-c", code], cwd=str(REPO_ROOT), capture_output=True,
                           text=True, check=True, env={"PYTHONHASHSEED": hashseed, "PATH": "/usr/bin:/bin"})
        outs.append(json.loads(r.stdout))
    here = TokenSynth(VOCAB, seed=11).prompt([1, 2, 3, 1 << 40], 32, 99, 7)
    assert outs[0] == outs[1] == here


def test_bad_vocab():
    with pytest.raises(ShadowError, match="vocabulary size"):
        Vocab(size=0)
    with pytest.raises(ShadowError, match="usable"):
        Vocab(size=3, special=(0, 1))


def test_vocab_from_model_files(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1024, "eos_token_id": [7, 8],
                                                      "bos_token_id": 1}))
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "model": {"vocab": {f"w{i}": i for i in range(1000)}},
        "added_tokens": [{"id": 1000, "content": "<x>", "special": True},
                         {"id": 5, "content": "<y>", "special": True},
                         {"id": 6, "content": "plain", "special": False}]}))
    v = vocab_from_model_dir(tmp_path)
    assert v.size == 1001  # the tokenizer knows fewer ids than the embedding has rows
    assert set(v.special) == {1, 5, 7, 8, 1000}
    s = TokenSynth(v).block_tokens(range(1, 200), 32)
    assert s.max() < 1000 and not set(s.tolist()) & {1, 5, 7, 8}


def test_vocab_missing_files(tmp_path):
    with pytest.raises(ShadowError, match="--vocab-size"):
        vocab_from_model_dir(tmp_path)
