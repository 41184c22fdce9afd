"""The offload tier (shadow/sim/tiers/model.py): per request equal to vLLM's own CPUOffloadingManager
driven with the same calls, hand-traced scheduler rules, the --tier grammar and KV bytes."""

from __future__ import annotations

import json
import random
from collections import OrderedDict

import pytest

from shadow.errors import ShadowError
from shadow.sim.tiers import model as T
from tests.sim._traces import read_jsonl, CONVERSATION
from tests.tiers import unit_rows


# --- vLLM's manager behind the tier's interface ------------------------------------------------

class VllmTier:
    """vLLM 0.32's CPUOffloadingManager with the calls its scheduler makes for one request
    (lookup, prepare/complete_load, prepare/complete_store, on_request_finished): the
    independent implementation the tier is compared with."""

    def __init__(self, n_chunks: int, policy: str, store_threshold: int, tracker: int) -> None:
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
        self.m = CPUOffloadingManager(num_chunks=n_chunks, cache_policy=policy,
                                      store_threshold=store_threshold, max_tracker_size=tracker)
        self.ctx = None

    @staticmethod
    def key(block_id: int):
        from vllm.v1.kv_offload.base import make_offload_key
        return make_offload_key(block_id.to_bytes(8, "big"), 0)

    def begin(self, keys: list[int]) -> None:
        from vllm.v1.kv_offload.base import ReqContext
        self.ctx = ReqContext(req_id=str(random.random()))
        self.m.on_new_request(self.ctx)
        for i, k in enumerate(keys):
            self.ctx.set_offload_key_position(self.key(k), i + 1)

    def holds(self, k: int) -> bool:
        from vllm.v1.kv_offload.base import LookupResult
        return self.m.lookup(self.key(k), self.ctx) is LookupResult.HIT

    def load(self, keys, acc) -> None:
        ks = [self.key(k) for k in keys]
        self.m.prepare_load(ks, self.ctx)
        self.m.complete_load(ks, self.ctx)

    def store(self, keys, acc):
        out = self.m.prepare_store([self.key(k) for k in keys], self.ctx)
        if out is None:
            return None
        self.m.complete_store(out.keys_to_store, self.ctx)
        return out.keys_to_store

    def finish(self, acc) -> None:
        self.m.on_request_finished(self.ctx)


def _serve_vllm(vt: VllmTier, ids, prompt_tokens, gpu_hit, B, k) -> T.TierOutcome:
    n_keys = min(prompt_tokens // B, len(ids)) // k
    vt.begin([ids[(i + 1) * k - 1] for i in range(n_keys)])
    return T.serve_request(vt, ids, prompt_tokens, gpu_hit, B, k)


class Gpu:
    """Tier 1 for these tests: an LRU of blocks with vLLM's first-miss prefix hit, capped at
    (prompt tokens - 1) // B blocks."""

    def __init__(self, cap: int) -> None:
        self.cap, self.lru = cap, OrderedDict()

    def serve(self, ids, prompt_tokens, B) -> int:
        h = 0
        for b in ids[:max(prompt_tokens - 1, 0) // B]:
            if b not in self.lru:
                break
            h += 1
        for b in ids:
            self.lru[b] = None
            self.lru.move_to_end(b)
            while len(self.lru) > self.cap:
                self.lru.popitem(last=False)
        return h


def _streams():
    """(name, requests as (ids, prompt tokens)) with block size 16: random multi-turn
    conversations (each turn continues its history) and the bundled conversation trace."""
    rng = random.Random(7)
    out = []
    for s in range(3):
        sessions: list[list[int]] = []
        reqs = []
        nxt = 1 + 10**6 * s
        sys_prompts = [list(range(nxt + 100 * i, nxt + 100 * i + rng.randint(2, 8)))
                       for i in range(3)]
        nxt += 1000
        for _ in range(400):
            if sessions and rng.random() < 0.7:
                hist = rng.choice(sessions)
            else:
                hist = list(rng.choice(sys_prompts))
                sessions.append(hist)
            add = rng.randint(1, 6)
            hist.extend(range(nxt, nxt + add))
            nxt += add
            reqs.append((list(hist), len(hist) * 16 - rng.randint(0, 15)))
        out.append((f"multiturn{s}", reqs))
    conv = read_jsonl(CONVERSATION)[:1500]
    out.append(("conversation", [(r, len(r) * 16 - 3) for r in conv]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("policy", T.TIER_POLICIES)
@pytest.mark.parametrize("k,threshold", [(1, 0), (2, 0), (1, 2), (4, 3)])
def test_equals_vllm_manager_per_request(policy, k, threshold):
    pytest.importorskip("vllm.v1.kv_offload.cpu.manager")
    checked = 0
    for name, reqs in _streams():
        for gpu_cap, n_chunks in [(16, 8), (64, 40), (256, 300)]:
            ours = T.OffloadTier(n_chunks, policy, threshold, 50)
            theirs = VllmTier(n_chunks, policy, threshold, 50)
            g = Gpu(gpu_cap)
            hits = 0
            for i, (ids, P) in enumerate(reqs):
                h = g.serve(ids, P, 16)
                a = T.serve_request(ours, ids, P, h, 16, k)
                b = _serve_vllm(theirs, ids, P, h, 16, k)
                assert a == b, (name, gpu_cap, n_chunks, i)
                hits += a.loaded_chunks
            checked += hits
    assert checked > 1000          # the streams do reach the tier


# --- hand-traced rules -------------------------------------------------------------------------

def test_lookup_needs_a_whole_chunk_beyond_the_gpu_hit():
    t = T.OffloadTier(100)
    ids = list(range(1, 9))                       # 8 blocks of 16 tokens
    assert T.serve_request(t, ids, 128, 0, 16, 2) == T.TierOutcome(0, 0, 4)
    # GPU holds 7 blocks: the tier could add 1 block = half a chunk: no load
    assert T.serve_request(t, ids, 128, 7, 16, 2).hit_tokens == 0
    # GPU holds 5 blocks: chunk 2 (blocks 4-5) and chunk 3: 128 - 80 = 48 tokens, from chunk 2
    out = T.serve_request(t, ids, 128, 5, 16, 2)
    assert out == T.TierOutcome(48, 2, 0)


def test_loaded_chunks_are_not_stored_again_but_later_ones_are():
    t = T.OffloadTier(100)
    T.serve_request(t, [1, 2, 3], 48, 0, 16, 1)
    out = T.serve_request(t, [1, 2, 3, 4, 5], 80, 0, 16, 1)
    assert out == T.TierOutcome(48, 3, 2)
    assert t.n_stored == 5


def test_prompt_tail_and_generated_blocks_are_not_chunks():
    t = T.OffloadTier(100)
    # 3 blocks recorded (2 prompt + 1 generated), prompt 40 tokens: 2 full prompt blocks
    assert T.serve_request(t, [1, 2, 3], 40, 0, 16, 1).stored_chunks == 2
    assert not t.holds(3)


def test_lru_evicts_oldest_outside_the_offer_and_head_ends_newest():
    t = T.OffloadTier(4)
    T.serve_request(t, [1, 2], 32, 0, 16, 1)
    T.serve_request(t, [3, 4], 32, 0, 16, 1)
    assert list(t.policy.order) == [2, 1, 4, 3]   # each request's head newest
    T.serve_request(t, [5], 16, 0, 16, 1)
    assert list(t.policy.order) == [1, 4, 3, 5]


def test_store_fails_whole_when_too_few_chunks_can_go():
    t = T.OffloadTier(2)
    # three new chunks for two slots, nothing to evict: nothing is stored
    assert T.serve_request(t, [1, 2, 3], 48, 0, 16, 1).stored_chunks == 0
    assert t.n_store_failed == 1 and len(t.policy) == 0
    assert T.serve_request(t, [1, 2], 32, 0, 16, 1).stored_chunks == 2
    # [1, 2, 3, 4]: 1 and 2 load, then 3 and 4 are offered; only the offer is protected (the
    # load has completed), so the loaded chunks make room
    assert T.serve_request(t, [1, 2, 3, 4], 64, 0, 16, 1) == T.TierOutcome(32, 2, 2)
    assert not t.holds(1) and t.holds(4)
    # the GPU holds 3 and 4 (nothing to load), so [3, 4, 5] is offered whole: the held chunks
    # are in the offer, nothing outside it can go
    assert T.serve_request(t, [3, 4, 5], 48, 2, 16, 1) == T.TierOutcome(0, 0, 0)
    assert t.n_store_failed == 2


def test_store_threshold_stores_on_the_nth_offer():
    t = T.OffloadTier(10, store_threshold=2)
    assert T.serve_request(t, [1, 2], 32, 0, 16, 1).stored_chunks == 0
    assert t.n_store_skipped == 2
    assert T.serve_request(t, [1, 2], 32, 0, 16, 1).stored_chunks == 2


def test_arc_reuse_promotes_to_t2_and_store_does_not():
    t = T.OffloadTier(10, "arc")
    T.serve_request(t, [1, 2], 32, 0, 16, 1)
    assert list(t.policy.t1) == [2, 1] and not t.policy.t2
    T.serve_request(t, [1, 2, 3], 48, 0, 16, 1)        # loads 1, 2; stores 3
    assert list(t.policy.t2) == [2, 1] and list(t.policy.t1) == [3]


def test_arc_ghost_store_raises_target():
    t = T.OffloadTier(2, "arc")
    T.serve_request(t, [1], 16, 0, 16, 1)
    T.serve_request(t, [2], 16, 0, 16, 1)
    T.serve_request(t, [3], 16, 0, 16, 1)              # evicts 1 into B1
    assert list(t.policy.b1) == [1]
    T.serve_request(t, [1], 16, 0, 16, 1)
    assert t.policy.p == 1.0


# --- configuration -----------------------------------------------------------------------------

def test_parse_tier_sizes_units_and_options():
    specs = T.parse_tier("cpu:64g,512MiB,8kblk:arc:chunk=2,threshold=2,bw=20")
    assert [s.size_bytes for s in specs] == [64 << 30, 512 << 20, None]
    assert specs[2].size_blocks == 8192
    assert {(s.policy, s.blocks_per_chunk, s.store_threshold, s.bandwidth_gbps) for s in specs} \
        == {("arc", 2, 2, 20.0)}
    assert T.parse_tier("disk:1t:lru")[0].bandwidth_gbps == T.MEDIA["disk"][0]
    assert specs[0].n_chunks(1 << 20) == 32 << 10
    assert specs[2].n_chunks(None) == 4096


@pytest.mark.parametrize("text,msg", [
    ("gpu:1g:lru", "unknown medium"),
    ("cpu:1g:lfu", "unknown tier policy"),
    ("cpu:1g", "not MEDIUM:SIZES:POLICY"),
    ("cpu:-1g:lru", "not a positive size"),
    ("cpu:1x:lru", "not a positive size"),
    ("cpu:1gblk:lru", "not a positive size"),
    ("cpu:,1g:lru", "empty size"),
    ("cpu:1g:lru:chunk=0", "chunk=0"),
    ("cpu:1g:lru:chunk=1.5", "chunk=1.5"),
    ("cpu:1g:lru:threshold=-1", "threshold=-1"),
    ("cpu:1g:lru:bw=0", "bw=0"),
    ("cpu:1g:lru:speed=3", "unknown tier option"),
])
def test_parse_tier_errors_are_one_line(text, msg):
    with pytest.raises(ShadowError, match=msg) as e:
        T.parse_tier(text)
    assert "\n" not in str(e.value)


def test_tier_smaller_than_a_chunk_and_bytes_without_a_block_size():
    with pytest.raises(ShadowError, match="smaller than one offload chunk"):
        T.parse_tier("cpu:3blk:lru:chunk=4")[0].n_chunks(None)
    with pytest.raises(ShadowError, match="needs the bytes of a KV block"):
        T.parse_tier("cpu:1g:lru")[0].n_chunks(None)


def test_kv_bytes_per_block_by_hand(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512,
                             "num_key_value_heads": 2}))
    # 4 layers x 2 (K, V) x 2 heads x 64 dims x 16 tokens x 2 bytes
    assert T.kv_bytes_per_block(str(p), 16) == 4 * 2 * 2 * 64 * 16 * 2
    assert T.kv_bytes_per_block(str(p), 16, "fp8") == 4 * 2 * 2 * 64 * 16
    p.write_text(json.dumps({"num_hidden_layers": 2, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                             "layer_types": ["full_attention", "linear_attention"]}))
    assert T.kv_bytes_per_block(str(p), 32) == 1 * (512 + 64) * 32 * 2
    p.write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(ShadowError, match="the config has no 'num_attention_heads'"):
        T.kv_bytes_per_block(str(p), 32)


# --- the compiled tier (shadow/sim/tiers/loop.pyx) against this reference -----------------------

@pytest.mark.parametrize("policy", T.TIER_POLICIES)
@pytest.mark.parametrize("k,threshold,tracker", unit_rows([(1, 0, 50), (2, 0, 50), (1, 2, 50), (4, 3, 7),
                                                 (1, 2, 3)], 5, first=3))
def test_compiled_tier_equals_the_reference_per_request(policy, k, threshold, tracker):
    from shadow.sim.tiers.loop import ChunkTier
    for name, reqs in _streams():
        for gpu_cap, n_chunks in [(8, 3), (16, 8), (64, 40), (256, 300)]:
            ref = T.OffloadTier(n_chunks, policy, threshold, tracker)
            fast = ChunkTier(n_chunks, policy, threshold, tracker)
            g = Gpu(gpu_cap)
            for i, (ids, P) in enumerate(reqs):
                h = g.serve(ids, P, 16)
                a = T.serve_request(ref, ids, P, h, 16, k)
                b = fast.serve(ids, P, h, 16, k)
                assert (a.hit_tokens, a.loaded_chunks, a.stored_chunks) == b, \
                    (name, gpu_cap, n_chunks, i)
            assert (ref.n_stored, ref.n_evicted, ref.n_store_failed, ref.n_store_skipped) == \
                (fast.n_stored, fast.n_evicted, fast.n_store_failed, fast.n_store_skipped)
            assert len(ref.policy) == len(fast)
            if policy == "arc":
                assert ref.policy.p == fast.p
