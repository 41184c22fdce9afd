"""random: shared mixin (exact differential vs the reference, same splitmix64 draws), a hand-traced
run with the seed's first draws, and hit ratios against libcachesim's ``Random`` on the Mooncake
conversation trace."""

from __future__ import annotations

import functools

import pytest

from shadow.sim.reference import make_reference
from shadow.sim.reference.random_compute import SplitMix64
from shadow.sim.registry import make_policy
from tests.sim._traces import conversation, hit_ratios
from tests.sim.policy_mixin import PolicyMixin



class TestRandom(PolicyMixin):
    NAME = "random"


class TestRandomOtherSeed(PolicyMixin):
    NAME = "random"
    PARAMS = "seed=12345"


def test_first_draws_of_seed_1():
    # splitmix64 from state 1; a draw over n items is ((x >> 32) * n) >> 32
    r = SplitMix64(1)
    xs = [r.next() for _ in range(5)]
    assert xs == [0x910A2DEC89025CC1, 0xBEEB8DA1658EEC67, 0xF893A2EEFB32555E,
                  0x71C18690EE42C90B, 0x71BB54D8D101B5B9]
    assert [((x >> 32) * 4) >> 32 for x in xs[:1]] == [2]
    assert [((x >> 32) * 3) >> 32 for x in xs[1:4]] == [2, 2, 1]
    assert ((xs[4] >> 32) * 2) >> 32 == 0


def test_eviction_order_hand_traced():
    p = make_policy("random", 4)                     # seed=1
    for b in (1, 2, 3, 4):
        p.py_get(b)
    assert p.population() == [1, 2, 3, 4]
    assert p.py_evict() == 3                         # draw 1: index 2 of 4; 4 fills the hole
    assert p.population() == [1, 2, 4]
    assert p.py_get(1)                               # a hit changes nothing
    assert p.py_evict() == 4                         # draw 2: index 2 of 3
    p.py_get(5)                                      # [1, 2, 5]
    p.py_pin(5)
    assert p.py_evict() == 2                         # draw 3: index 2 (5, pinned: drawn again),
    assert p.population() == [1, 5]                  # draw 4: index 1
    p.py_pin(1)
    assert p.py_evict() == 1                         # all pinned: the plain draw 5, index 0 of 2
    assert p.population() == [5]


def test_all_draws_pinned_takes_the_first_unpinned_in_population_order():
    # 200 resident, one unpinned: the 64 draws of one candidate all miss it with odds
    # (199/200)**64 = 0.73, and then the scan finds it; either way it is the victim
    p = make_policy("random", 200, "seed=3")
    r = make_reference("random", 200, "seed=3")
    for b in range(1, 201):
        p.py_get(b)
        r.insert(b, None)
    for b in range(1, 201):
        if b != 77:
            p.py_pin(b)
    pinned = set(range(1, 201)) - {77}
    assert p.py_evict() == 77 == r.evict(None, pinned)
    assert p.py_evict() == r.evict(None, pinned - {77})    # all pinned: a plain draw
    assert p.population() == r.dense.live()


def test_bad_seed_is_a_clear_error():
    from shadow.errors import ShadowError

    for bad in ("seed=-1", f"seed={2**64}", "seed=x", "n-samples=3"):
        with pytest.raises(ShadowError):
            make_policy("random", 8, bad)


# ---- against libcachesim's Random ------------------------------------------------------------

#: |shadow - libcachesim| hit ratio allowed.  The draws differ: shadow's are uniform over the
#: resident blocks (splitmix64, seed 1), libCacheSim's pick a random non-empty hash bucket and
#: take its chain's head (an object deeper in a chain is never drawn; the draws are not uniform).
#: Measured: shadow's ratio moves by at most 0.0011 over seeds 1-6, and libcachesim is lower by
#: 0.0015, 0.0030 and 0.0044 at 1024, 8192 and 32768 blocks; 0.006 covers that and still tells
#: fifo (0.017 and 0.031 higher at 8192 and 32768), lru and mru apart.
TOLERANCE = 0.006
SIZES = (1024, 8192, 32768)


def _lcs_hit_ratio(capacity: int) -> float:
    lcs = pytest.importorskip("libcachesim")
    from tests.sim.test_vs_libcachesim import own_victim_hit_ratio

    return own_victim_hit_ratio(lcs.Random(capacity), capacity, conversation())


@functools.lru_cache(maxsize=None)
def _shadow_hit_ratios() -> dict[int, float]:
    return hit_ratios("random", SIZES, conversation())


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
def test_hit_ratio_near_libcachesim_random_on_conversation_trace(capacity):
    want = _lcs_hit_ratio(capacity)
    got = _shadow_hit_ratios()[capacity]
    assert abs(got - want) <= TOLERANCE, (capacity, got, want)
