"""The live sampled curve as a live cache kind (shadow/sim/lockstep/curve.py): through the same calls
as every kind, serial traffic gives the exact ``-a vllm --lookup vllm`` curve when every block is
tracked; re-admissions are moved, not counted; a reset starts afresh; tracked ids are held."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shadow.sim.lockstep.caches import LiveRequest
from shadow.sim.lockstep.curve import FRACTIONS, TARGETS, LiveCurve, keys
from shadow.sim.mrc.shards import SampledCurve
from tests.sim.test_mrc import curve_of


def _requests(seed: int, n: int = 150, n_ids: int = 60):
    """(prompt ids, n_match, decode ids, anonymous slots) with chained (prefix) ids."""
    rng = random.Random(seed)
    out, nxt = [], n_ids + 1
    for _ in range(n):
        k = rng.randint(1, 6)
        start = rng.randint(1, n_ids - k)
        prompt = list(range(start, start + k))
        decode = list(range(nxt, nxt + rng.randint(0, 2)))
        nxt += len(decode)
        out.append((prompt, rng.randint(0, k), decode, rng.randint(0, 1)))
    return out


def test_serial_events_give_the_exact_curve_at_rate_one():
    engine = 32
    reqs = _requests(1)
    live = LiveCurve(engine, max_ids=0, rate=1.0)
    for i, (prompt, m, dec, a) in enumerate(reqs):
        r = LiveRequest(str(i), prompt, 10 * len(prompt), m, True, 0.0, 0)
        live.admit(r)
        assert [x[0] for x in live.flush()] == [r]
        live.release(r, dec, a, 0)
    # offline: the request is its prompt then its generated blocks, the first m looked up
    exact = curve_of([(p + d, m, a) for p, m, d, a in reqs])
    for f, got in zip(FRACTIONS, live.ratios()):
        c = f * engine
        if c == int(c) and c >= exact.exact_from:
            assert got == pytest.approx(exact.ratios(int(c))["block_hit_ratio"], abs=1e-12), f
    out = {"mrc_capacity": [0.0] * len(TARGETS), "mrc_ratio": [0.0] * len(FRACTIONS)}
    live.counters(out)
    assert out["mrc_ratio"] == live.ratios()
    assert out["mrc_capacity"] == live.capacities()
    caps = live.capacities()
    assert caps == sorted(caps) and all(c <= 16 * engine for c in caps)
    assert set(keys()) == {"mrc_targets", "mrc_fractions"}
    assert len(keys()["mrc_targets"]) == len(TARGETS)


def test_a_readmission_moves_its_blocks_but_is_not_counted():
    live = LiveCurve(16, max_ids=0, rate=1.0)
    a = LiveRequest("a", [1, 2, 3], 100, 3, True, 0.0, 0)
    live.admit(a)
    live.preempt(a, [], 0)
    again = LiveRequest("a", [1, 2, 3], 100, 3, False, 0.0, 0)
    live.admit(again)
    live.release(again, [4], 1, 0)
    assert live.curve.n_lookups == 3 and live.ratios()[-1] == 0.0
    b = LiveRequest("b", [1, 2, 3], 100, 3, True, 0.0, 0)
    live.admit(b)
    assert live.curve.n_lookups == 6 and live.ratios()[-1] == 0.5
    assert live.holds(2) and not live.holds(99)
    live.reset()
    assert live.curve.n_lookups == 0 and not live.holds(2)


def test_the_kind_matches_the_sampler_driven_directly():
    reqs = _requests(5, n=400, n_ids=300)
    live = LiveCurve(64, max_ids=128, seed=3)
    direct = SampledCurve(64 / 128, 128 * 16, 1.0, 128, 3)
    for i, (prompt, m, dec, a) in enumerate(reqs):
        r = LiveRequest(str(i), prompt, 0, m, True, 0.0, 0)
        live.admit(r)
        live.release(r, dec, a, 0)
        ids = np.array(prompt, dtype=np.int64)
        direct.admit(ids, m)
        direct.release(ids, np.array(dec, dtype=np.int64), a)
    assert live.curve.rate == direct.rate < 1
    assert live.curve.n_tracked <= 128
    assert live.ratios() == [direct.ratio_at(f * 64) for f in FRACTIONS]

