
from shadow.sim import CacheSpec, Simulator
from shadow.trace.batch import Batch
from tests.sim._traces import SYNTHETIC, read_jsonl, next_access
from tests.sim.policy_mixin import PolicyMixin


class TestVLLM(PolicyMixin):
    NAME = "vllm"


def test_vllm_release_order_deepest_first():
    sim = Simulator([CacheSpec("vllm", 8)])
    adm = sim.admit([1, 2, 3], timestamp_s=0.0)
    pol = sim.runs[0].policy
    assert pol.free_queue() == []              # held by the running request: not evictable
    sim.release(adm, extra_block_ids=[4])
    # tail first: the generated block, then 3, 2, 1; the next victim is the deepest
    assert pol.free_queue() == [4, 3, 2, 1]


def test_vllm_running_blocks_not_evictable():
    sim = Simulator([CacheSpec("vllm", 4)])
    a = sim.admit([1, 2, 3])
    b = sim.admit([10])                        # fits: one free slot
    assert b.served == [True]
    c = sim.admit([20])                        # every slot held by a running request: skipped
    assert c.served == [False]
    r = sim.results()[0]
    assert r.error is None and (r.n_req, r.n_req_skipped) == (2, 1)
    sim.release(a)
    sim.release(b)
    d = sim.admit([20])                        # released blocks are evictable again
    assert d.served == [True]
    assert sim.runs[0].policy.py_find(3) == -1  # the deepest block of the first request went first


def test_vllm_equals_lru_offline_deepest_first():
    reqs = read_jsonl(SYNTHETIC)[:1500]
    batch = Batch.from_lists(reqs, next_access=next_access(reqs))
    sim = Simulator([CacheSpec("vllm", 2048), CacheSpec("lru", 2048)], pin=True)
    sim.feed(batch)
    v, l = sim.results()
    assert v.n_eviction > 0
    assert (v.n_hits, v.n_eviction, v.n_self_eviction) == (l.n_hits, l.n_eviction, l.n_self_eviction)


def test_vllm_differs_from_lru_prefix_order():
    # cap 4: [1,2,3] then [4,5] evicts one block.  Prefix-order replay leaves the root least
    # recent in lru (evicts 1); vllm releases tail first (evicts 3) whatever the replay order.
    reqs = [[1, 2, 3], [4, 5], [1, 2, 3]]
    sim = Simulator([CacheSpec("vllm", 4), CacheSpec("lru", 4)], replay_order="prefix-order")
    sim.feed(Batch.from_lists(reqs))
    v, l = sim.results()
    assert (v.n_hits, v.n_prefix_hits) == (2, 2)
    assert (l.n_hits, l.n_prefix_hits) == (2, 0)
