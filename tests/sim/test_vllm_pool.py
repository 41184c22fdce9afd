"""``VllmBlockPool`` (vLLM's block pool): hand-traced cases of each rule (copies, lazy eviction,
the free queue's head/tail split, skips and drops) run on the Cython pool and on its pure-Python
reference, and the two compared event by event on random traffic.  The engine itself is the
oracle in tests/connector/test_lockstep.py."""

from __future__ import annotations

import random

import pytest

from shadow.sim.engine import pool as fast

B = 4
IMPLS = {"cython": fast.VllmBlockPool,
         "reference": __import__("shadow.sim.reference.vllm_pool",
                                 fromlist=["VllmBlockPool"]).VllmBlockPool}


@pytest.fixture(params=sorted(IMPLS))
def VllmBlockPool(request):
    return IMPLS[request.param]


def test_admit_allocates_from_the_head_and_caches_full_blocks(VllmBlockPool):
    p = VllmBlockPool(6, B)
    assert p.admit("a", [11, 12], num_tokens=10, end_tokens=10) == (2, 0, 0)
    # ceil(10 / 4) = 3 blocks: physical 1, 2, 3; blocks 1 and 2 cached as ids 11 and 12
    assert p.block_table("a") == [1, 2, 3]
    assert p.cached_blocks() == {11: [1], 12: [2]}
    assert p.free_blocks() == [4, 5, 6]
    p.check()


def test_free_puts_unhashed_blocks_at_the_head_and_hashed_ones_at_the_tail_deepest_first(VllmBlockPool):
    p = VllmBlockPool(6, B)
    p.admit("a", [11, 12], num_tokens=10, end_tokens=10)
    p.free("a")
    # reversed: 3 (no hash) -> head; 2, 1 (hashed) -> tail in that order
    assert p.free_blocks() == [3, 4, 5, 6, 2, 1]
    assert p.free_queue() == [12, 11]
    p.check()


def test_a_fully_cached_block_aligned_prompt_recomputes_its_last_block_as_a_copy(VllmBlockPool):
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


def test_eviction_is_lazy_and_an_id_leaves_with_its_last_copy(VllmBlockPool):
    p = VllmBlockPool(3, B)
    p.admit("a", [11], num_tokens=4, end_tokens=4)
    p.free("a")
    assert list(p.resident_ids()) == [11] and p.free_blocks() == [2, 3, 1]
    p.admit("b", [21, 22], num_tokens=8, end_tokens=8)   # pops 2, 3: 11 survives in block 1
    assert p.holds(11) and p.n_eviction == 0
    p.free("b")
    p.admit("c", [31], num_tokens=4, end_tokens=4)        # pops the head, block 1: 11 evicted
    assert not p.holds(11) and p.n_eviction == 1
    p.check()


def test_a_hit_on_a_free_block_takes_it_out_of_the_queue_before_allocating(VllmBlockPool):
    p = VllmBlockPool(3, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    assert p.free_blocks() == [3, 2, 1]
    # hit 11 (block 1, the tail) and 12; 3 more tokens need a third block: the head, block 3
    assert p.admit("b", [11, 12], num_tokens=11, end_tokens=11) == (2, 2, 2)
    assert p.block_table("b") == [1, 2, 3]
    assert p.num_free == 0
    p.check()


def test_growth_caches_blocks_as_they_fill_and_a_request_that_does_not_fit_is_skipped(VllmBlockPool):
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


def test_fits_counts_the_hit_blocks_taken_out_of_the_free_queue(VllmBlockPool):
    p = VllmBlockPool(4, B)
    p.admit("a", [11, 12], num_tokens=8, end_tokens=8)
    p.free("a")                                   # free: [3, 4, 2, 1]... 2 and 1 hold 12, 11
    # 9 tokens: hits 11, 12 (both free: they leave the queue) + 1 new block = 3 of 4 free
    assert p.fits([11, 12], 9, 9)
    # 3 blocks beyond the hit + the 2 hit blocks = 5 > 4
    assert not p.fits([11, 12], 9, 9 + 2 * B)


def test_a_reset_keeps_the_free_queue_order(VllmBlockPool):
    p = VllmBlockPool(4, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    q = VllmBlockPool(4, B)
    q.keep_free_order(p)
    assert q.free_blocks() == p.free_blocks() == [3, 4, 2, 1] and q.cached_blocks() == {}
    q.check()


def test_preempted_re_admissions_stay_out_of_the_statistics(VllmBlockPool):
    p = VllmBlockPool(8, B)
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9)
    p.free("a")
    p.admit("a", [11, 12], num_tokens=9, end_tokens=9, count=False)
    assert (p.n_req, p.n_blocks, p.n_prefix_hits) == (1, 2, 0)


def _state(p) -> tuple:
    return (p.cached_blocks(), p.free_blocks(), p.free_queue(), p.num_free,
            {r: p.block_table(r) for r in sorted(p.reqs)},
            (p.n_req, p.n_req_skipped, p.n_blocks, p.n_hits, p.n_prefix_hits, p.n_eviction,
             p.n_dropped, round(p.total_cost, 6), round(p.saved_cost, 6),
             round(p.prefix_saved_cost, 6)))


@pytest.mark.parametrize("seed", range(12))
def test_cython_pool_equals_the_reference_event_by_event(seed):
    """Random admissions (shared prefixes, re-sends, block-aligned prompts), growth with
    generated ids, frees and preemption-like re-admissions, on a pool small enough to evict,
    skip and drop; the full state is compared after every event."""
    rng = random.Random(seed)
    cap = rng.choice([6, 13, 40])
    cost = (lambda p: 1.0 + 0.5 * p) if seed % 2 else None
    a = fast.VllmBlockPool(cap, B, cost)
    b = IMPLS["reference"](cap, B, cost)
    prefixes = [[rng.randrange(1, 60) * 1000 + k for k in range(rng.randrange(1, 6))]
                for _ in range(5)]
    live: dict[str, list[int]] = {}
    seq = 0
    for _ in range(400):
        op = rng.random()
        if op < 0.4 or not live:
            ids = list(rng.choice(prefixes))[: rng.randrange(0, 6)]
            ids += [rng.randrange(1, 10 ** 6) for _ in range(rng.randrange(0, 3))]
            n_tok = len(ids) * B + rng.choice([0, 0, 1, 3])
            if n_tok == 0:
                continue
            end = rng.choice([n_tok, min(n_tok, B * rng.randrange(1, 4))])
            rid = f"r{seq}" if rng.random() < 0.9 or not live else rng.choice(sorted(live))
            seq += 1
            count = rng.random() < 0.85
            grown = end + B * rng.randrange(0, 4)
            assert a.fits(ids, n_tok, grown) == b.fits(ids, n_tok, grown)
            ra = a.admit(rid, list(ids), n_tok, end, count)
            rb = b.admit(rid, list(ids), n_tok, end, count)
            assert ra == rb
            live.pop(rid, None)
            if rb is not None:
                live[rid] = ids
        elif op < 0.75:
            rid = rng.choice(sorted(live))
            ids = live[rid]
            extra = [rng.randrange(1, 10 ** 6) for _ in range(rng.randrange(0, 2))]
            a.reqs[rid].ids.extend(extra) if rid in a.reqs else None
            b.reqs[rid].ids.extend(extra) if rid in b.reqs else None
            end = (len(b.reqs[rid].ids) if rid in b.reqs else len(ids)) * B + rng.choice([0, 1])
            assert a.grow(rid, end) == b.grow(rid, end)
            if rid not in b.reqs:
                live.pop(rid)
        else:
            rid = rng.choice(sorted(live))
            a.free(rid)
            b.free(rid)
            live.pop(rid)
        assert _state(a) == _state(b)
        a.check()
    assert a.n_req > 0
