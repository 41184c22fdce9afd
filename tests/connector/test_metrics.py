"""The connector-stats path without an engine: the per-step deltas (only the caches whose counters
moved) add up to the cumulative counters, and ``ShadowPromMetrics.observe`` turns a stream of
deltas into exactly those totals on real prometheus_client counters; a cache's stopped state
reaches its gauge on both routes."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from prometheus_client import REGISTRY, Counter, CollectorRegistry

from shadow.connector.metrics import (ShadowCollector, ShadowPromMetrics, ShadowStats,
                                      _fast_inc, start_endpoint)
from shadow.connector.schema import Payload as P
from shadow.connector.schema import CACHE_FIELDS, ENGINE_FIELDS, rows_delta, stopped_delta

# NOTE: the frontend classes subclass vLLM's, so importing this module imports vLLM
pytestmark = pytest.mark.vllm

KEYS = ("vllm|100", "lru|100", "lru|200")
#: kv_connector_extra_config.replica of the frontends below (every series' ``replica`` label)
REPLICA = "r-test"


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
    return SimpleNamespace(kv_transfer_config=SimpleNamespace(
        kv_connector_extra_config={"replica": REPLICA}),
        cache_config=SimpleNamespace(num_gpu_blocks=0, block_size=16))


def _value(name: str, **labels) -> float | None:
    labels.setdefault("replica", REPLICA)
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
        st = ShadowStats(data={P.CACHES: rows_delta(KEYS, snap, prev), P.ENGINE: e,
                               P.RECORDING: i % 2,
                               P.CAPACITY: 100})
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


def test_stopped_delta_names_every_cache_first_then_only_changes():
    assert stopped_delta(KEYS, (0, 0, 0), None) == dict.fromkeys(KEYS, 0)
    assert stopped_delta(KEYS, (0, 1, 0), (0, 0, 0)) == {"lru|100": 1}
    assert stopped_delta(KEYS, (0, 1, 0), (0, 1, 0)) == {}
    assert stopped_delta(KEYS, (0, 0, 0), (0, 1, 0)) == {"lru|100": 0}   # restarted by a reset


def test_stopped_state_aggregates_to_the_latest_and_is_never_empty():
    st = ShadowStats(data={})
    st.aggregate(ShadowStats(data={P.CACHES: {}, P.ENGINE: {}, P.STOPPED: dict.fromkeys(KEYS, 0)}))
    st.aggregate(ShadowStats(data={P.CACHES: {}, P.ENGINE: {}, P.STOPPED: {"lru|200": 1}}))
    assert st.data[P.STOPPED] == {"vllm|100": 0, "lru|100": 0, "lru|200": 1}
    # a payload that only says a cache stopped still goes out (its counters did not move)
    assert not ShadowStats(data={P.CACHES: {}, P.ENGINE: {}, P.STOPPED: {"lru|200": 1}}).is_empty()
    assert ShadowStats(data={P.CACHES: {}, P.ENGINE: {}, P.STOPPED: {}}).is_empty()
    assert st.reduce()["lru|200 stopped"] == 1 and "lru|100 stopped" not in st.reduce()


def test_observe_sets_the_stopped_gauge_per_cache():
    from prometheus_client import Gauge, Histogram

    types = {Counter: Counter, Gauge: Gauge, Histogram: Histogram}
    prom = ShadowPromMetrics(_config(), types, ["model_name", "engine"], {0: ["s", 0]})

    def stopped(key):
        policy, cap = key.split("|")
        return _value("shadow_cache_stopped", model_name="s", engine="0", policy=policy,
                      capacity_blocks=cap)

    zero = [[0.0] * len(CACHE_FIELDS) for _ in KEYS]
    prom.observe({P.CACHES: rows_delta(KEYS, zero, None), P.ENGINE: {},
                  P.STOPPED: stopped_delta(KEYS, (0, 0, 0), None)}, 0)
    assert [stopped(k) for k in KEYS] == [0, 0, 0]
    prom.observe({P.CACHES: {}, P.ENGINE: {},
                  P.STOPPED: stopped_delta(KEYS, (0, 1, 0), (0, 0, 0))}, 0)
    assert [stopped(k) for k in KEYS] == [0, 1, 0]
    prom.observe({P.CACHES: {}, P.ENGINE: {}, P.STOPPED: {}}, 0)          # no news keeps the state
    assert [stopped(k) for k in KEYS] == [0, 1, 0]
    prom.observe({P.CACHES: {}, P.ENGINE: {},
                  P.STOPPED: stopped_delta(KEYS, (0, 0, 0), (0, 1, 0))}, 0)
    assert [stopped(k) for k in KEYS] == [0, 0, 0]


def test_guessed_series_include_the_stopped_gauge_and_wrong_guesses_go():
    """The frontend creates every cache's series up front from the configuration; an engine
    that reports other capacities has the guessed ones removed, the stopped gauge with them."""
    from prometheus_client import Gauge, Histogram

    types = {Counter: Counter, Gauge: Gauge, Histogram: Histogram}
    ktc = SimpleNamespace(kv_connector_extra_config={"policies": ["lru"],
                                                     "capacity_factors": [1],
                                                     "replica": REPLICA})
    cfg = SimpleNamespace(kv_transfer_config=ktc,
                          cache_config=SimpleNamespace(num_gpu_blocks=101, block_size=16))
    prom = ShadowPromMetrics(cfg, types, ["model_name", "engine"], {0: ["g", 0]})
    labels = {"model_name": "g", "engine": "0", "policy": "lru"}
    assert _value("shadow_cache_stopped", capacity_blocks="100", **labels) == 0
    assert _value("shadow_requests_total", capacity_blocks="100", **labels) == 0
    row = [1.0] + [0.0] * (len(CACHE_FIELDS) - 1)
    prom.observe({P.CACHES: {"lru|90": row}, P.ENGINE: {}, P.STOPPED: {"lru|90": 0}}, 0)
    assert _value("shadow_cache_stopped", capacity_blocks="100", **labels) is None
    assert _value("shadow_requests_total", capacity_blocks="100", **labels) is None
    assert _value("shadow_cache_stopped", capacity_blocks="90", **labels) == 0
    assert _value("shadow_requests_total", capacity_blocks="90", **labels) == 1


@pytest.mark.slow
def test_own_endpoint_serves_the_stopped_gauge():
    """The connector's own endpoint (a real HTTP server on a free port, scraped over HTTP)."""
    from tests.vllm_support import free_port, http_get, parse_prometheus

    payload = {P.CACHES: {k: [0.0] * len(CACHE_FIELDS) for k in KEYS}, P.ENGINE: {},
               P.RECORDING: 0, P.CAPACITY: 100,
               P.STOPPED: {"vllm|100": 0, "lru|100": 1, "lru|200": 0}}
    port = free_port()
    server = start_endpoint("127.0.0.1", port, ShadowCollector(lambda: payload, "m", "0",
                                                               REPLICA))
    try:
        m = parse_prometheus(http_get(f"http://127.0.0.1:{port}/metrics"))
    finally:
        server.shutdown()
    got = {(dict(k[1])["policy"], dict(k[1])["capacity_blocks"]): v
           for k, v in m.items() if k[0] == "shadow_cache_stopped"}
    assert got == {("vllm", "100"): 0, ("lru", "100"): 1, ("lru", "200"): 0}


def test_every_series_carries_the_replica_of_its_engine():
    """The frontend labels each engine with the name the engine core records under
    (config.replica_of): the configured one, ``@rank`` added under data parallelism, the host's
    name when none is configured; the own endpoint with the engine core's own."""
    import socket

    from prometheus_client import Gauge, Histogram

    from tests.vllm_support import free_port, http_get, parse_prometheus

    types = {Counter: Counter, Gauge: Gauge, Histogram: Histogram}
    for extra, dp, want in (({"replica": "east"}, 2, ["east@0", "east@1"]),
                            ({"replica": "east"}, 1, ["east"]),
                            ({}, 1, [socket.gethostname()[-32:]])):
        cfg = SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra),
                              cache_config=SimpleNamespace(num_gpu_blocks=0, block_size=16),
                              parallel_config=SimpleNamespace(data_parallel_size=dp))
        ShadowPromMetrics(cfg, types, ["model_name", "engine"],
                          {i: ["dp", i] for i in range(dp)})
        got = [_value("shadow_observed_requests_total", model_name="dp", engine=str(i),
                      replica=want[i]) for i in range(dp)]
        assert got == [0.0] * dp, (extra, dp, got)
    port = free_port()
    payload = {P.CACHES: {"lru|100": [1.0] * len(CACHE_FIELDS)}, P.ENGINE: {}, P.RECORDING: 1,
               P.CAPACITY: 100, P.STOPPED: {"lru|100": 0}}
    server = start_endpoint("127.0.0.1", port, ShadowCollector(lambda: payload, "m", "1",
                                                               "west@1"))
    try:
        m = parse_prometheus(http_get(f"http://127.0.0.1:{port}/metrics"))
    finally:
        server.shutdown()
    shadow = [dict(k[1]) for k in m if k[0].startswith("shadow_")]
    assert shadow and all(lab["replica"] == "west@1" and lab["engine"] == "1" for lab in shadow)
