"""fifo_merge: the shared checks (default window, and small windows where scans happen in small
caches), a hand-traced order, libCacheSim's per-scan counts, and the conversation trace: the
reference event by event, and the hit ratio against what libCacheSim's FIFO_Merge.c says it does.
The PyPI libcachesim package has no FIFO_Merge class, so the reference is the oracle."""

from __future__ import annotations

import functools

import pytest

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.sim.registry import make_policy
from tests.sim._traces import batches_of, conversation
from tests.sim.policy_mixin import PolicyMixin
from tests.tiers import unit_rows

SIZES = (1024, 4096, 16384)


class TestFifoMerge(PolicyMixin):
    NAME = "fifo_merge"


class TestFifoMergeSmallWindow(PolicyMixin):
    NAME = "fifo_merge"
    PARAMS = "n-exam=4,n-keep=1,seed=5"


class TestFifoMergeRecency(PolicyMixin):
    NAME = "fifo_merge"
    PARAMS = "n-exam=6,n-keep=3,retain-policy=recency"


def test_fifo_merge_eviction_order_hand_traced():
    p = make_policy("fifo_merge", 5, "n-exam=4,n-keep=1,retain-policy=recency")
    for b in (1, 2, 3, 4, 5):
        p.py_get(b, vtime=b)         # queue (tail first): 1 2 3 4 5
    p.py_get(1, vtime=6)             # hits change no position, only the last access
    p.py_get(3, vtime=7)
    assert p.queue() == [1, 2, 3, 4, 5]
    # 5 resident > n-exam 4: scan 1 2 3 4 from the tail (last 6 2 7 4), hand to 5; ranked
    # 2 4 1 3; 4 - 1 - 1 = 2 victims: 2 now, 4 pending
    assert p.py_evict(vtime=8) == 2
    assert p.pending() == [4]
    p.py_pin(4)
    assert p.py_evict(vtime=8) == 1  # pending 4 is pinned: passed; 3 left <= 4: FIFO, the tail
    assert p.pending() == []
    assert p.queue() == [3, 4, 5]


def test_scan_evicts_n_exam_minus_n_keep_minus_one():
    """libCacheSim's count: 49 of a window of 100 (its 50th eviction scans the next window)."""
    p = make_policy("fifo_merge", 400)
    for b in range(1, 401):
        p.py_get(b, vtime=b)
    assert p.py_evict(vtime=401) > 0
    assert len(p.pending()) == 48
    window = set(range(1, 101))
    gone = {b for b in window if p.py_find(b) < 0}
    for _ in range(48):
        gone.add(p.py_evict(vtime=401))
    assert len(gone) == 49 and gone <= window and p.pending() == []
    assert p.py_evict(vtime=401) in range(101, 201)     # the next window, from the hand


@pytest.mark.parametrize("bad", ["n-exam=0", "n-keep=101", "n-keep=-1", "retain-policy=belady",
                                 "retain-policy=none", "retain-policy=lru", "seed=-1"])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ShadowError, match="fifo_merge"):
        make_policy("fifo_merge", 8, bad)


@functools.lru_cache(maxsize=None)
def _conversation_results() -> dict[tuple[str, str, int], tuple[float, int]]:
    """Pins off, prefix-order replay: (hit ratio, evictions) per (policy, params, size)."""
    runs = [("fifo", ""), ("fifo_merge", ""), ("fifo_merge", "n-exam=16384")]
    sim = Simulator([CacheSpec(a, c, p) for a, p in runs for c in SIZES], pin=False,
                    replay_order="prefix-order")
    for b in batches_of(conversation(), size=700):
        sim.feed(b)
    return {(r.spec.policy, r.spec.params, r.spec.capacity): (r.block_hit_ratio, r.n_eviction)
            for r in sim.results()}


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_conversation_equals_reference(capacity):
    """The reference, event by event over the whole trace: the same hits and evictions."""
    ref = RefCache(make_reference("fifo_merge", capacity), capacity, pin=False,
                   replay_order="prefix-order")
    for req in conversation():
        ref.serve(req)
    st = ref.stats()
    assert _conversation_results()[("fifo_merge", "", capacity)] == (
        st["n_hits"] / st["n_blocks"], st["n_eviction"])


def test_conversation_hit_ratio_as_libcachesim_describes():
    """FIFO_Merge.c: with no more resident blocks than ``n-exam`` it evicts as FIFO (so a window
    as large as the cache is fifo exactly); otherwise it keeps the most hit blocks of each window,
    which must then beat fifo."""
    got = _conversation_results()
    for c in SIZES:
        assert got[("fifo_merge", "n-exam=16384", c)] == got[("fifo", "", c)]
        assert got[("fifo_merge", "", c)][0] > got[("fifo", "", c)][0]


@pytest.mark.parametrize("pin", unit_rows([True, False], 2))
@pytest.mark.parametrize("params", unit_rows(["n-exam=40,n-keep=10", "n-exam=100,retain-policy=recency",
                                    "n-exam=128,n-keep=0", "n-exam=200,n-keep=150"], 4, first=2))
def test_each_ranking_path_equals_the_reference(params, pin):
    """A scan ranks small windows by insertion, windows of 32-128 blocks by a radix sort of
    packed keys and larger ones as doubles: each path against the reference, request by request,
    in a cache large enough that scans happen."""
    from tests.sim.policy_mixin import run_both

    got, want, gc, wc, _sim, _ref = run_both("fifo_merge", params, 600, conversation()[:1500],
                                             pin=pin)
    assert got == want and gc == wc
    assert gc["n_eviction"] > 1000
