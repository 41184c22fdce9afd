"""The tier series on vLLM's /metrics route (``ShadowPromMetrics``: created at 0 from the
configuration, deltas added, occupancy and capacity set, wrong guesses removed) and in the stats
payload (``ShadowStats.aggregate``); the own endpoint is scraped on a real engine in
tests/connector/test_timing_recorded.py."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from shadow.connector.metrics import ShadowPromMetrics, ShadowStats
from shadow.connector.schema import (TIER_CAPACITY_GAUGE, TIER_FIELDS, TIER_OCCUPANCY_GAUGE,
                                     Payload as P, exported_series, rows_delta, stopped_delta,
                                     tier_counter_name)

# NOTE: the frontend classes subclass vLLM's, so importing this module imports vLLM
pytestmark = pytest.mark.vllm

TYPES = {Counter: Counter, Gauge: Gauge, Histogram: Histogram}


REPLICA = "r-tier"


def _value(name: str, **labels) -> float | None:
    labels.setdefault("replica", REPLICA)
    return REGISTRY.get_sample_value(name, labels)


def _frontend(model: str, extra: dict, num_gpu_blocks: int = 101) -> ShadowPromMetrics:
    ktc = SimpleNamespace(kv_connector_extra_config=dict(extra, replica=REPLICA))
    cfg = SimpleNamespace(kv_transfer_config=ktc,
                          cache_config=SimpleNamespace(num_gpu_blocks=num_gpu_blocks,
                                                       block_size=16))
    return ShadowPromMetrics(cfg, TYPES, ["model_name", "engine"], {0: [model, 0]})


def test_tier_series_exist_at_zero_and_add_deltas_and_states():
    # NOTE: sizes in GiB parse in the frontend without the engine's bytes per block
    prom = _frontend("t1", {"policies": ["vllm", "lru"], "capacity_factors": [1],
                            "tiers": "cpu:1g,4g:lru"})
    keys = ["vllm|100|cpu:1g:lru", "vllm|100|cpu:4g:lru"]   # the engine-capacity vllm cache only
    base = {"model_name": "t1", "engine": "0", "policy": "vllm", "capacity_blocks": "100"}
    for k in keys:
        lab = dict(base, tier=k.rsplit("|", 1)[1])
        for f in TIER_FIELDS:
            assert _value(tier_counter_name(f) + "_total", **lab) == 0
        assert _value(TIER_OCCUPANCY_GAUGE, **lab) == 0
    assert _value("shadow_tier_hit_tokens_total", **dict(base, policy="lru", tier="cpu:1g:lru")) \
        is None
    rng = random.Random(3)
    rows = [[0] * len(TIER_FIELDS) for _ in keys]
    prev = None
    occ_prev = None
    total = ShadowStats()
    for _ in range(30):
        for r in rows:
            for j in range(len(r)):
                r[j] += rng.choice((0, 0, 1, 32))
        snap = tuple(tuple(r) for r in rows)
        occ = tuple(rng.randrange(0, 1 << 30) for _ in keys)
        data = {P.CACHES: {}, P.ENGINE: {}, P.TIERS: rows_delta(keys, snap, prev),
                P.TIER_OCCUPANCY: stopped_delta(keys, occ, occ_prev),
                P.TIER_CAPACITY: stopped_delta(keys, (1 << 30, 4 << 30),
                                               None if prev is None else (1 << 30, 4 << 30))}
        prom.observe(data, 0)
        total.aggregate(ShadowStats(data=data))
        prev, occ_prev = snap, occ
    for k, row, o in zip(keys, rows, occ_prev):
        lab = dict(base, tier=k.rsplit("|", 1)[1])
        for f, v in zip(TIER_FIELDS, row):
            assert _value(tier_counter_name(f) + "_total", **lab) == v, (k, f)
            assert total.data[P.TIERS][k][TIER_FIELDS.index(f)] == v
        assert _value(TIER_OCCUPANCY_GAUGE, **lab) == o == total.data[P.TIER_OCCUPANCY][k]
    assert _value(TIER_CAPACITY_GAUGE, **dict(base, tier="cpu:4g:lru")) == 4 << 30
    assert not total.is_empty()


def test_a_payload_with_only_tier_moves_is_not_empty():
    assert not ShadowStats(data={P.CACHES: {}, P.TIERS: {"vllm|8|cpu:8blk:lru": [0, 0, 0, 1, 0]}}
                           ).is_empty()
    assert ShadowStats(data={P.CACHES: {}, P.TIERS: {"vllm|8|cpu:8blk:lru": [0] * 5}}).is_empty()


def test_wrong_guesses_take_their_tiers_with_them():
    prom = _frontend("t2", {"policies": ["vllm"], "capacity_factors": [1],
                            "tiers": "cpu:8blk:lru"})
    lab = {"model_name": "t2", "engine": "0", "policy": "vllm", "tier": "cpu:8blk:lru"}
    assert _value("shadow_tier_hit_tokens_total", capacity_blocks="100", **lab) == 0
    row = [1] + [0] * 11
    prom.observe({P.CACHES: {"vllm|90": row}, P.ENGINE: {},
                  P.TIERS: {"vllm|90|cpu:8blk:lru": [32, 0, 0, 0, 0]}}, 0)
    assert _value("shadow_tier_hit_tokens_total", capacity_blocks="100", **lab) is None
    assert _value(TIER_OCCUPANCY_GAUGE, capacity_blocks="100", **lab) is None
    assert _value("shadow_tier_hit_tokens_total", capacity_blocks="90", **lab) == 32


def test_exported_series_names_every_tier_series():
    names = exported_series()
    assert {tier_counter_name(f) + "_total" for f in TIER_FIELDS} <= names
    assert {TIER_OCCUPANCY_GAUGE, TIER_CAPACITY_GAUGE, "shadow_block_hits_total"} <= names
