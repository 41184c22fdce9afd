"""lirs: shared mixin (exact differential vs the reference at the default and at a larger HIR
share), hand-traced runs of each rule (L1..L8 and evict, as named in reference/lirs.py), pins, and
hit ratios against libcachesim's ``LIRS``."""

from __future__ import annotations

import functools

import pytest

from shadow.errors import ShadowError
from shadow.sim.registry import make_policy
from shadow.sim.reference import make_reference
from tests.sim._traces import conversation, hit_ratios
from tests.sim.policy_mixin import PolicyMixin


class TestLIRS(PolicyMixin):
    NAME = "lirs"


class TestLIRSLargeHIRShare(PolicyMixin):
    # NOTE: at the default ratio every cache of the mixin (C <= 24) has H = 1; this one has
    # H = C/4, so Q holds several blocks and the demotions and the stack limit meet them.
    NAME = "lirs"
    PARAMS = "hirs-ratio=0.25"


def _full4():
    """C = 4 (L = 3, H = 1) after gets 1..4: S [4H 3L 2L 1L], Q [4]."""
    p = make_policy("lirs", 4)
    for b in (1, 2, 3, 4):
        p.py_get(b)
    assert (p.lir_limit, p.hir_limit) == (3, 1)
    assert p.queues() == {"s": [(4, "H"), (3, "L"), (2, "L"), (1, "L")], "q": [4], "nh": []}
    return p


def test_resident_hir_limit():
    # H = max(1, int(0.01 C)), L = C - H
    for cap, h in ((1, 1), (99, 1), (199, 1), (200, 2), (1000, 10), (8192, 81)):
        p = make_policy("lirs", cap)
        assert (p.hir_limit, p.lir_limit) == (h, cap - h)
    p = make_policy("lirs", 100, "hirs-ratio=0.25")
    assert (p.hir_limit, p.lir_limit) == (25, 75)


def test_l5_new_blocks_lir_while_room_then_hir():
    p = _full4()
    p.py_get(5)            # full: Q's LRU 4 goes (stays in S, non-resident), 5 enters as HIR
    assert p.queues() == {"s": [(5, "H"), (4, "N"), (3, "L"), (2, "L"), (1, "L")], "q": [5],
                          "nh": [4]}
    assert p.py_find(4) == -1      # a non-resident id in S never reads as resident


def test_l1_lir_hit_and_l7_prune():
    p = _full4()
    p.py_get(1)
    p.py_get(2)
    assert p.queues()["s"] == [(2, "L"), (1, "L"), (4, "H"), (3, "L")]
    p.py_get(3)            # the bottom LIR moves up: the HIR entry 4 left at the bottom is pruned
    assert p.queues() == {"s": [(3, "L"), (2, "L"), (1, "L")], "q": [4], "nh": []}
    assert p.py_find(4) >= 0       # pruned from S, still resident in Q
    assert p.py_evict() == 4       # Q's LRU; not in S, so it is forgotten
    assert p.queues() == {"s": [(3, "L"), (2, "L"), (1, "L")], "q": [], "nh": []}


def test_l2_resident_hir_in_s_becomes_lir_and_demotes_the_bottom():
    p = _full4()
    p.py_get(4)            # 4 leaves Q, LIR set full: bottom 1 goes to Q as HIR
    assert p.queues() == {"s": [(4, "L"), (3, "L"), (2, "L")], "q": [1], "nh": []}


def test_evict_then_l4_non_resident_hir_promoted_to_lir():
    p = _full4()
    assert p.py_evict() == 4
    assert p.queues() == {"s": [(4, "N"), (3, "L"), (2, "L"), (1, "L")], "q": [], "nh": [4]}
    p.py_get(4)            # a miss on a non-resident HIR in S: LIR; bottom 1 demoted to Q
    assert p.queues() == {"s": [(4, "L"), (3, "L"), (2, "L")], "q": [1], "nh": []}


def test_l3_hir_hit_outside_s_and_q_past_its_limit():
    p = _full4()
    p.py_evict()
    p.py_get(4)                    # S [4L 3L 2L], Q [1]
    p.py_get(1)                    # 1 only in Q: stays HIR, onto S; bottom 2 demoted into Q
    assert p.queues() == {"s": [(1, "H"), (4, "L"), (3, "L")], "q": [2, 1], "nh": []}
    assert p.lirs == 2 and p.n_resident == 4
    # Q holds 2 > H = 1 blocks: nothing was evicted inside the hit; the next eviction takes
    # Q's LRU (libCacheSim evicts it inside the hit)
    assert p.py_evict() == 1
    assert p.queues() == {"s": [(1, "N"), (4, "L"), (3, "L")], "q": [2], "nh": [1]}
    p.py_get(5)                    # the LIR set has room again: a new block is LIR
    assert p.queues()["s"] == [(5, "L"), (1, "N"), (4, "L"), (3, "L")]
    # L7 on a non-resident bottom: it leaves S and nh
    p.py_get(3)
    p.py_get(4)
    assert p.queues() == {"s": [(4, "L"), (3, "L"), (5, "L")], "q": [2], "nh": []}


def test_l8_stack_limit_drops_oldest_non_resident():
    p = _full4()
    p.py_get(3)
    p.py_get(2)
    p.py_get(1)                    # S [1L 2L 3L], 4 pruned (in Q)
    for b in range(10, 17):        # a scan: each new block evicts the one before it
        p.py_get(b)
    q = p.queues()
    # 2C = 8 entries at most: ids 10 and 11, the oldest non-resident ones, are gone
    assert q["s"] == [(16, "H"), (15, "N"), (14, "N"), (13, "N"), (12, "N"),
                      (1, "L"), (2, "L"), (3, "L")]
    assert q["nh"] == [15, 14, 13, 12] and q["q"] == [16]


def test_evict_demotes_pinned_lir_and_skips_pinned_hir():
    p = _full4()
    p.py_pin(4)                    # Q's only block
    p.py_pin(1)                    # S's bottom LIR
    # Q has no unpinned block: 1 is demoted (still resident), then 2, which goes
    assert p.py_evict() == 2
    assert p.queues() == {"s": [(4, "H"), (3, "L")], "q": [1, 4], "nh": []}
    assert p.py_find(1) >= 0 and p.py_find(4) >= 0
    assert p.py_evict() == 3       # the last LIR block, demoted and unpinned
    assert p.py_evict() == 4       # every block pinned: Q's LRU (best effort)


def test_reference_follows_the_hand_traces():
    # the same L3 trace on the reference (its structures as lists, bottom first)
    r = make_reference("lirs", 4)
    for b in (1, 2, 3, 4):
        r.insert(b)
    assert r.evict() == 4
    r.insert(4)
    r.hit(1)
    assert list(r.s) == [3, 4, 1] and list(r.q) == [1, 2] and r.lir == {3, 4}


def test_pins_stop_self_evictions():
    # after [1] [2] [3] [4]: S [4H 3L 2L 1L], Q [4].  [4, 5] hits 4 and needs one slot: Q's LRU
    # is 4 itself; pinned, it is skipped and S's bottom 1 is demoted and evicted instead
    from shadow.sim import CacheSpec, Simulator
    from tests.sim._traces import batch_of

    n_self = {}
    for pin in (True, False):
        sim = Simulator([CacheSpec("lirs", 4)], pin=pin)
        sim.feed(batch_of([[1], [2], [3], [4], [4, 5]]))
        r = sim.results()[0]
        assert r.error is None and r.n_unexpected_eviction == 0 and r.n_hits == 1
        n_self[pin] = r.n_self_eviction
        assert sorted(sim.runs[0].policy.resident_ids()) == [2, 3, 4, 5]
        assert r.n_eviction == (1 if pin else 2)    # unpinned: 4, which made no room, then 1
    assert n_self == {True: 0, False: 1}


@pytest.mark.slow
@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("capacity", [200, 3000])
def test_same_as_reference_on_conversation_requests_with_its_structures(capacity, pin):
    # at the default ratio H >= 2 only from C = 200: the mixin's caches all have H = 1
    from tests.sim.policy_mixin import run_both

    got, want, gc, wc, sim, ref = run_both("lirs", "", capacity, conversation()[:1500], pin=pin)
    assert got == want and gc == wc
    q, r = sim.runs[0].policy.queues(), ref.policy
    assert [b for b, _ in q["s"]] == list(reversed(r.s))
    assert q["q"] == list(reversed(r.q)) and q["nh"] == list(reversed(r.nh))
    assert {b for b, st in q["s"] if st == "L"} == r.lir
    if pin:
        assert gc["n_self_eviction"] == 0
    elif capacity == 3000:
        assert gc["n_self_eviction"] == 19         # unpinned, Q's LRU block can be a match


def test_bad_parameters_are_clear_errors():
    for bad, msg in (("hirs-ratio=0", "hirs-ratio must be in (0, 1)"),
                     ("hirs-ratio=1", "hirs-ratio must be in (0, 1)"),
                     ("hirs-ratio=x", "hirs-ratio"), ("hir-ratio=0.1", "hir-ratio")):
        with pytest.raises(ShadowError, match=r"lirs.*" + msg.replace("(", r"\(").replace(")", r"\)")):
            make_policy("lirs", 8, bad)


# ---- against libcachesim's LIRS --------------------------------------------------------------

SIZES = (1024, 8192, 32768)


def _lcs_hit_ratio(capacity: int, trace: tuple[tuple[int, ...], ...]) -> float:
    """libcachesim's LIRS, one ``get`` per block in prefix order (as its cachesim serves)."""
    lcs = pytest.importorskip("libcachesim")
    cache = lcs.LIRS(capacity)
    req = lcs.Request()
    req.obj_size = 1
    hits = n = 0
    for r in trace:
        for b in r:
            req.obj_id = b
            hits += cache.get(req)
            n += 1
    return hits / n


@functools.lru_cache(maxsize=None)
def _one_block_trace() -> tuple[tuple[int, ...], ...]:
    return tuple((b,) for r in conversation() for b in r)


#: One-block requests (the conversation trace's blocks, one request each): the serve loop's
#: make-room-then-insert is then libCacheSim's get, and the hit ratios were equal at every size
#: (0.054981, 0.183373, 0.247511).  The one difference left: an L3 hit with Q full evicts Q's LRU
#: inside the hit in libCacheSim and at the next eviction here, so a hit on that block in between
#: is a hit here only.  1e-4 allows for that and nothing else (lru is 0.01 lower at 1024).
ONE_BLOCK_TOLERANCE = 1e-4

#: The trace's own requests (24 blocks each on average): libCacheSim's get makes room block by
#: block, so a request that misses more blocks than Q holds (1% of C) evicts its own new blocks
#: from Q and keeps the LIR set; the serve loop makes room for the whole request first and, Q
#: soon empty, demotes and evicts LIR blocks (PrefixSim's LIRS does the same), and the new blocks
#: then enter as LIR.  Measured: shadow 0.04622, 0.18725, 0.24751, libcachesim 0.05498, 0.18337,
#: 0.24751 (-0.0088, +0.0039, 0).
REQUEST_TOLERANCE = 0.01


@functools.lru_cache(maxsize=None)
def _shadow_one_block() -> dict[int, float]:
    return hit_ratios("lirs", SIZES, [list(r) for r in _one_block_trace()], batch=20000)


@functools.lru_cache(maxsize=None)
def _shadow_requests() -> dict[int, float]:
    return hit_ratios("lirs", SIZES, conversation())


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_hit_ratio_equals_libcachesim_lirs_on_one_block_requests(capacity):
    want = _lcs_hit_ratio(capacity, _one_block_trace())
    got = _shadow_one_block()[capacity]
    assert abs(got - want) <= ONE_BLOCK_TOLERANCE, (capacity, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_hit_ratio_near_libcachesim_lirs_on_conversation_requests(capacity):
    want = _lcs_hit_ratio(capacity, tuple(tuple(r) for r in conversation()))
    got = _shadow_requests()[capacity]
    assert abs(got - want) <= REQUEST_TOLERANCE, (capacity, got, want)
