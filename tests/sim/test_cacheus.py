"""cacheus: shared mixin (exact differential vs the reference, same splitmix64 draws), hand-traced
rules (SR-LRU's demotion, its SR spill and SR growth, CR-LFU's tie-break, the weights, the
learning rate), pins, bad parameters, and hit ratios against libcachesim's ``Cacheus``."""

from __future__ import annotations

import functools
import math

import pytest

from shadow.errors import ShadowError
from shadow.sim.reference.cacheus import Cacheus as RefCacheus
from shadow.sim.reference.random_compute import SplitMix64
from shadow.sim.registry import make_policy
from tests.sim._traces import conversation, hit_ratios, next_access
from tests.sim.test_lecar import assert_no_self_eviction_with_pins
from tests.sim.policy_mixin import PolicyMixin

# seed 1's outputs x: x % 1000 = 465 (the first: lr = 0.001 + 0.465), then x % 100 = 19, 90, 35
LR0 = 0.466


class TestCacheus(PolicyMixin):
    NAME = "cacheus"


class TestCacheusOtherSeed(PolicyMixin):
    NAME = "cacheus"
    PARAMS = "seed=7"


def _gets(p, *ids, vtime: int = 1) -> None:
    # NOTE: vtime 1 (not a multiple of C) keeps the learning rate still in the traced rules
    for b in ids:
        p.py_get(b, vtime=vtime)


def test_seed_draws():
    r = SplitMix64(1)
    assert [r.next() % 1000] + [r.next() % 100 for _ in range(3)] == [465, 19, 90, 35]
    assert make_policy("cacheus", 4).learning() == (0.5, 0.5, LR0, 0)


def test_sr_lru_demotion_and_growth():
    p = make_policy("cacheus", 4)            # SR and R of 2, H of 3 ids
    _gets(p, 1, 2, 3, 4)
    assert p.lists()["sr"] == [4, 3, 2, 1] and p.lists()["r"] == []
    _gets(p, 3, 4)                           # hits in SR move to R's head
    assert p.lists()["sr"] == [2, 1] and p.lists()["r"] == [4, 3]
    _gets(p, 2)                              # R over its size: its tail 3 is demoted to SR
    assert p.lists()["sr"] == [3, 1] and p.lists()["r"] == [2, 4]
    assert p.marks(3) == (True, True) and p.counts() == (0, 1)
    # SR at its size: the experts' draw (0.19); both name 1 (SR's tail, bucket 1's back)
    assert p.py_evict(vtime=1) == 1
    assert p.history(1) == (1, True, False) and p.counts() == (1, 1)
    # 1 comes back from H: frequency 2, into R (demoting 4); it left new, so SR grows by
    # max(1, 1 // 1 + 0.5) = 1.5 -> 3 (truncated), R shrinks to C - 3
    _gets(p, 1)
    assert p.lists()["sr"] == [4, 3] and p.lists()["r"] == [1, 2]
    assert (p.sr_size, p.r_size) == (3, 1) and p.counts() == (1, 2)
    assert p.history(1) is None and p.buckets() == [(2, [3, 4, 2, 1])]


def test_sr_over_its_size_gives_its_tail_first_without_a_draw():
    p = make_policy("cacheus", 4)
    _gets(p, 1, 2, 3)
    assert p.py_evict(vtime=1) == 1          # SR holds 3 > 2: its tail goes, into H only
    assert p.lists()["h"] == [1] and p.lists()["g_lru"] == p.lists()["g_lfu"] == []
    # SR at its size: SR-LRU names 2, CR-LFU 3 (bucket 1's back); the first draw (0.19, the
    # spill drew none) is below w_lru = 0.5: 2 goes into LRU's ghost
    assert p.py_evict(vtime=1) == 2
    assert p.lists()["g_lru"] == [2]


def test_cr_lfu_tie_break_and_the_weights():
    p = make_policy("cacheus", 4)
    _gets(p, 1, 2, 1, 2, 3, 4)               # R [2 1] (frequency 2), SR [4 3] (frequency 1)
    # SR-LRU names 3; CR-LFU the newest arrival of the lowest frequency, 4; draw 0.19: LRU's
    assert p.py_evict(vtime=1) == 3
    _gets(p, 5)
    # SR-LRU 4, CR-LFU 5 (newest at frequency 1); draw 0.90 >= 0.5: LFU's
    assert p.py_evict(vtime=1) == 5
    assert p.lists()["g_lru"] == [3] and p.lists()["g_lfu"] == [5]
    assert p.learning()[:2] == (0.5, 0.5)
    # 3 misses from LRU's ghost: w_lru * exp(-lr), then renormalised
    _gets(p, 3)
    a = 0.5 * math.exp(-LR0)
    w_lru = a / (a + 0.5)
    assert p.learning()[:2] == (w_lru, 1.0 - w_lru) and p.lists()["g_lru"] == []
    # 3 was in H new with frequency 1: frequency 2 into R; SR grows by 1 (c_demoted 1 // c_new 2
    # + 0.5 < 1)
    assert p.buckets() == [(1, [4]), (2, [1, 2, 3])] and (p.sr_size, p.r_size) == (3, 1)
    assert p.py_evict(vtime=1) == 4          # both name 4 (the draw 0.35 is spent)
    _gets(p, 5)                              # from LFU's ghost: w_lfu * exp(-lr), renormalised
    b = (1.0 - w_lru) * math.exp(-LR0)
    assert p.learning()[:2] == (w_lru / (w_lru + b), 1.0 - w_lru / (w_lru + b))


def test_learning_rate_update_every_c_gets():
    p = make_policy("cacheus", 2)
    lr = [LR0]
    p.py_get(1, vtime=1)
    p.py_get(2, vtime=2)
    # hit rate 0 // 2 = 0, unchanged; lr moved (from 0): sign -1
    lr.append(lr[0] - abs(lr[0] * lr[0]))
    assert p.learning()[2] == lr[-1]
    p.py_get(1, vtime=3)
    p.py_get(2, vtime=4)
    # hit rate 2 // 2 = 1 (up) while lr went down: (1 - 0) / (lr1 - lr0) < 0, sign -1
    lr.append(lr[1] - abs(lr[1] * (lr[1] - lr[0])))
    assert p.learning()[2] == lr[-1]
    p.py_get(3, vtime=5)
    p.py_get(4, vtime=6)
    # rate down (0) while lr went down: the quotient is positive, sign +1
    lr.append(lr[2] + abs(lr[2] * (lr[2] - lr[1])))
    assert p.learning()[2] == lr[-1]


def test_learning_rate_unlearns_and_redraws():
    p = make_policy("cacheus", 2)
    t, b = 0, 10

    def interval(hit: bool) -> None:
        nonlocal t, b
        for _ in range(2):
            t += 1
            if not hit:
                b += 1
            p.py_get(b, vtime=t)

    # all-miss intervals: lr shrinks by ever smaller steps until it stops moving; from then on
    # each interval (rate 0) is one unlearning step
    while p.learning()[3] == 0:
        interval(False)
    frozen = p.learning()[2]
    for k in range(2, 6):
        interval(False)
        assert p.learning()[2:] == (frozen, k)
    interval(True)                           # a rise after 5 steps: nothing happens
    assert p.learning()[2:] == (frozen, 5)
    for _ in range(6):
        interval(False)
    assert p.learning()[3] == 11
    interval(True)                           # a rise after 10 or more: lr is drawn again
    lr, unlearn = p.learning()[2:]
    assert unlearn == 0 and lr != frozen
    assert abs((lr - 0.001) * 1000 - round((lr - 0.001) * 1000)) < 1e-9


def test_pins_are_skipped():
    p = make_policy("cacheus", 4)
    _gets(p, 1, 2, 3)
    p.py_pin(1)
    assert p.py_evict(vtime=1) == 2          # the SR spill passes the pinned tail
    q = make_policy("cacheus", 4)
    _gets(q, 1, 2, 1, 2, 3, 4)               # R [2 1], SR [4 3]
    for b in (3, 4):
        q.py_pin(b)
    # SR-LRU passes SR's pinned blocks to R's tail, 1; CR-LFU its pinned frequency-1 blocks to
    # bucket 2's back, 2; the draw 0.19 takes SR-LRU's
    assert q.py_evict(vtime=1) == 1
    q.py_pin(2)
    assert q.py_evict(vtime=1) == 4          # every block pinned: CR-LFU's plain 4 (draw 0.90)


def test_no_self_eviction_with_pins_on_the_conversation_trace():
    assert_no_self_eviction_with_pins("cacheus")


@pytest.mark.parametrize("bad", ["seed=-1", f"seed={2**64}", "seed=x", "learning-rate=0.1"])
def test_bad_parameters_are_one_line_errors(bad):
    with pytest.raises(ShadowError, match="cacheus") as e:
        make_policy("cacheus", 8, bad)
    assert "\n" not in str(e.value)


# ---- against libcachesim's Cacheus ---------------------------------------------------------

def _adapter() -> type:
    """libcachesim's Cacheus with its victim named by ``to_evict`` (Cacheus_evict takes the
    candidate it drew) and its SR spills, made inside ``get``, counted from ``n_obj``."""
    from tests.sim.test_vs_libcachesim import LibCacheSimAdapter

    class CacheusAdapter(LibCacheSimAdapter):
        def __len__(self) -> int:
            return self.cache.get_n_obj()

        def insert(self, b: int, acc) -> None:
            before = self.cache.get_n_obj()
            assert not self.cache.get(self._req(b, acc))
            self.spilled.extend([0] * (before + 1 - self.cache.get_n_obj()))

        def evict(self, acc, pinned: set[int]) -> int:
            req = self._req(acc.block_id, acc)
            victim = self.cache.to_evict(req).obj_id
            self.cache.evict(req)
            assert not self.find(victim)
            return victim

    return CacheusAdapter


SIZES = (1024, 8192, 32768)

#: |reference with libCacheSim's spill timing - libcachesim| hit ratio allowed.  The draws differ
#: (the first sets the learning rate, 0.001 to 1.0).  Measured (pins off, prefix order):
#: libcachesim 0.05793, 0.18175, 0.32025; the reference (eager_spill, seed 1) 0.05700, 0.18230,
#: 0.32531 at 1024, 8192 and 32768 blocks; its seeds 1-2 spread 0.0013, 0.0003, 0.0055.
EAGER_TOLERANCE = 0.006
#: |shadow - libcachesim|: shadow's cache fills all C slots (SR keeps what R does not use until
#: room is needed) where libCacheSim's spills SR at the insert; measured 0.05611, 0.18355, 0.32946
#: (seed 1; seeds 1-3 spread 0.0040, 0.0054, 0.0068): 0.0018, 0.0018, 0.0092 from libcachesim.
TOLERANCE = 0.012


@functools.lru_cache(maxsize=None)
def _lcs_hit_ratio(capacity: int) -> float:
    lcs = pytest.importorskip("libcachesim")
    from tests.sim.test_vs_libcachesim import own_victim_hit_ratio

    return own_victim_hit_ratio(lcs.Cacheus(capacity), capacity, conversation(),
                                adapter=_adapter(), verify=False)


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_libcachesim_timing_reference_near_libcachesim_cacheus(capacity):
    from shadow.sim.reference.loop import RefCache

    want = _lcs_hit_ratio(capacity)
    ref = RefCache(RefCacheus(capacity, 1, eager_spill=True), capacity, pin=False,
                   replay_order="prefix-order", verify=False)
    trace = conversation()
    for req, nxt in zip(trace, next_access(trace)):
        ref.serve(req, nxt)
    s = ref.stats()
    got = s["n_hits"] / s["n_blocks"]
    assert abs(got - want) <= EAGER_TOLERANCE, (capacity, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_hit_ratio_near_libcachesim_cacheus_on_conversation_trace(capacity):
    want = _lcs_hit_ratio(capacity)
    got = hit_ratios("cacheus", SIZES, conversation())[capacity]
    assert abs(got - want) <= TOLERANCE, (capacity, got, want)


def follow_libcachesim(n_gets: int) -> tuple[int, int]:
    """Serve ``n_gets`` gets of a skewed stream to libcachesim's Cacheus (64 blocks) and to the
    reference with libCacheSim's spill timing, the experts' choices made equal; assert the same
    hits and resident sets after every get; return (learned evictions, SR's size)."""
    import libcachesim as lcs
    import numpy as np
    from shadow.sim.reference.loop import Acc

    def req(b: int):
        r = lcs.Request()
        r.obj_id, r.obj_size = b, 1
        return r

    C, n_ids = 64, 300
    rng = np.random.default_rng(3)
    theirs, ours = lcs.Cacheus(C), RefCacheus(C, 1, eager_spill=True)
    learned = 0
    for t in range(1, n_gets + 1):
        b = int(rng.zipf(1.2)) % n_ids + 1
        acc = Acc(b, 1, 1.0, -1, t, t, 0)
        full_miss = not ours.find(b) and len(ours) >= C
        if full_miss:
            a = next(iter(ours.sr or ours.r))
        hit = theirs.get(req(b))
        assert hit == ours.find(b), t
        if hit:
            ours.hit(b, acc)
        else:
            if full_miss:
                learned += 1
                w = dict(ours.w)
                # NOTE: a weight of 1 (0) makes the draw take SR-LRU's (CR-LFU's) candidate
                ours.w["lru"] = 1.0 if theirs.find(req(a), False) is None else 0.0
                ours.evict(acc, set())
                ours.w = w
            ours.insert(b, acc)
            ours.spilled.clear()
        want = {x for x in range(1, n_ids + 1) if theirs.find(req(x), False) is not None}
        assert want == set(ours.sr) | set(ours.r), t
    return learned, ours.sr_size


@pytest.mark.slow
def test_libcachesim_timing_reference_follows_libcachesim_get_by_get():
    # With the experts' choices made equal (the draws differ), the reference with libCacheSim's
    # spill timing keeps libcachesim's resident set after every get, through SR's growth and
    # hundreds of learned evictions: what docs/policies/adaptive.md says SR-LRU does.  NOTE: in a fresh
    # process: libcachesim's SR-hit path reads the marks of an object just allocated in R (stale
    # memory, SR_LRU.c), so after other caches ran in the same process it may shrink SR once.
    pytest.importorskip("libcachesim")
    import subprocess
    import sys

    from tests.sim._traces import ROOT

    code = "from tests.sim.test_cacheus import follow_libcachesim as f; print(*f(1000))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    learned, sr_size = map(int, r.stdout.split())
    assert learned > 200 and sr_size > 32
