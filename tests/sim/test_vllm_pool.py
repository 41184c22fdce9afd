"""Hand-traced cases of ``VllmBlockPool`` (vLLM's block pool): copies, lazy eviction, the free
queue's head/tail split, skips and drops.  The engine itself is the oracle in
tests/connector/test_lockstep.py; these pin each rule down on a few blocks."""

from __future__ import annotations

from shadow.sim.vllm_pool import VllmBlockPool

B = 4


def test_admit_allocates_from_the_head_and_caches_full_blocks():
    p = VllmBlockPool(6, B)
    assert p.admit("a", [11, 12], num_tokens=10, end_tokens=10) == (2, 0, 0)
    # ceil(10 / 4) = 3 blocks: physical 1, 2, 3; blocks 1 and 2 cached as ids 11 and 12
    assert p.block_table("a") == [1, 2, 3]
    assert p.cached_blocks() == {11: [1], 12: [2]}
    assert p.free_blocks() == [4, 5, 6]
    p.check()


def test_free_puts_unhashed_blocks_at_the_head_and_hashed_ones_at_the_tail_deepest_first():
    p = VllmBlockPool(6, B)
    p.admit("a", [11, 12], num_tokens=10, end_tokens=10)
    p.free("a")
    # reversed: 3 (no hash) -> head; 2, 1 (hashed) -> tail in that order
    assert p.free_blocks() == [3, 4, 5, 6, 2, 1]
    assert p.free_queue() == [12, 11]
    p.check()


def test_a_fully_cached_block_aligned_prompt_recomputes_its_last_block_as_a_copy():
    p = VllmBlockPool(6, B)
    p.admit("a", [11, 12], num_tokens=8, end_tokens=8)
    p.free("a")
    assert p.free_blocks() == [3, 4, 5, 6, 2, 1]
    # 8 tokens: at most (8 - 1) // 4 = 1 block is looked up; block 2 is computed again
    assert p.admit("b", [11, 12], num_tokens=8, end_tokens=8) == (1, 1, 1)
    assert p.block_table("b") == [1, 3]
    assert p.cached_blocks() == {11: [1], 12: [2, 3]}
    assert p.copies() == {11: 1, 12: 2}
    p.check()
    p.free("b")
    # a lookup takes the oldest copy
    assert p.lookup([11, 12], 2) == [1, 2]


def test_eviction_is_lazy_and_an_id_leaves_with_its_last_copy():
    p = VllmBlockPool(3, B)
    p.admit("a", [11], num_tokens=4, end_tokens=4)
    p.free("a")
    assert p.resident_ids() == [11] and p.free_blocks() == [2, 3, 1]
    p.admit("b", [21, 22], num_tokens=8, end_tokens=8)   # pops 2, 3: 11 survives in block 1
    assert p.holds(11) and p.n_eviction == 0
    p.free("b")
    p.admit("c", [31], num_tokens=4, end_tokens=4)        # pops the head, block 1: 11 evicted
    assert not p.holds(11) and p.n_eviction == 1
    p.check()


def test_a_hit_on_a_free_block_takes_it_out_of_the_queue_before_allocating():
    p = VllmBlockPool(3, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    assert p.free_blocks() == [3, 2, 1]
    # hit 11 (block 1, the tail) and 12; 3 more tokens need a third block: the head, block 3
    assert p.admit("b", [11, 12], num_tokens=11, end_tokens=11) == (2, 2, 2)
    assert p.block_table("b") == [1, 2, 3]
    assert p.num_free == 0
    p.check()


def test_growth_caches_blocks_as_they_fill_and_a_request_that_does_not_fit_is_skipped():
    p = VllmBlockPool(4, B)
    ids = [11]
    p.admit("a", ids, num_tokens=5, end_tokens=5)         # blocks 1, 2
    ids.append(12)                                          # a generated block's id, learned later
    assert p.grow("a", 8) and p.cached_blocks() == {11: [1], 12: [2]}
    assert p.grow("a", 9) and p.block_table("a") == [1, 2, 3]
    assert p.admit("b", [21, 22], num_tokens=8, end_tokens=8) is None   # 2 blocks, 1 free
    assert p.n_req_skipped == 1 and "b" not in p.reqs
    # a running request that cannot grow is dropped (freed as a preemption would)
    assert not p.grow("a", 17) and p.n_dropped == 1 and p.num_free == 4
    p.check()


def test_a_reset_keeps_the_free_queue_order():
    p = VllmBlockPool(4, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    q = VllmBlockPool(4, B)
    q.keep_free_order(p)
    assert q.free_blocks() == p.free_blocks() == [3, 4, 2, 1] and q.cached_blocks() == {}
    q.check()


def test_preempted_re_admissions_stay_out_of_the_statistics():
    p = VllmBlockPool(8, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9, count=False)
    assert (p.n_req, p.n_blocks, p.n_prefix_hits) == (1, 2, 0)
