"""The connector-stats path without an engine: the per-step deltas (only the caches whose counters
moved) add up to the cumulative counters, and ``ShadowPromMetrics.observe`` turns a stream of
deltas into exactly those totals on real prometheus_client counters."""

from __future__ import annotations

import random
from types import SimpleNamespace

from prometheus_client import REGISTRY, Counter, CollectorRegistry

from shadow.connector.metrics import (ENGINE_FIELDS, ShadowPromMetrics, ShadowStats, _fast_inc,
                                      rows_delta)
from shadow.connector.worker import CACHE_FIELDS

KEYS = ("vllm|100", "lru|100", "lru|200")


def _cumulative(rng: random.Random, n_steps: int) -> list[tuple[tuple[float, ...], ...]]:
    rows = [[0.0] * len(CACHE_FIELDS) for _ in KEYS]
    out = []
    for _ in range(n_steps):
        for row in rows:
            if rng.random() < 0.5:  # some caches do not move in a step
                j = rng.randrange(len(row))
                row[j] += rng.choice([1, 2, 7, 0.5])
        out.append(tuple(tuple(r) for r in rows))
    return out


def test_rows_delta_sums_to_cumulative_and_leaves_out_unchanged_caches():
    rng = random.Random(3)
    snaps = _cumulative(rng, 60)
    total = {k: [0.0] * len(CACHE_FIELDS) for k in KEYS}
    prev = None
    left_out = 0
    for snap in snaps:
        d = rows_delta(KEYS, snap, prev)
        if prev is None:
            assert set(d) == set(KEYS)  # the first payload names every cache
        else:
            for k, r, p in zip(KEYS, snap, prev):
                assert (k in d) == (r != p)
                left_out += k not in d
        for k, row in d.items():
            total[k] = [a + b for a, b in zip(total[k], row)]
        prev = snap
    assert left_out > 0
    assert total == {k: list(r) for k, r in zip(KEYS, snaps[-1])}


def _config():
    # NOTE: a frontend that cannot tell the engine's block count creates no series up front
    return SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config={}),
                           cache_config=SimpleNamespace(num_gpu_blocks=0, block_size=16))


def _value(name: str, **labels) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_observe_adds_deltas_to_the_labelled_counters():
    from prometheus_client import Gauge, Histogram

    types = {Counter: Counter, Gauge: Gauge, Histogram: Histogram}
    prom = ShadowPromMetrics(_config(), types, ["model_name", "engine"], {0: ["m", 0]})
    rng = random.Random(5)
    snaps = _cumulative(rng, 40)
    prev = None
    e_total = dict.fromkeys(ENGINE_FIELDS, 0)
    for i, snap in enumerate(snaps):
        e = {f: (i % 3) * (k + 1) for k, f in enumerate(ENGINE_FIELDS)}
        for f, v in e.items():
            e_total[f] += v
        st = ShadowStats(data={"c": rows_delta(KEYS, snap, prev), "e": e, "rec": i % 2,
                               "cap": 100})
        prom.observe(st.data, 0)
        prev = snap
    for k, row in zip(KEYS, snaps[-1]):
        policy, cap = k.split("|")
        for f, v in zip(CACHE_FIELDS, row):
            got = _value(f"shadow_{f}_total", model_name="m", engine="0", policy=policy,
                         capacity_blocks=cap)
            assert got == v, (k, f)
    for f, v in e_total.items():
        assert _value(f"shadow_{f}_total", model_name="m", engine="0") == v, f
    assert _value("shadow_recording_enabled", model_name="m", engine="0") == 1
    assert _value("shadow_engine_capacity_blocks", model_name="m", engine="0") == 100


def test_fast_inc_is_the_counters_own_value():
    reg = CollectorRegistry()
    c = Counter("shadow_test_fast", "t", ["a"], registry=reg)
    child = c.labels("x")
    inc = _fast_inc(child)
    inc(2.5)
    child.inc(1)
    assert reg.get_sample_value("shadow_test_fast_total", {"a": "x"}) == 3.5

    class Wrapper:  # e.g. vLLM's Ray metric wrappers: their own inc is kept
        def __init__(self):
            self.n = 0.0

        def inc(self, v):
            self.n += v

    w = Wrapper()
    _fast_inc(w)(4)
    assert w.n == 4
