"""lhd: shared mixin (exact differential vs the reference, same splitmix64 draws and float32
steps; a short reconfiguration interval so that reconfigurations, the age coarsening and the
switch to 32 candidates happen on the mixin's small traces), hand-traced initial densities,
rank, reconfiguration and age coarsening, pins, bad parameters, and hit ratios against
libcachesim's ``LHD``."""

from __future__ import annotations

import functools

import pytest

from shadow.errors import ShadowError
from shadow.sim.reference.lhd import f32
from shadow.sim.registry import make_policy
from tests.sim._traces import SYNTHETIC, conversation, hit_ratios, next_access, read_jsonl
from tests.sim.policy_mixin import PolicyMixin


class TestLHD(PolicyMixin):
    NAME = "lhd"


class TestLHDReconfiguring(PolicyMixin):
    NAME = "lhd"
    #: 6 reconfigurations (the coarsening adapts at the 6th) within 48 accesses
    PARAMS = "reconfigure-interval=8,seed=7"


def test_initial_densities_are_libcachesim_gdsf_like():
    # class h here is libCacheSim's 16 + h: density (17 + h) / (age + 1), float32
    p = make_policy("lhd", 4)
    for h, a in ((0, 0), (0, 1), (0, 2), (7, 6), (15, 0), (15, 19998), (3, 19999)):
        assert p.table("density", h, a) == f32((17 + h) / (a + 1))
    assert p.table("density", 0, 2) == f32(17 / 3)
    assert p.table("hits", 5, 5) == 0.0 and p.table("evictions", 5, 5) == 0.0


def test_rank_hand_traced():
    # 3 slots: budget int(3 * 0.01f) = 0 explorers; shift 10: ages count 1024 accesses
    p = make_policy("lhd", 3)
    for b in (1, 2, 3):
        p.py_get(b)                        # clock 0, 1, 2: inserts, class 0
    for _ in range(2045):
        p.py_get(3)                        # clock 3 .. 2047
    assert p.state()["clock"] == 2048
    # block 1: age 2048 >> 10 = 2, class 0: 17/3; block 2: age 2047 >> 10 = 1: 17/2
    assert p.tag(1) == (0, 0, 0, False) and p.rank(1) == f32(17 / 3)
    assert p.tag(2) == (1, 0, 0, False) and p.rank(2) == f32(17 / 2)
    # block 3: its first hit (age 0, class 0) counted at (0, 0), then class 15 (0 + 0):
    # every later hit at (15, 0); rank 32 / 1
    assert p.tag(3) == (2047, 0, 15, False) and p.rank(3) == 32.0
    assert p.table("hits", 0, 0) == 1.0 and p.table("hits", 15, 0) == 2044.0
    assert p.state()["ring"] == [0] * 8     # no insert ranked below ewmaVictim (0)
    # 8 draws over 3 blocks: the lowest rank, block 1, goes; its eviction counted at (0, 2)
    assert p.py_evict() == 1
    assert p.table("evictions", 0, 2) == 1.0
    assert p.state()["ewma_victim"] == f32(f32(0.9) * 0.0 + f32(1 - f32(0.9)) * f32(17 / 3))


def test_explorers_budget_and_bonus():
    # budget (int64)(C * 0.01f): 99 -> 0, 100 -> 1, 1000 -> 10 (1000 * 0.01f rounds to 10.0f)
    assert [make_policy("lhd", c).state()["explorer_budget"] for c in (99, 100, 1000)] == [0, 1, 10]
    p = make_policy("lhd", 1000)
    for b in range(1, 301):
        p.py_get(b)
    explorers = [b for b in range(1, 301) if p.tag(b)[3]]
    assert explorers and len(explorers) + p.state()["explorer_budget"] == 10
    b = explorers[0]
    assert p.rank(b) == p.table("density", 0, 0) + 1.0
    p.py_remove(b)                         # leaving returns its budget
    assert p.state()["explorer_budget"] == 10 - len(explorers) + 1


def test_reconfiguration_hand_traced():
    p = make_policy("lhd", 2, "reconfigure-interval=4")
    p.py_get(1)
    p.py_get(2)
    p.py_get(1)                            # hit at (0, 0), block 1 -> class 15
    p.py_get(2)                            # hit at (0, 0), 4th access: reconfigure
    s = p.state()
    assert s["n_reconf"] == 1 and s["shift"] == 10
    assert p.table("hits", 0, 0) == f32(2 * f32(0.9))
    # class 0: events only at age 0, all hits: density 1 there, 0 at every other modelled age
    assert p.table("density", 0, 0) == 1.0
    assert p.table("density", 0, 1) == 0.0 and p.table("density", 0, 19998) == 0.0
    assert p.table("density", 15, 0) == 0.0        # no events in class 15 yet
    assert p.table("density", 0, 19999) == f32(17 / 20000)   # never remodelled
    # the EWMA of the resident count: 0 * 0.9 + 2
    assert s["ewma_objects"] == 2.0 and s["ewma_mass"] == 1.0


def test_age_coarsening_at_the_sixth_reconfiguration():
    p = make_policy("lhd", 2, "reconfigure-interval=4")
    p.py_get(1)
    p.py_get(2)
    for _ in range(9):
        p.py_get(1)
        p.py_get(2)                        # 20 accesses: 5 reconfigurations
    assert p.state()["n_reconf"] == 5 and p.state()["shift"] == 10
    x = p.table("hits", 15, 0)
    for _ in range(2):
        p.py_get(1)
        p.py_get(2)                        # 4 more hits at (15, 0), then the 6th
    s = p.state()
    # numObjects = 2: 2 / (0.01f * 20000) = 0.01 -> the least s >= 1 with 2**s >= it: 1
    assert s["n_reconf"] == 6 and s["shift"] == 1
    # stretch by 2**9: age a takes age a >> 9's count / 512
    y = f32(f32(x + 4.0) * f32(0.9))
    for a in (0, 1, 300, 511):
        assert p.table("hits", 15, a) == f32(y / 512)
    assert p.table("hits", 15, 512) == 0.0
    # ages 0..511 with equal hits y/512 and no evictions: density ~ 2 / (513 - a)
    for a in (0, 255, 511):
        assert p.table("density", 15, a) == pytest.approx(2 / (513 - a), rel=1e-5)
    assert p.table("density", 15, 512) == 0.0
    # the EWMAs weigh 8 times more after the adaptation
    assert s["ewma_mass"] == pytest.approx(8 * sum(0.9 ** k for k in range(6)), rel=1e-6)
    # and the ages are now counted in steps of 2 accesses: block 1 untouched for 4 -> age 2
    p.py_get(2)
    p.py_get(2)
    p.py_get(2)
    assert (s["clock"] + 3 - p.tag(1)[0]) >> 1 == 2


def test_no_explorers_after_50_reconfigurations():
    # (the 32 candidates from then on are checked by the differential at interval 8)
    p = make_policy("lhd", 200, "reconfigure-interval=2")
    for t in range(102):
        p.py_get(1 + t % 150)
    assert p.state()["n_reconf"] == 51
    budget = p.state()["explorer_budget"]
    for b in range(1000, 1400):
        p.py_get(b)
    assert not any(p.tag(b)[3] for b in range(1000, 1400) if p.py_find(b) >= 0)
    assert p.state()["explorer_budget"] >= budget


def test_pins_no_self_eviction_on_conversation_trace():
    from shadow.sim import CacheSpec, Simulator
    from shadow.trace.batch import Batch

    trace = conversation()[:3000]
    for pin, want_zero in ((True, True), (False, False)):
        sim = Simulator([CacheSpec("lhd", 512, "")], pin=pin)
        sim.feed(Batch.from_lists(trace, next_access=next_access(trace)))
        r = sim.results()[0]
        assert r.error is None and r.n_eviction > 0
        assert (r.n_self_eviction == 0) == want_zero, (pin, r.n_self_eviction)


def test_bad_parameters_are_clear_errors():
    for bad, word in (("reconfigure-interval=0", "reconfigure-interval"),
                      (f"reconfigure-interval={2**40 + 1}", "reconfigure-interval"),
                      ("seed=-1", "seed"), ("associativity=4", "associativity")):
        with pytest.raises(ShadowError, match=word) as exc:
            make_policy("lhd", 8, bad)
        assert "\n" not in str(exc.value)
        assert "lhd" in str(exc.value) or "unknown parameter" in str(exc.value)


# ---- against libcachesim's LHD ----------------------------------------------------------------

#: |shadow - libcachesim| block hit ratio allowed.  The draws differ: shadow's are splitmix64
#: (seed 1) over the resident blocks, one stream for candidates and explore draws;
#: libCacheSim's are ``next_rand() % n`` from its process-wide generator over the same dense
#: order.  Measured (conversation | synthetic): libcachesim 0.04525, 0.18593, 0.33324 |
#: 0.08582, 0.38572, 0.63124 and shadow 0.04522, 0.18634, 0.33300 | 0.08564, 0.38517, 0.63133
#: at 1024, 8192 and 32768 blocks (at most 0.00055 apart); shadow's seeds 1-3 move it by at
#: most 0.0008.  0.001 covers that and still tells lru (0.0044 lower at 8192, 0.0017 higher at
#: 32768 on conversation), gdsf (0.0067 higher at 8192) and random apart.  Neither trace reaches
#: a reconfiguration (2**20 accesses): this checks the sampling, the initial densities, the
#: explorers and the admission ring; the reconfigurations are checked against the reference
#: and, on a longer trace, by the slow test below.
TOLERANCE = 0.001
SIZES = (1024, 8192, 32768)
TRACES = {"conversation": conversation, "synthetic": functools.lru_cache(None)(
    lambda: read_jsonl(SYNTHETIC))}


def _lcs_hit_ratio(capacity: int, trace: list[list[int]]) -> float:
    """libcachesim's LHD through the unpinned reference loop, prefix order: its own victim
    (``to_evict``) evicted by its ``evict``, which records the eviction as LHD's ``replaced``."""
    lcs = pytest.importorskip("libcachesim")
    from shadow.sim.reference.loop import RefCache
    # NOTE: that adapter evicts ``to_evict``'s candidate with ``evict``, whatever the policy
    from tests.sim.test_lru_prob import _LRUProbAdapter as ToEvictAdapter

    ref = RefCache(ToEvictAdapter(lcs.LHD(capacity)), capacity, pin=False,
                   replay_order="prefix-order")
    for req, nxt in zip(trace, next_access(trace)):
        ref.serve(req, nxt)
    s = ref.stats()
    return s["n_hits"] / s["n_blocks"]


@functools.lru_cache(maxsize=None)
def _shadow_hit_ratios(trace_name: str) -> dict[int, float]:
    return hit_ratios("lhd", SIZES, TRACES[trace_name]())


@pytest.mark.slow
@pytest.mark.parametrize("capacity", SIZES)
@pytest.mark.parametrize("trace_name", sorted(TRACES))
def test_hit_ratio_near_libcachesim_lhd(trace_name, capacity):
    want = _lcs_hit_ratio(capacity, TRACES[trace_name]())
    got = _shadow_hit_ratios(trace_name)[capacity]
    assert abs(got - want) <= TOLERANCE, (trace_name, capacity, got, want)


@pytest.mark.slow
def test_hit_ratio_near_libcachesim_lhd_past_two_reconfigurations():
    # the conversation trace 8 times over, each copy with new ids: 2308000 accesses, so both
    # run 2 reconfigurations (at 2**20 and 2**21).  Measured: libcachesim 0.18772, shadow
    # 0.18764 (seeds 1-3: 0.18764 .. 0.18779), lru 0.18156.
    trace = [[b + k * 200_000 for b in r] for k in range(8) for r in conversation()]
    want = _lcs_hit_ratio(8192, trace)
    got = hit_ratios("lhd", (8192,), trace)[8192]
    assert abs(got - want) <= TOLERANCE, (got, want)
