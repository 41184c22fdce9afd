"""Per-request first-miss hits out of the serve loop (``Simulator.feed(prefix_hits=)``), the
prefill rule (``rules.prefill_cached_tokens``) and the per-cache prefill seconds
(shadow/sim/core/prefill.py), against the pure-Python reference loop and hand-computed sums."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.core.prefill import PREFILL_KEYS, PrefillMeter, PrefillTotals, request_seconds
from shadow.sim.cost.profile import load_profile
from shadow.sim.engine.rules import max_hit_blocks, prefill_cached_tokens
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from tests.sim._traces import batches_of, next_access, random_trace

POLICIES = ("lru", "fifo", "arc", "s3fifo", "vllm", "lfu", "gdsf")


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("threads", [1, 3])
def test_feed_reports_each_requests_prefix_hits(pin, threads):
    rng = np.random.default_rng(7)
    trace = random_trace(rng, 400, max_len=14)
    caps = (6, 12, 40)       # 6 and 12: requests of up to 14 blocks are skipped
    specs = [CacheSpec(p, c) for c in caps for p in POLICIES]
    sim = Simulator(specs, pin=pin, threads=threads, cost_model="position")
    got = []
    for b in batches_of(trace, size=97):
        out = np.full((len(specs), b.n_requests), 99, dtype=np.int64)
        sim.feed(b, prefix_hits=out)
        got.append(out)
    got = np.concatenate(got, axis=1)
    nxt = next_access(trace)
    for k, s in enumerate(specs):
        ref = RefCache(make_reference(s.policy, s.capacity), s.capacity, pin=pin,
                       cost_model="position")
        want = []
        for i, req in enumerate(trace):
            r = ref.serve(req, nxt[i])
            want.append(r.n_prefix_hits if r.status == "served" else -1)
        assert got[k].tolist() == want, s
    assert (got == -1).any() and (got > 0).any()
    res = sim.results()
    for k, r in enumerate(res):
        served = got[k] >= 0
        assert int(served.sum()) == r.n_req and int(got[k][served].sum()) == r.n_prefix_hits


def test_feed_refuses_a_wrong_output_array():
    sim = Simulator([CacheSpec("lru", 8)])
    b = batches_of(random_trace(np.random.default_rng(0), 5))[0]
    with pytest.raises(ValueError, match="prefix_hits"):
        sim.feed(b, prefix_hits=np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(ValueError, match="prefix_hits"):
        sim.feed(b, prefix_hits=np.zeros((1, 5), dtype=np.int32))


@pytest.mark.parametrize("n, h, B, want", [
    (100, 0, 16, 0), (100, 3, 16, 48), (96, 6, 16, 95), (97, 6, 16, 96), (1, 1, 16, 0),
    (0, 0, 16, 0), (512, 2, 512, 511),
])
def test_prefill_cached_tokens(n, h, B, want):
    assert int(prefill_cached_tokens(n, h, B)) == want


def test_under_vllms_lookup_the_cap_never_binds():
    N = np.arange(1, 2000)
    h = max_hit_blocks(N, 16)
    assert np.array_equal(prefill_cached_tokens(N, h, 16), h * 16)


def _profile(tmp_path):
    p = tmp_path / "p.jsonl"
    pts = [(0, 16, 1.0), (0, 32, 2.0), (0, 64, 4.0), (16, 16, 0.5), (16, 48, 2.5), (32, 32, 1.0)]
    p.write_text("".join(json.dumps({"cached": c, "new": n, "s": s}) + "\n" for c, n, s in pts))
    return load_profile(str(p))


def test_meter_by_hand(tmp_path):
    prof = _profile(tmp_path)
    m = PrefillMeter(prof, 16, 2)
    # cache 0: hits 0, 1, skipped, 2 blocks; cache 1: hits 0, 3 (capped to 63), 1, skipped
    N = np.array([32, 64, 16, 64])
    m.add(N, [np.array([0, 1, -1, 2]), np.array([0, 3, 1, -1])])
    t0 = {16: 1.0, 32: 2.0, 64: 4.0}
    a = m.totals[0]
    assert a.n_req == 3
    assert a.no_hit_s == pytest.approx(t0[32] + t0[64] + t0[64])
    assert a.prefill_s == 2.0 + 2.5 + 1.0         # t(0, 32) + t(16, 48) + t(32, 32), measured
    b = m.totals[1]
    assert b.n_req == 3
    assert b.no_hit_s == pytest.approx(t0[32] + t0[64] + t0[16])
    # 3 blocks of a 64-token prompt: 48 tokens, capped at 63 -> (48, 16); 1 block of 16: (15, 1)
    assert b.prefill_s == pytest.approx(2.0 + float(prof.seconds(48, 16))
                                        + float(prof.seconds(15, 1)))
    assert a.saved_s == pytest.approx(a.no_hit_s - a.prefill_s)
    assert a.ratio == pytest.approx(a.saved_s / a.no_hit_s)
    assert list(a.fields()) == list(PREFILL_KEYS)
    assert a.suffix().startswith("prefill_s=")


def test_request_seconds_and_refusals(tmp_path):
    prof = _profile(tmp_path)
    t, t0 = request_seconds(prof, np.array([32, 64]), np.array([1, 2]), 16)
    assert t.tolist() == [float(prof.seconds(16, 16)), 1.0] and t0.tolist() == [2.0, 4.0]
    with pytest.raises(ShadowError, match="block size in tokens"):
        PrefillMeter(prof, 0, 1, path="t.lcp")
    m = PrefillMeter(prof, 16, 1, path="t.lcp")
    m.add(np.array([16]), [np.array([0])])
    with pytest.raises(ShadowError, match=r"t\.lcp: request 2 has no prompt length"):
        m.add(np.array([16, 0]), [np.array([0, 0])])
    assert PrefillTotals().ratio == 0.0
