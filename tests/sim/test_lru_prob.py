"""lru_prob: the shared checks, a hand-traced order, libCacheSim's threshold arithmetic, and the
PyPI libcachesim ``LRUProb`` (exact at ``prob=1``, hit ratios within a tolerance otherwise)."""

from __future__ import annotations


import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference.loop import RefCache
from shadow.sim.reference.lru_prob import threshold_of as ref_threshold_of
from shadow.sim.reference.random_compute import SplitMix64
from shadow.sim.registry import make_policy
from shadow.sim.policies.recency.lru_prob import threshold_of
from tests.sim._traces import batches_of, conversation, next_access, random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both

SIZES = (1024, 4096, 16384)
#: |shadow - libcachesim| block hit ratio allowed on the conversation trace.  The two draw from
#: different generators (splitmix64 here, libCacheSim's next_rand there), so they promote different
#: hits; seeds 1..5 of shadow's spread by at most 0.0006 at these sizes, libcachesim lies inside
#: that spread, and 0.003 is five times it.
TOLERANCE = 0.003


class TestLRUProb(PolicyMixin):
    NAME = "lru_prob"


class TestLRUProbOneInFive(PolicyMixin):
    NAME = "lru_prob"
    PARAMS = "prob=0.19,seed=11"


def test_lru_prob_eviction_order_hand_traced():
    draws = SplitMix64(1)
    assert [draws.next() % 2 for _ in range(4)] == [1, 1, 0, 1]   # seed 1: promote 3rd hit only
    p = make_policy("lru_prob", 3)
    for b in (1, 2, 3):
        p.py_get(b)                  # order (head first): 3 2 1
    p.py_get(1)                      # draw 1: stays
    p.py_get(1)                      # draw 1: stays
    p.py_get(2)                      # draw 0: to the head
    assert p.order() == [2, 3, 1]
    assert p.py_evict() == 1         # the tail goes, though it was hit twice
    p.py_get(4)                      # 4 2 3
    p.py_get(3)                      # draw 1: stays at the tail
    p.py_pin(3)
    assert p.py_evict() == 2         # 3 is pinned: the next from the tail goes
    assert p.order() == [4, 3]


@pytest.mark.parametrize("prob,threshold", [(0.5, 2), (1.0, 1), (0.3, 3), (0.25, 4), (0.2, 4),
                                            (0.1, 9), (0.01, 100)])
def test_threshold_is_libcachesims(prob, threshold):
    # NOTE: libCacheSim reads prob as a float32 (strtof) and truncates 1/prob into an int
    assert threshold_of(prob) == ref_threshold_of(prob) == threshold


@pytest.mark.parametrize("bad", ["prob=0", "prob=-0.5", "prob=1.5", "prob=1e-12", "seed=-1"])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ShadowError, match="lru_prob"):
        make_policy("lru_prob", 8, bad)


# ---- the PyPI libcachesim package's LRUProb ----

lcs = pytest.importorskip("libcachesim")

from tests.sim.test_vs_libcachesim import LibCacheSimAdapter  # noqa: E402


class _LRUProbAdapter(LibCacheSimAdapter):
    """The victim is ``to_evict``'s (LRU_Prob's tail): no probe over the resident set."""

    def evict(self, acc, pinned: set[int]) -> int:
        assert not pinned, "libcachesim cannot honour pins"
        r = self._req(acc.block_id, acc)
        victim = self.cache.to_evict(r).obj_id
        self.cache.evict(r)
        self.resident.discard(victim)
        return victim


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("capacity", [4, 9, 23])
def test_prob_one_is_libcachesims_per_request(capacity, seed):
    """``prob=1`` draws nothing that matters (threshold 1): every hit and eviction is
    libcachesim's."""
    trace = random_trace(np.random.default_rng(seed), 120, n_roots=3, max_len=10, n_raw=4)
    ref = RefCache(_LRUProbAdapter(lcs.LRUProb(capacity, prob=1.0)), capacity, pin=False)
    want = [(s.n_hits, s.n_prefix_hits, int(s.status == "skipped"))
            for s in (ref.serve(r, n) for r, n in zip(trace, next_access(trace)))]
    got, _, got_c, _, _, _ = run_both("lru_prob", "prob=1", capacity, trace, pin=False,
                                      cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == ref.stats()["n_eviction"]


@pytest.mark.slow
@pytest.mark.parametrize("prob", [0.5, 0.2])
def test_hit_ratio_close_to_libcachesim_on_conversation(prob):
    """Pins off, prefix-order replay, the whole conversation trace at three sizes."""
    trace = conversation()
    sim = Simulator([CacheSpec("lru_prob", c, f"prob={prob}") for c in SIZES], pin=False,
                    replay_order="prefix-order")
    for b in batches_of(trace, size=700):
        sim.feed(b)
    got = {r.spec.capacity: r.block_hit_ratio for r in sim.results()}
    for c in SIZES:
        ref = RefCache(_LRUProbAdapter(lcs.LRUProb(c, prob=prob)), c, pin=False,
                       replay_order="prefix-order")
        for req in trace:
            ref.serve(req)
        st = ref.stats()
        want = st["n_hits"] / st["n_blocks"]
        assert abs(got[c] - want) <= TOLERANCE, (c, got[c], want)


def _promoted_share(get, is_resident, n: int = 4000) -> float:
    """In a 2-block cache: hit the tail, insert a new block, and count how often the hit block
    survives (it does iff the hit promoted it)."""
    get(1)
    get(2)
    tail, promoted = 1, 0
    for new in range(3, 3 + n):
        get(tail)
        get(new)
        if is_resident(tail):
            promoted += 1
        else:
            tail = new - 1
    return promoted / n


@pytest.mark.slow
@pytest.mark.parametrize("prob", [0.5, 0.2, 0.1])
def test_share_of_promoted_hits_is_libcachesims(prob):
    """Both promote ``1/threshold`` of hits (0.2: 1/4, 0.1: 1/9), within 0.03 (4000 hits: over
    four standard deviations)."""
    c = lcs.LRUProb(2, prob=prob)

    def req(b: int):
        r = lcs.Request()
        r.obj_id, r.obj_size = b, 1
        return r

    want = _promoted_share(lambda b: c.get(req(b)), lambda b: c.find(req(b), False) is not None)
    p = make_policy("lru_prob", 2, f"prob={prob}")
    got = _promoted_share(lambda b: p.py_get(b), lambda b: p.py_find(b) >= 0)
    expect = 1 / threshold_of(prob)
    assert abs(want - expect) < 0.03 and abs(got - expect) < 0.03, (want, got, expect)
