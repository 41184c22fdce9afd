"""wtinylfu: shared mixin, hand-traced rules (window overflow into main, strictly-greater
admission, sketch halving, pins), the sketch's hash, bad parameters, and per-request equality
with libcachesim's ``WTinyLFU`` where the two size their parts alike."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.policies.frequency.wtinylfu import py_xxh64_u64
from shadow.sim.reference.wtinylfu import SEED0, SEED1, xxh64_u64
from shadow.sim.registry import make_policy
from tests.sim._traces import ROOT, random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestWTinyLFU(PolicyMixin):
    NAME = "wtinylfu"


class TestWTinyLFUWideWindow(PolicyMixin):
    NAME = "wtinylfu"
    PARAMS = "window-size=0.3"


def _filled10():
    """C = 10: window 1, main 9 (probation 2, protected 7); 1..10 inserted, then one eviction:
    1, 2 move into probation and 3..9 into protected while main has room (each added to the
    sketch: estimate 2), then 10 (estimate 1) loses to probation's tail 1 (2) and leaves."""
    p = make_policy("wtinylfu", 10)
    assert (p.window_cap, p.main_cap, p.seg_sizes) == (1, 9, [2, 7])
    for b in range(1, 11):
        p.py_get(b)
    assert p.queues() == {"window": list(range(10, 0, -1)), "probation": [], "protected": []}
    assert p.py_evict() == 10
    assert p.queues() == {"window": [], "probation": [2, 1], "protected": [9, 8, 7, 6, 5, 4, 3]}
    assert [p.estimate(b) for b in range(1, 11)] == [2] * 10
    return p


def test_window_overflows_into_main_while_main_has_room():
    _filled10()


def test_admission_needs_a_strictly_greater_estimate():
    p = _filled10()
    p.py_get(3)                          # protected hit: to its head, estimate 3
    for b in (1, 2, 4, 5, 6, 7, 8, 9):   # each probation hit cools protected's tail down
        p.py_get(b)
    q = p.queues()
    assert q["probation"] == [1, 3] and q["protected"] == [9, 8, 7, 6, 5, 4, 2]
    assert p.estimate(3) == 3
    p.py_get(10)                         # insert: estimate 3, equal to the victim 3's
    assert p.estimate(10) == 3
    assert p.py_evict() == 10            # 3 > 3 is false: the candidate leaves (estimate 4)
    p.py_get(10)                         # estimate 5
    assert p.py_evict() == 3             # 5 > 3: main's victim leaves, 10 enters probation
    assert p.queues()["probation"] == [10, 1]
    assert p.estimate(10) == 6           # the candidate is added after the decision


def test_sketch_halves_after_32_main_size_main_hits():
    p = _filled10()
    assert p.max_hits == 32 * 9
    p.py_get(11)
    for _ in range(5):
        p.py_get(11)                     # window hits do not count
    assert p.main_hits == 0
    for _ in range(p.max_hits - 1):
        p.py_get(3)
    assert (p.main_hits, p.n_halvings, p.estimate(3)) == (287, 0, 2 + 287)
    p.py_get(3)                          # hit 288: counters halved, the count restarts
    assert (p.main_hits, p.n_halvings) == (0, 1)
    assert (p.estimate(3), p.estimate(1), p.estimate(11)) == (290 // 2, 1, 0)


def test_pins_window_candidate_and_main_victim():
    p = _filled10()
    p.py_get(11)                         # window [11]
    p.py_pin(11)
    p.py_pin(1)
    # the window has only pinned blocks: main's first unpinned from probation's tail
    assert p.py_evict() == 2
    p.py_get(12)                         # window [12 11], main 8 of 9
    # 12, the window's first unpinned from the LRU end, moves into main's room (probation
    # [12 1]); the window then has no candidate: main's first unpinned victim is 12
    assert p.py_evict() == 12
    assert p.queues()["probation"] == [1]
    for b in p.resident_ids():
        if b not in (1, 11):
            p.py_pin(b)
    # every block pinned: best effort takes the window's tail
    assert p.py_evict() == 11


def test_main_of_pinned_blocks_admits_nothing():
    p = make_policy("wtinylfu", 2)       # window 1, main 1 (probation 1, protected 0)
    p.py_get(1)
    p.py_get(2)
    assert p.py_evict() == 2             # 1 moves to main; 2 (1) loses to 1 (2)
    p.py_get(2)
    p.py_get(2)                          # window hit
    p.py_pin(1)
    assert p.py_evict() == 2             # main's only block is pinned: no admission


def test_capacity_one_has_no_main():
    p = make_policy("wtinylfu", 1)
    assert (p.window_cap, p.main_cap) == (1, 0)
    p.py_get(1)
    assert p.py_evict() == 1


def test_xxh64_matches_the_reference_and_the_spec():
    assert xxh64_u64(0, 0) == 0x34C96ACDCADB1BBB          # XXH64 of 8 zero bytes, seed 0
    rng = np.random.default_rng(5)
    for v in [1, 2, 2**31, 2**63 + 5, 2**64 - 1, *map(int, rng.integers(0, 2**62, 50))]:
        for seed in (SEED0, SEED1):
            assert py_xxh64_u64(v, seed) == xxh64_u64(v, seed)


@pytest.mark.parametrize("params,message", [
    ("window-size=0", "policy wtinylfu: window-size must be in (0, 1), got 0.0"),
    ("window-size=1", "policy wtinylfu: window-size must be in (0, 1), got 1.0"),
    ("main-cache=LRU", "policy wtinylfu: main-cache must be SLRU, got LRU"),
])
def test_bad_parameters(params, message):
    with pytest.raises(ShadowError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_policy("wtinylfu", 100, params)


@pytest.mark.slow
def test_cli_refuses_a_bad_window_in_one_line(tmp_path):
    out = tmp_path / "results.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-c", "8k", "-a", "wtinylfu",
                        "--algo-params", "wtinylfu:window-size=1.5", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["shadow: error: policy wtinylfu: window-size must be in (0, 1), got 1.5"]
    assert not out.exists()


# C >= 100 (a window of at least one block in libCacheSim) with floor(0.2 M) + floor(0.8 M) = M:
# libCacheSim sizes the parts as shadow does.
LCS_EXACT_CAPS = [101, 126, 202]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["prefix-order", "deepest-first"])
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("capacity", LCS_EXACT_CAPS)
def test_same_hits_as_libcachesim(capacity, seed, order):
    lcs_test = pytest.importorskip("tests.sim.test_vs_libcachesim")
    from shadow.sim.reference.loop import RefCache
    from tests.sim._traces import next_access

    rng = np.random.default_rng(300 + seed)
    trace = random_trace(rng, 700, n_roots=4 + seed, max_len=20, n_raw=4)
    ref = RefCache(lcs_test.LibCacheSimAdapter(lcs_test.LIBCACHESIM["wtinylfu"](capacity)),
                   capacity, pin=False, replay_order=order)
    want = [(s.n_hits, s.n_prefix_hits, int(s.status == "skipped"))
            for s in (ref.serve(r, n) for r, n in zip(trace, next_access(trace)))]
    got, _, got_c, _, _, _ = run_both("wtinylfu", "", capacity, trace, pin=False,
                                      replay_order=order, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == ref.stats()["n_eviction"]
    assert got_c["n_eviction"] > 0 and sum(h for h, _, _ in got) > 0


@pytest.mark.slow
def test_same_hits_as_libcachesim_through_a_halving():
    # 32 * 100 = 3200 main hits within the trace: the halving is on the compared path
    lcs_test = pytest.importorskip("tests.sim.test_vs_libcachesim")
    rng = np.random.default_rng(7)
    trace = random_trace(rng, 1200, n_roots=3, max_len=20, n_raw=3)
    want, want_stats = lcs_test._lcs_hits("wtinylfu", 101, trace)
    got, _, got_c, _, sim, _ = run_both("wtinylfu", "", 101, trace, pin=False,
                                        cost_model="uniform")
    assert sim.runs[0].policy.n_halvings >= 1
    assert got == want
    assert got_c["n_eviction"] == want_stats["n_eviction"]
