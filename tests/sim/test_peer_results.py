"""`--no-pin` results equal tests/data/peer_results_synthetic.txt (PrefixSim's predecessor)."""

from __future__ import annotations

import functools

import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.registry import POLICIES, policy_specs
from tests.sim._traces import PEER_RESULTS, SYNTHETIC, batches_of, read_jsonl
from tests.tiers import unit_rows


def _peer_algos() -> list[str]:
    algos = set()
    for line in PEER_RESULTS.read_text().splitlines():
        if line.startswith("RESULT "):
            algos.add(dict(x.split("=", 1) for x in line.split()[1:])["algo"])
    assert algos <= set(POLICIES), sorted(algos - set(POLICIES))
    return [a for a in POLICIES if a in algos]


# NOTE: the policies come from the reference file and the registry (every policy the file has
# is compared; none is listed here): exactly for deterministic ones, within 0.01 for sampled
SPECS = policy_specs(built_only=False)
DETERMINISTIC = [a for a in _peer_algos() if SPECS[a].deterministic]
SAMPLED = [a for a in _peer_algos() if not SPECS[a].deterministic]
COST_MODELS = ["uniform", "qwen3coder30b_blksz_16"]
SIZES = [2048, 8192, 32768, 131072]


def _peer() -> dict[tuple[str, int, str], dict[str, str]]:
    out = {}
    for line in PEER_RESULTS.read_text().splitlines():
        if line.startswith("RESULT "):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
            out[(kv["algo"], int(kv["cache_size"]), kv["cost_model"])] = kv
    return out


@functools.lru_cache(maxsize=None)
def _batches():
    return batches_of(read_jsonl(SYNTHETIC), size=700)


@functools.lru_cache(maxsize=None)
def _run(algo: str, cost_model: str):
    sim = Simulator([CacheSpec(algo, s) for s in SIZES], cost_model=cost_model, pin=False,
                    trace_name="mooncake_synthetic.jsonl")
    for b in _batches():
        sim.feed(b)
    return {r.spec.capacity: r for r in sim.results()}


@pytest.mark.parametrize("cost_model", unit_rows(COST_MODELS, 2))
@pytest.mark.parametrize("algo", DETERMINISTIC)
def test_deterministic_policy_matches_peer(algo, cost_model):
    peer = _peer()
    got = _run(algo, cost_model)
    for size in SIZES:
        want = peer[(algo, size, cost_model)]
        r = got[size]
        assert r.error is None
        assert (r.n_req, r.n_req_skipped, r.n_blocks) == (
            int(want["n_req"]), int(want["n_req_skipped"]), int(want["n_blocks"]))
        assert f"{r.block_hit_ratio:.6f}" == want["block_hit_ratio"], size
        assert f"{r.compute_saving_ratio:.6f}" == want["compute_saving_ratio"], size
        assert r.n_unexpected_eviction == 0
        if SPECS[algo].prefixsim_evictions:
            assert (r.n_eviction, r.n_self_eviction) == (
                int(want["n_eviction"]), int(want["n_self_eviction"])), size


@pytest.mark.slow
@pytest.mark.parametrize("cost_model", COST_MODELS)
@pytest.mark.parametrize("algo", SAMPLED)
def test_sampled_policy_close_to_peer(algo, cost_model):
    peer = _peer()
    got = _run(algo, cost_model)
    for size in SIZES:
        want = peer[(algo, size, cost_model)]
        r = got[size]
        assert r.error is None
        assert abs(r.block_hit_ratio - float(want["block_hit_ratio"])) <= 0.01, size
        assert abs(r.compute_saving_ratio - float(want["compute_saving_ratio"])) <= 0.01, size
