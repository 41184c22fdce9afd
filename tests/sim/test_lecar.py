"""lecar: shared mixin (exact differential vs the reference, same splitmix64 draws), hand-traced
rules (agreeing experts, the draw, the ghost that penalises its expert, renormalised weights),
the one-expert settings equal to lru and lfu, pins, bad parameters, and hit ratios against
libcachesim's ``LeCaR`` on the Mooncake conversation trace."""

from __future__ import annotations

import functools
import math
from collections import OrderedDict

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.reference.lfu import LFU as RefLFU
from shadow.sim.registry import make_policy
from tests.sim._traces import conversation, hit_ratios, random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestLeCaR(PolicyMixin):
    NAME = "lecar"


class TestLeCaRFixedWeights(PolicyMixin):
    NAME = "lecar"
    PARAMS = "update-weight=0,lru-weight=0.3,seed=7"


def _penalised(w: float, other: float, t: int, capacity: int, lr: float = 0.45):
    """libCacheSim's update_weight, written out: (penalised weight, other weight)."""
    w = w * math.exp(-lr * (0.005 ** (1.0 / capacity)) ** t) + 1e-10
    s = w + other + 2e-10
    return w / s, (other + 1e-10) / s


def test_hand_traced_rules():
    # seed 1's first outputs x give x % 100 = 65, 19, 90, ... (reference/random_compute.SplitMix64)
    p = make_policy("lecar", 4)
    p.py_get(1, vtime=1)
    p.py_get(1, vtime=2)
    p.py_get(1, vtime=3)                  # 1: freq 3
    for t, b in ((4, 2), (5, 3), (6, 4)):
        p.py_get(b, vtime=t)
    assert p.lru_order() == [4, 3, 2, 1]
    assert p.buckets() == [(1, [2, 3, 4]), (3, [1])]
    # LRU's candidate 1, LFU's 2: the draw 0.65 >= w_lru 0.5 picks LFU; 2 enters LFU's ghost
    assert p.py_evict(vtime=7) == 2
    assert p.ghosts() == {"lru": [], "lfu": [2]}
    p.py_get(5, vtime=8)
    # candidates 1 (LRU) and 3 (LFU): the draw 0.19 < 0.5 picks LRU; 1 enters LRU's ghost
    assert p.py_evict(vtime=9) == 1
    assert p.ghosts() == {"lru": [1], "lfu": [2]}
    assert (p.w_lru, p.w_lfu) == (0.5, 0.5)
    # 2 comes back 3 gets after LFU evicted it: LFU is penalised, the weights renormalise
    p.py_get(2, vtime=10)
    w_lfu, w_lru = _penalised(0.5, 0.5, 3, 4)
    assert (p.w_lru, p.w_lfu) == (w_lru, w_lfu)
    assert w_lru > 0.5 > w_lfu and abs(w_lru + w_lfu - 1.0) < 1e-9    # (2e-10 of s)
    assert p.ghosts() == {"lru": [1], "lfu": []}
    # both experts name 3 (LRU tail, front of bucket 1): it goes without a draw or a ghost
    assert p.lru_order() == [2, 5, 4, 3]
    assert p.py_evict(vtime=11) == 3
    assert p.ghosts() == {"lru": [1], "lfu": []}
    # 1 comes back 3 gets after LRU evicted it: now LRU is penalised
    p.py_get(1, vtime=12)
    w_lru2, w_lfu2 = _penalised(w_lru, w_lfu, 3, 4)
    assert (p.w_lru, p.w_lfu) == (w_lru2, w_lfu2)
    # both name 4 again (LRU tail, front of bucket 1)
    assert p.lru_order() == [1, 2, 5, 4] and p.buckets()[0] == (1, [4, 5, 2, 1])
    assert p.py_evict(vtime=13) == 4
    for t, b in ((14, 5), (15, 5), (16, 2), (17, 1)):
        p.py_get(b, vtime=t)
    assert p.lru_order() == [1, 2, 5] and p.buckets() == [(2, [2, 1]), (3, [5])]
    # candidates 5 (LRU) and 2 (LFU): the agreeing evictions drew nothing, so this is the
    # third draw, 0.90 >= w_lru: LFU's 2
    assert p.py_evict(vtime=18) == 2
    assert p.ghosts() == {"lru": [], "lfu": [2]}


def test_older_ghost_hits_teach_less_and_ghosts_are_bounded():
    # dr ** t shrinks the penalty of an id that stayed long in the ghost
    near = _penalised(0.5, 0.5, 1, 8)[0]
    far = _penalised(0.5, 0.5, 800, 8)[0]
    assert near < far < 0.5
    # each ghost holds at most C // 2 ids (both reach it on a long random run)
    p = make_policy("lecar", 7)
    rng = np.random.default_rng(5)
    most = {"lru": 0, "lfu": 0}
    for t in range(1, 3000):
        p.py_get(int(rng.zipf(1.3)) % 40 + 1, vtime=t)
        for e, ids in p.ghosts().items():
            assert len(ids) <= 3 and not set(ids) & set(p.resident_ids())
            most[e] = max(most[e], len(ids))
    assert most == {"lru": 3, "lfu": 3}


@pytest.mark.slow
@pytest.mark.parametrize("pin", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_one_expert_settings_are_lru_and_lfu(pin, seed):
    # lru-weight=1 never draws below it (x % 100 / 100 < 1): always LRU's candidate; 0: LFU's
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 150, n_roots=3, max_len=10, n_raw=4)
    for params, twin in (("lru-weight=1,update-weight=0", "lru"),
                         ("lru-weight=0,update-weight=0", "lfu")):
        got = run_both("lecar", params, 13, trace, pin=pin)[0]
        want = run_both(twin, "", 13, trace, pin=pin)[0]
        assert got == want, params


def test_pins_are_skipped_by_both_experts():
    p = make_policy("lecar", 4, "lru-weight=1,update-weight=0")
    for t, b in enumerate((1, 2, 3, 4), 1):
        p.py_get(b, vtime=t)
    p.py_pin(1)
    assert p.py_evict(vtime=5) == 2       # LRU passes the pinned tail
    q = make_policy("lecar", 4, "lru-weight=0,update-weight=0")
    for t, b in enumerate((1, 2, 3, 4), 1):
        q.py_get(b, vtime=t)
    q.py_get(3, vtime=5)
    q.py_pin(1)
    q.py_pin(2)
    assert q.py_evict(vtime=6) == 4       # LFU passes bucket 1's pinned front ids
    q.py_pin(3)
    assert q.py_evict(vtime=7) == 1       # all pinned: the plain front of bucket 1


def assert_no_self_eviction_with_pins(name: str) -> None:
    """``name`` with pins on evicts none of a request's own blocks (and only when asked) over
    the first 3000 requests of the conversation trace, at 256 and 2048 blocks."""
    from shadow.sim import CacheSpec, Simulator
    from tests.sim._traces import batches_of

    sim = Simulator([CacheSpec(name, c) for c in (256, 2048)], pin=True)
    for b in batches_of(conversation()[:3000], size=1000):
        sim.feed(b)
    for r in sim.results():
        assert r.error is None and r.n_eviction > 0
        assert r.n_self_eviction == 0 and r.n_unexpected_eviction == 0


def test_no_self_eviction_with_pins_on_the_conversation_trace():
    assert_no_self_eviction_with_pins("lecar")


@pytest.mark.parametrize("bad", ["learning-rate=-0.1", "learning-rate=inf", "lru-weight=1.5",
                                 "lru-weight=-0.01", "update-weight=2", "seed=-1",
                                 "learning_rate=0.1"])
def test_bad_parameters_are_one_line_errors(bad):
    with pytest.raises(ShadowError, match="lecar") as e:
        make_policy("lecar", 8, bad)
    assert "\n" not in str(e.value)


# ---- against libcachesim's LeCaR ---------------------------------------------------------------

def _victim_adapter() -> type:
    """libcachesim's LeCaR with its victim named: its ``evict`` takes the LRU tail or the front
    of the lowest frequency bucket, so the adapter keeps both orders (a recency OrderedDict and
    the reference LFU) and asks which of the two left.  NOTE: ``to_evict`` cannot name it:
    LeCaR.c's evict overwrites the candidate that to_evict drew with the LRU tail."""
    from tests.sim.test_vs_libcachesim import LibCacheSimAdapter

    class LeCaRVictimAdapter(LibCacheSimAdapter):
        def __init__(self, cache) -> None:
            super().__init__(cache)
            self.lru: OrderedDict[int, None] = OrderedDict()
            self.lfu = RefLFU(0, {})

        def hit(self, b: int, acc) -> None:
            super().hit(b, acc)
            self.lru.move_to_end(b)
            self.lfu.hit(b)

        def insert(self, b: int, acc) -> None:
            super().insert(b, acc)
            self.lru[b] = None
            self.lfu.insert(b)

        def evict(self, acc, pinned: set[int]) -> int:
            candidates = {next(iter(self.lru)), self.lfu.candidate()}
            self.cache.evict(self._req(acc.block_id, acc))
            gone = [b for b in candidates if not self.find(b)]
            assert len(gone) == 1, (candidates, gone)
            self.resident.discard(gone[0])
            del self.lru[gone[0]]
            self.lfu.remove(gone[0])
            return gone[0]

    return LeCaRVictimAdapter


#: |shadow - libcachesim| block hit ratio allowed.  The draws differ (splitmix64 with seed 1 here,
#: libCacheSim's own next_rand there), so the experts' choices do too.  Measured (pins off,
#: prefix order): libcachesim 0.04546, 0.18324, 0.33405 and shadow 0.04485, 0.18296, 0.33396 at
#: 1024, 8192 and 32768 blocks (at most 0.00061 apart); shadow's seeds 1-3 spread 0.00045,
#: 0.00068 and 0.00012.  0.001 covers that and tells lfu (0.0033 to 0.065 away) and arc apart;
#: lru and lecar without learning sit within it at 1024 and 32768 (on this trace the two experts
#: mostly name the same block), not at 8192 (0.0017 and 0.0015 below libcachesim).
TOLERANCE = 0.001
SIZES = (1024, 8192, 32768)


@functools.lru_cache(maxsize=None)
def _shadow_hit_ratios() -> dict[int, float]:
    return hit_ratios("lecar", SIZES, conversation())


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_hit_ratio_near_libcachesim_lecar_on_conversation_trace(capacity):
    lcs = pytest.importorskip("libcachesim")
    from tests.sim.test_vs_libcachesim import own_victim_hit_ratio

    want = own_victim_hit_ratio(lcs.LeCaR(capacity), capacity, conversation(),
                                adapter=_victim_adapter())
    got = _shadow_hit_ratios()[capacity]
    assert abs(got - want) <= TOLERANCE, (capacity, got, want)
