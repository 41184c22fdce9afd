"""`--no-pin` results equal tests/data/peer_results_synthetic.txt (PrefixSim's predecessor)."""

from __future__ import annotations

import functools

import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.registry import is_built
from tests.sim._traces import PEER_RESULTS, SYNTHETIC, batches_of, read_jsonl

DETERMINISTIC = ["lru", "fifo", "clock", "sieve", "s3fifo", "twoq", "arc", "slru", "lfu", "gdsf",
                 "belady"]
EVICTION_COUNTS = {"lru", "fifo", "clock", "sieve", "lfu", "belady"}
SAMPLED = ["random_compute", "belady_compute"]
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


def _need(algo):
    if not is_built(algo):
        pytest.skip(f"policy {algo} not built yet")


@pytest.mark.parametrize("cost_model", COST_MODELS)
@pytest.mark.parametrize("algo", DETERMINISTIC)
def test_deterministic_policy_matches_peer(algo, cost_model):
    _need(algo)
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
        if algo in EVICTION_COUNTS:
            assert (r.n_eviction, r.n_self_eviction) == (
                int(want["n_eviction"]), int(want["n_self_eviction"])), size


@pytest.mark.parametrize("cost_model", COST_MODELS)
@pytest.mark.parametrize("algo", SAMPLED)
def test_sampled_policy_close_to_peer(algo, cost_model):
    _need(algo)
    peer = _peer()
    got = _run(algo, cost_model)
    for size in SIZES:
        want = peer[(algo, size, cost_model)]
        r = got[size]
        assert r.error is None
        assert abs(r.block_hit_ratio - float(want["block_hit_ratio"])) <= 0.01, size
        assert abs(r.compute_saving_ratio - float(want["compute_saving_ratio"])) <= 0.01, size
