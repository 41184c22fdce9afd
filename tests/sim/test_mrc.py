"""The one-pass curve (shadow/sim/mrc) against its pure-Python references.

* The compiled :class:`StackPass` against :func:`stack_curve` (the plain list stack) on random
  traces: duplicate ids, lookup counts, anonymous slots, both replay orders, costs, a clock small
  enough to renumber every few requests, ids through the hash map.
* :func:`stack_curve` against :func:`discrete_curve` (the reference serve loop at every capacity
  from the largest request's need up): lru and vllm, pins on and off, both replay orders.  This is
  the claim that the curve is the simulation.
* Below that need the one pass is not the simulation (a smaller cache skips the request): shown
  on a hand-made trace, and the curve refuses such sizes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.cost.models import parse_cost_model
from shadow.sim.mrc.curve import Curve, parse_targets
from shadow.sim.mrc.reference import discrete_curve, stack_curve
from shadow.sim.mrc.stack import StackPass
from tests.tiers import unit_rows

POSITION = parse_cost_model("position")


def random_requests(seed: int, *, n: int = 60, n_ids: int = 30, dup: bool = False,
                    anonymous: bool = False, lookups: bool = False, big_ids: bool = False):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b = rng.randint(0, 8)
        if dup:
            ids = [rng.randint(1, n_ids) for _ in range(b)]
        else:
            ids = sorted(rng.sample(range(1, n_ids + 1), b))
        if big_ids:
            ids = [x * 0x9E3779B97F4A7C15 % (1 << 62) + 1 for x in ids]
        m = rng.randint(0, b) if lookups else b
        a = rng.randint(0, 3) if anonymous else 0
        out.append((ids, m, a))
    return out


def run_pass(requests, *, deepest_first=True, cost=None, min_times=1 << 16, batches=1):
    """The compiled pass over ``requests`` fed in ``batches`` pieces."""
    sp = StackPass(deepest_first, cost is not None, min_times)
    costs = np.ascontiguousarray((cost or parse_cost_model("uniform")).costs(64))
    step = max(1, -(-len(requests) // batches))
    for k in range(0, len(requests), step):
        part = requests[k:k + step]
        offs = np.cumsum([0] + [len(r[0]) for r in part]).astype(np.int64)
        ids = np.array([b for r in part for b in r[0]], dtype=np.int64)
        nm = np.array([r[1] for r in part], dtype=np.int64)
        na = np.array([r[2] for r in part], dtype=np.int64)
        sp.feed(offs, ids, nm, na, costs, k)
    return sp


def as_dict(arr) -> dict[int, float]:
    return {d: v for d, v in enumerate(arr.tolist()) if v}


CASES = [dict(dup=d, anonymous=a, lookups=True, big_ids=b)
         for d in (False, True) for a in (False, True) for b in (False, True)]


@pytest.mark.parametrize("kind", unit_rows(CASES, 4), ids=lambda k: "-".join(f"{x}" for x, v in k.items() if v))
@pytest.mark.parametrize("deepest_first", [True, False])
def test_pass_equals_the_plain_stack(kind, deepest_first):
    for seed in range(60):
        reqs = random_requests(seed, **kind)
        cost = POSITION if seed % 2 else None
        # NOTE: a 64-time clock renumbers every few requests; several batches per trace
        sp = run_pass(reqs, deepest_first=deepest_first, cost=cost, min_times=64,
                      batches=1 + seed % 4)
        ref = stack_curve(reqs, deepest_first=deepest_first, cost=cost)
        h = sp.histograms()
        assert as_dict(h["block"]) == ref["block"], seed
        assert as_dict(h["prefix"]) == ref["prefix"], seed
        if cost is not None:
            assert as_dict(h["cost_block"]) == pytest.approx(ref["cost_block"]), seed
            assert as_dict(h["cost_prefix"]) == pytest.approx(ref["cost_prefix"]), seed
        assert sp.exact_from == ref["need"], seed
        assert sp.n_blocks == sum(m for _, m, _ in reqs)
        assert sp.n_distinct == len({b for ids, _, _ in reqs for b in ids})
        if seed % 4 == 0:
            assert sp.n_compactions > 0


@pytest.mark.parametrize("algo", ["lru", "vllm"])
@pytest.mark.parametrize("pin", [False, True])
@pytest.mark.parametrize("order", unit_rows(["deepest-first", "prefix-order"], 2))
@pytest.mark.parametrize("kind", unit_rows([dict(dup=False), dict(dup=True), dict(anonymous=True),
                                  dict(dup=True, anonymous=True)], 4), ids=["plain", "dup", "anon",
                                                                        "dup-anon"])
def test_stack_is_the_discrete_loop_at_every_size_from_the_largest_request(algo, pin, order,
                                                                           kind):
    # NOTE: vllm ranks blocks by release, tail first, whatever the replay order
    deepest = order == "deepest-first" or algo == "vllm"
    for seed in range(12):
        reqs = random_requests(seed, n=40, n_ids=25, lookups=True, **kind)
        cost = POSITION if seed % 2 else parse_cost_model("uniform")
        ref = stack_curve(reqs, deepest_first=deepest, cost=cost)
        sizes = list(range(max(1, ref["need"]), 30))
        got = discrete_curve(reqs, sizes, algo=algo, pin=pin, replay_order=order, cost=cost)
        for c in sizes:
            hits = sum(v for d, v in ref["block"].items() if d <= c)
            phits = sum(v for d, v in ref["prefix"].items() if d <= c)
            saved = sum(v for d, v in ref["cost_block"].items() if d <= c)
            assert got[c]["n_req_skipped"] == 0
            assert (got[c]["n_hits"], got[c]["n_prefix_hits"]) == (hits, phits), (seed, c)
            assert got[c]["saved_cost"] == pytest.approx(saved), (seed, c)


def test_below_the_largest_request_the_curve_is_not_the_loop():
    # A request of 3 blocks is skipped by a cache of 2, which then keeps block 1; the one-pass
    # stack moved 2, 3, 4 above it.
    reqs = [([1], 1, 0), ([2, 3, 4], 3, 0), ([1], 1, 0)]
    ref = stack_curve(reqs)
    assert ref["need"] == 3
    got = discrete_curve(reqs, [2, 3, 4])
    assert got[2]["n_req_skipped"] == 1 and got[2]["n_hits"] == 1
    assert sum(v for d, v in ref["block"].items() if d <= 2) == 0
    assert got[4]["n_hits"] == sum(v for d, v in ref["block"].items() if d <= 4) == 1
    curve = curve_of(reqs)
    assert curve.exact_from == 3 and curve.exact_from_req == 1
    with pytest.raises(ShadowError, match="--at 2: below 3 blocks"):
        curve.check_size(2)
    curve.check_size(3)


def curve_of(reqs, **kw) -> Curve:
    return Curve.from_pass(run_pass(reqs, **kw), algo="lru", lookup="all",
                           replay_order="deepest-first", cost_model="uniform")


def test_curve_ratios_change_points_and_targets():
    reqs = random_requests(3, n=200, n_ids=40, dup=True)
    curve = curve_of(reqs)
    ref = stack_curve(reqs)
    n = curve.n_blocks
    points = curve.change_points().tolist()
    assert points[0] == curve.exact_from
    assert points == sorted(set(points))
    for c in range(curve.exact_from, curve.top + 3):
        hits = sum(v for d, v in ref["block"].items() if d <= c)
        assert curve.ratios(c)["block_hit_ratio"] == hits / n
        if c > curve.exact_from:       # a change point exactly where a ratio moves
            assert (c in points) == (curve.ratios(c) != curve.ratios(c - 1)), c
    assert curve.ratios(10**9) == curve.ratios(curve.top)
    full = curve.counts(10**9)["n_hits"]
    for t in parse_targets("0.5,0.8,0.9,0.95,0.99,1"):
        c = curve.capacity_for(t, "block_hit_ratio")
        assert curve.counts(c)["n_hits"] >= t * full
        assert c == 1 or curve.counts(c - 1)["n_hits"] < t * full


@pytest.mark.parametrize("text,message", [
    ("0", "in (0, 1]"), ("1.5", "in (0, 1]"), ("-0.1", "in (0, 1]"), ("x", "not a number"),
    ("", "--target is empty"), ("0.5,,", "not a number"), ("nan", "not a number"),
    ("inf", "not a number")])
def test_targets_outside_the_unit_interval_are_refused(text, message):
    with pytest.raises(ShadowError, match=message.replace("(", r"\(").replace("]", r"\]")):
        parse_targets(text)


def test_memory_is_per_distinct_block():
    # 200k distinct blocks in 1,000-block requests; the arrays a pass holds stay within a small
    # multiple of the distinct count (docs/mrc.md gives the bytes per block)
    n_req, per = 400, 1000
    offs = np.arange(n_req + 1, dtype=np.int64) * per
    rng = np.random.default_rng(0)
    ids = np.concatenate([np.sort(rng.choice(200_000, per, replace=False)) + 1
                          for _ in range(n_req)]).astype(np.int64)
    sp = StackPass(True, False)
    for k in range(0, n_req, 50):
        sp.feed(offs[k:k + 51] - offs[k], ids[offs[k]:offs[k + 50]], None, None, np.ones(1), k)
    assert sp.n_distinct <= 200_000
    assert sp.allocated_bytes() < 40 * sp.n_distinct


# -- the sampled curve (SHARDS) ----------------------------------------------------------------
def test_sampled_curve_at_rate_one_is_the_exact_curve():
    from shadow.sim.mrc.shards import SampledCurve
    for seed in range(20):
        reqs = random_requests(seed, n=120, n_ids=50, dup=seed % 2 == 0, anonymous=seed % 3 == 0,
                               lookups=True, big_ids=seed % 5 == 0)
        curve = curve_of(reqs)
        sc = SampledCurve(1.0, 80)
        for ids, m, a in reqs:
            sc.serve(np.array(ids, dtype=np.int64), m, a)
        assert sc.rate == 1.0 and sc.n_lookups == curve.n_blocks
        for c in range(1, 82):
            want = curve.ratios(c)["block_hit_ratio"]
            assert sc.ratio_at(c, False) == pytest.approx(want, abs=1e-12), (seed, c)
            assert sc.ratio_at(c, True) == pytest.approx(want, abs=1e-12), (seed, c)
        full = curve.counts(10**9)["n_hits"]
        for t in (0.5, 0.9, 1.0):
            want = curve.capacity_for(parse_targets(str(t))[0], "block_hit_ratio")
            if full:
                # bins of one block, interpolated: the capacity lies within the bin it needs
                assert want - 1 <= sc.capacity_for(t, False) <= want


def test_sampled_curve_live_order_equals_serve_when_serial():
    from shadow.sim.mrc.shards import SampledCurve
    reqs = random_requests(4, n=200, n_ids=60, anonymous=True, lookups=True)
    a, b = SampledCurve(1.0, 100), SampledCurve(1.0, 100)
    for ids, m, n_anon in reqs:
        arr = np.array(ids, dtype=np.int64)
        a.serve(arr, m, n_anon)
        b.admit(arr, m)
        b.release(arr, arr[:0], n_anon)
    assert [a.ratio_at(c) for c in range(1, 101)] == [b.ratio_at(c) for c in range(1, 101)]


def test_fixed_size_sampling_bounds_the_ids_and_the_memory():
    from shadow.sim.mrc.shards import SampledCurve
    sc = SampledCurve(64.0, 256, 1.0, 512, 7)
    rng = np.random.default_rng(1)
    sizes = []
    for k in range(3000):
        # a growing population: new blocks keep coming, old prefixes come back
        base = rng.integers(1, 1 + 50 * (k + 1))
        ids = np.arange(base, base + rng.integers(1, 40), dtype=np.int64)
        sc.serve(ids, len(ids), int(rng.integers(0, 2)))
        assert sc.n_tracked <= 512
        if k >= 1000:
            sizes.append(sc.allocated_bytes())
    assert sc.rate < 0.2
    # memory stays put once the sample is full (no growth with the distinct blocks)
    assert max(sizes) <= 1.25 * sizes[0]
    assert max(sizes) < 200 * 512 + 256 * 8 + 64 * 1024


def test_sampled_estimate_is_close_on_the_bundled_trace():
    from shadow.sim.mrc.shards import SampledCurve
    from shadow.trace import open_trace
    from tests.sim._traces import SYNTHETIC
    reqs = []
    with open_trace(str(SYNTHETIC)) as tr:
        for b in tr:
            off = np.asarray(b.offsets)
            reqs += [np.ascontiguousarray(b.block_ids[off[i]:off[i + 1]], dtype=np.int64)
                     for i in range(len(off) - 1)]
    exact = curve_of([(list(r), len(r), 0) for r in reqs])
    sc = SampledCurve(128.0, 512, 0.1, 0, 0)
    for r in reqs:
        sc.serve(r, len(r), 0)
    assert 0.05 < sc.rate < 0.15 and sc.n_sampled_lookups < 0.2 * sc.n_lookups
    for c in (1024, 4096, 8192, 16384, 32768):
        # docs/performance.md gives the measured errors; this bound only catches a broken
        # estimator (a wrong scale is off by far more)
        assert abs(sc.ratio_at(c, False) - exact.ratios(c)["block_hit_ratio"]) < 0.03
