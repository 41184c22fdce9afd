import numpy as np
import pytest

from shadow.sim.registry import make_policy
from tests.sim._traces import random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestS3FIFO(PolicyMixin):
    NAME = "s3fifo"


class TestS3FIFOThreshold1(PolicyMixin):
    NAME = "s3fifo"
    PARAMS = "small-size-ratio=0.3,ghost-size-ratio=0.5,move-to-main-threshold=1"


def test_s3fifo_hand_traced():
    # C=10: small 1, main 9, ghost 9
    p = make_policy("s3fifo", 10)
    assert (p.small_size, p.main_size, p.ghost_size) == (1, 9, 9)
    p.py_get(1)                          # small [1]
    p.py_get(2)                          # small full before any eviction: main [2]
    for b in range(3, 11):
        p.py_get(b)                      # main [10..2]
    q = p.queues()
    assert q["small"] == [1] and q["main"] == list(range(10, 1, -1))
    p.py_get(1)                          # freq(1) = 1
    p.py_get(2)                          # freq(2) = 1
    # main holds 9 = its size and small is not empty: evict from small; 1 (freq 1 < 2) -> ghost
    assert p.py_evict() == 1
    assert p.queues()["ghost"] == [1]
    p.py_get(11)                         # after the first eviction new ids go to small
    assert p.queues()["small"] == [11]
    assert p.py_evict() == 11            # small again (main not over its size)
    p.py_get(1)                          # ghost hit: straight to main's head, ghost forgets it
    q = p.queues()
    assert q["main"][0] == 1 and 1 not in q["ghost"]
    # main is 10 > 9 now: its tail 2 (freq 1) is reinserted with freq 0, then 3 goes
    assert p.py_evict() == 3
    assert p.queues()["main"][0] == 2 and p.queues()["freq"][2] == 0


def test_s3fifo_promotes_pinned_but_never_evicts_it():
    p = make_policy("s3fifo", 10)
    for b in range(1, 11):
        p.py_get(b)
    p.py_evict()                          # has evicted: new ids go to small
    for b in (21, 22):
        p.py_get(b)
    q = p.queues()
    small = q["small"]
    p.py_pin(small[-1])                   # the small tail is pinned
    v = p.py_evict()
    assert v != small[-1] and p.py_find(small[-1]) >= 0



class _EvictUntilOneLeaves:
    """libCacheSim's S3FIFO ``evict`` may only promote small-queue blocks to main; its ``get``
    loops until a block leaves, and so does this wrapper (what shadow's one ``evict`` does)."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def __getattr__(self, name):
        return getattr(self.cache, name)

    def evict(self, req) -> None:
        before = self.cache.get_n_obj()
        while self.cache.get_n_obj() == before:
            self.cache.evict(req)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [20, 32, 48])
def test_s3fifo_same_hits_as_libcachesim_larger_caches(capacity, seed):
    lcs = pytest.importorskip("libcachesim")
    from shadow.sim.reference.loop import RefCache
    from tests.sim._traces import next_access
    from tests.sim.test_vs_libcachesim import LibCacheSimAdapter

    rng = np.random.default_rng(100 + seed)
    trace = random_trace(rng, 200, n_roots=3, max_len=12, n_raw=4)
    ref = RefCache(LibCacheSimAdapter(_EvictUntilOneLeaves(lcs.S3FIFO(capacity))), capacity,
                   pin=False, cost_model="uniform")
    want = [(r.n_hits, r.n_prefix_hits, int(r.status == "skipped"))
            for r in (ref.serve(q, n) for q, n in zip(trace, next_access(trace)))]
    got, _, got_c, _, _, _ = run_both("s3fifo", "", capacity, trace, pin=False, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == ref.stats()["n_eviction"]
