"""sglang: SGLang's RadixCache default (least recent evictable leaf), on the block level.

SGLang's own radix cache is not driven here (docs/policies/engine_exact.md, ``### sglang``, says why): the
cases below are traced by hand from its rules (python/sglang/srt/mem_cache/radix_cache.py:
``evict`` pops the least recent evictable leaf, a parent joins once its last child is gone,
``lock_ref`` keeps a running request's nodes, ``match_prefix`` and ``insert`` stamp the path).
"""

from __future__ import annotations

from shadow.sim import CacheSpec, Simulator
from tests.sim._traces import SYNTHETIC, batch_of, batches_of, read_jsonl
from tests.sim.policy_mixin import PolicyMixin


class TestSGLang(PolicyMixin):
    NAME = "sglang"


def test_leaves_go_first_and_a_parent_follows_its_last_child():
    # cap 5, prefix order.  [1,2,3] then [1,4]: the tree 1 -> 2 -> 3, 1 -> 4, least recent
    # first 3, 2, 4, 1 (a release stamps the path again, tail first).  [6,7,8,9] needs three
    # blocks: the leaf 3, then 2 (a leaf once 3 is gone), then the leaf 4; 1 keeps its place
    # while 4 is resident and is a leaf, the most recent, after.  Plain lru takes 2, 3 and the
    # root 1, keeping 4 behind a missing parent.
    reqs = [[1, 2, 3], [1, 4], [6, 7, 8, 9]]
    sim = Simulator([CacheSpec("sglang", 5), CacheSpec("lru", 5)], replay_order="prefix-order")
    sim.feed(batch_of(reqs))
    sg, lru = sim.runs
    assert sorted(sg.policy.resident_ids()) == [1, 6, 7, 8, 9]
    assert sorted(lru.policy.resident_ids()) == [4, 6, 7, 8, 9]
    assert sorted(sg.policy.held_ids()) == [6, 7, 8]
    assert sg.policy.order() == [6, 7, 8, 9, 1]        # most recent first: the release stamps
    sim.feed(batch_of([[1, 4]], first_request=3))
    s, l = sim.results()
    assert (s.n_hits - 1, s.n_prefix_hits - 1) == (1, 1)    # 1 hit, as its own prefix
    assert (l.n_hits - 1, l.n_prefix_hits - 1) == (1, 0)    # 4 hit behind the missing 1


def test_a_release_stamps_the_path_live():
    # cap 4: A=[1,2] and B=[5,6] run; B ends first, then A.  SGLang's cache_finished_req
    # stamps A's path last, so B's leaf 6 is the least recent evictable leaf; lru (stamped at
    # the admission only) evicts A's leaf 2.
    sim = Simulator([CacheSpec("sglang", 4), CacheSpec("lru", 4, "leaf-only=1")])
    a = sim.admit([1, 2])
    b = sim.admit([5, 6])
    sim.release(b)
    sim.release(a)
    sim.admit([9])
    sg, lru = (sorted(r.policy.resident_ids()) for r in sim.runs)
    assert sg == [1, 2, 5, 9]
    assert lru == [1, 5, 6, 9]


def test_a_running_request_keeps_its_path():
    # cap 5: A=[1,2,3] runs (lock_ref on its path), so do [7] and [8]; [9] finds every block
    # locked and is skipped (SGLang's scheduler would make it wait).  A's generated block 4
    # finds every block held too (A's own until its release ends) and is not cached.
    sim = Simulator([CacheSpec("sglang", 5)])
    a = sim.admit([1, 2, 3])
    assert sim.admit([7]).served == [True]
    assert sim.admit([8]).served == [True]
    assert sim.admit([9]).served == [False]
    pol = sim.runs[0].policy
    assert pol.pin_count(1) == 1 and sorted(pol.held_ids()) == [1, 2]
    sim.release(a, extra_block_ids=[4])                # 4 does not fit: every block held
    assert pol.py_find(4) == -1
    r = sim.results()[0]
    assert (r.n_req, r.n_req_skipped) == (3, 1)


def test_generated_blocks_hang_under_the_prompt():
    sim = Simulator([CacheSpec("sglang", 6)])
    a = sim.admit([1, 2])
    sim.release(a, extra_block_ids=[3, 4])
    pol = sim.runs[0].policy
    assert [pol.leaf_parent(b) for b in (1, 2, 3, 4)] == [0, 1, 2, 3]
    assert sorted(pol.held_ids()) == [1, 2, 3]
    # the next victims: 4, then 3, 2, 1 (each the only evictable leaf)
    assert [pol.py_evict() for _ in range(4)] == [4, 3, 2, 1]


def test_equals_vllm_and_leaf_only_lru_offline():
    # With prefix ids a parent is stamped (or released) no earlier than its children, so offline
    # every order keeps parents behind their children: sglang, vllm and lru under leaf-only make
    # the same choices in both replay orders (docs/policies/engine_exact.md, ``### sglang``).
    reqs = read_jsonl(SYNTHETIC)[:3000]
    for order in ("deepest-first", "prefix-order"):
        sim = Simulator([CacheSpec("sglang", 1024), CacheSpec("vllm", 1024),
                         CacheSpec("lru", 1024, "leaf-only=1")], replay_order=order)
        for b in batches_of(reqs):
            sim.feed(b)
        s, v, l = sim.results()
        assert s.n_eviction > 0
        assert (s.n_hits, s.n_prefix_hits, s.n_eviction) == (v.n_hits, v.n_prefix_hits,
                                                               v.n_eviction)
        assert (s.n_hits, s.n_eviction) == (l.n_hits, l.n_eviction)
        assert s.n_hits == s.n_prefix_hits


def test_leaf_only_cannot_be_turned_off():
    import pytest

    from shadow.errors import ShadowError
    from shadow.sim.registry import make_policy

    with pytest.raises(ShadowError, match=r"^policy sglang: leaf-only cannot be turned off"):
        make_policy("sglang", 8, "leaf-only=0")
    assert make_policy("sglang", 8, "leaf-only=1").leaf_only
