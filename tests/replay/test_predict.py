"""The prediction: the engine-block view of a request, the block-pool model (hand-traced), and
the simulator's vllm policy against that model on the bundled trace."""

from __future__ import annotations

import pytest

from replay.engine_model import UNIQUE_BASE, BlockPoolModel, engine_request, unique_keys
from replay.predict import predict
from replay.results import RequestResult
from replay.workload import load_requests
from shadow.errors import ShadowError
from tests.vllm_support import REPO_ROOT

BUNDLED = str(REPO_ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl")


def test_engine_request_counts():
    fresh = unique_keys()
    # 2 trace blocks of 64 tokens = 4 engine blocks of 32; tail 40 = 1 full engine block + 8
    er = engine_request([3, 5], 40, 64, 32, output_tokens=30, fresh=fresh)
    assert er.prompt_keys[:4] == (7, 8, 11, 12)
    assert er.prompt_keys[4] == UNIQUE_BASE  # the tail's full block: cached, never shared
    assert er.prompt_tokens == 168 and er.max_hit == 167 // 32 == 5
    # KV at the end: 168 + 30 - 1 = 197 tokens = 6 full blocks + a partial one
    assert len(er.gen_keys) == 197 // 32 - 168 // 32 == 1
    assert er.n_partial == 1
    # a prompt of whole blocks: the last block can never be hit
    er2 = engine_request([1], 0, 32, 32, output_tokens=1, fresh=fresh)
    assert er2.max_hit == 0 and er2.gen_keys == () and er2.n_partial == 0



def test_block_pool_lru_tail_first():
    # capacity 4 (5 blocks, one null); one block per request, no generated blocks
    fresh = unique_keys()
    pool = BlockPoolModel(5, 32)
    reqs = {}
    for rid, blocks in enumerate([[1, 2], [3], [1, 2, 4]]):
        reqs[rid] = engine_request(blocks, 1, 32, 32, 1, fresh)  # tail 1 token: a partial block
    assert pool.admit(0, reqs[0]) == 0
    pool.release(0)  # frees: partial (to the head), then 2, then 1 appended (2 nearer the head)
    assert pool.admit(1, reqs[1]) == 0  # takes the empty partial block and one empty block
    pool.release(1)
    # request 2 hits 1, 2 and needs 4 + a partial: the queue head holds [empty, 3-partial...]
    assert pool.admit(2, reqs[2]) == 2
    pool.release(2)
    assert pool.evictions == 1  # block 3 (least recently used) was reused
    assert pool.n_cached() == 3


def test_block_pool_evicts_deepest_first():
    fresh = unique_keys()
    pool = BlockPoolModel(4, 32)  # capacity 3
    a = engine_request([1, 2, 3], 0, 32, 32, 1, fresh)
    pool.admit(0, a)
    pool.release(0)
    # freed tail first: the queue is [3, 2, 1]; a new 1-block request (32 tokens, 1 output: no
    # partial block) reuses the block of 3, the deepest
    b = engine_request([9], 0, 32, 32, 1, fresh)
    pool.admit(1, b)
    pool.release(1)
    d = engine_request([1, 2, 5], 0, 32, 32, 1, fresh)
    assert pool.admit(3, d) == 2  # 1, 2 survived, 3 (the deepest) was evicted


def _one_at_a_time(specs):
    return [RequestResult(index=s.index, seq=i, blocks=list(s.blocks), tail=s.tail,
                          prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens, sent_s=float(i),
                          end_s=i + 0.5, reached_engine=True, output_tokens=s.max_tokens)
            for i, s in enumerate(specs)]


@pytest.mark.parametrize("tpb,skip,n,out,cap", [(32, 3965, 25, 8, 257), (32, 0, 600, 300, 1500),
                                                (64, 3000, 400, 50, 900)])
def test_simulator_vllm_policy_matches_block_pool_model(tpb, skip, n, out, cap):
    _, _, specs = load_requests(BUNDLED, tokens_per_block=tpb, skip_requests=skip, max_requests=n,
                                max_output_tokens=out)
    pred = predict(_one_at_a_time(specs), tokens_per_block=tpb, block_size=32, num_gpu_blocks=cap,
                   policies=["lru"])
    assert pred.policies[0] == "vllm"
    assert len(pred.cached) > 0.9 * n
    diff = [s for s in pred.cached if pred.cached[s]["vllm"] != pred.model_cached[s]]
    assert diff == []
    assert sum(pred.model_cached.values()) > 0


def test_errors_not_replayed_and_bad_capacity():
    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, max_requests=3, max_output_tokens=4)
    res = _one_at_a_time(specs)
    res[1].reached_engine = False
    pred = predict(res, tokens_per_block=32, block_size=32, num_gpu_blocks=5000, policies=[])
    assert sorted(pred.cached) == [0, 2]
    with pytest.raises(ShadowError, match="capacity"):
        predict(res, tokens_per_block=32, block_size=32, num_gpu_blocks=1)
    with pytest.raises(ShadowError, match="multiple"):
        predict(res, tokens_per_block=48, block_size=32, num_gpu_blocks=100)


def test_oracles_and_unknown_policies_are_skipped_with_a_reason():
    _, _, specs = load_requests(BUNDLED, tokens_per_block=32, max_requests=3, max_output_tokens=4)
    pred = predict(_one_at_a_time(specs), tokens_per_block=32, block_size=32, num_gpu_blocks=5000,
                   policies=["lru", "belady", "nosuch"])
    assert pred.policies == ["vllm", "lru"]
    assert "next-access" in pred.skipped_policies["belady"]
    assert pred.skipped_policies["nosuch"] == "not a policy"
