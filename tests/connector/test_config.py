"""kv_connector_extra_config validation: defaults that work with nothing given, and one clear
line naming the key for every bad value (raised at start-up, never in the serving loop)."""

from __future__ import annotations

import json

import pytest

from shadow.connector.config import (DEFAULT_CAPACITY_FACTORS, PolicySpec, parse_extra_config)
from shadow.errors import ShadowError


def parse(extra=None, **kw):
    kw.setdefault("block_size", 32)
    kw.setdefault("engine_blocks", 100)
    return parse_extra_config(extra, **kw)


def test_defaults_need_no_configuration():
    cfg = parse(None)
    assert cfg.block_size == 32 and cfg.engine_blocks == 100
    assert cfg.capacities == tuple(int(round(100 * f)) for f in DEFAULT_CAPACITY_FACTORS)
    assert cfg.policies[0] == PolicySpec("vllm")  # the fidelity policy comes first
    assert {p.name for p in cfg.policies} <= {"vllm", "lru", "s3fifo", "arc", "sieve"}
    assert cfg.record_dir is None and cfg.metrics_port is None and cfg.enabled
    assert cfg.match == "vllm" and cfg.pin and cfg.metrics_host == "127.0.0.1"
    assert len(cfg.caches) == len(cfg.policies) * len(cfg.capacities)


def test_the_sampled_curve_is_on_by_default_and_configurable():
    from shadow.connector.config import MrcConfig

    assert parse(None).mrc == MrcConfig(max_ids=16384, rate=1.0)
    assert parse({"mrc": False}).mrc is None and parse({"mrc": "off"}).mrc is None
    assert parse({"mrc": True}).mrc == MrcConfig()
    assert parse({"mrc": {"max_ids": 4096}}).mrc == MrcConfig(max_ids=4096)
    assert parse({"mrc": {"rate": "0.01"}}).mrc == MrcConfig(max_ids=0, rate=0.01)


def test_capacities_factors_and_absolute_collapse_sorted():
    cfg = parse({"capacity_factors": [1, 0.5], "capacities": [50, 7, "300"]})
    assert cfg.capacities == (7, 50, 100, 300)
    cfg = parse({"capacity_factors": "1", "capacities": []}, engine_blocks=27)
    assert cfg.capacities == (27,)


def test_policies_with_parameters(tmp_path):
    cfg = parse({"policies": "vllm;s3fifo:small-size-ratio=0.2", "cost_model": "uniform",
                 "record_dir": str(tmp_path / "rec"), "segment_max_bytes": "64MiB",
                 "segment_max_seconds": 60, "metrics_port": 0, "queue_size": "16",
                 "id_horizon_s": 30, "engine_id": "east-1", "dp_rank": 2, "pin": "false"})
    assert cfg.policies == (PolicySpec("vllm"), PolicySpec("s3fifo", "small-size-ratio=0.2"))
    assert cfg.policies[1].label == "s3fifo(small-size-ratio=0.2)"
    assert cfg.segment_max_bytes == 64 << 20 and cfg.segment_max_seconds == 60.0
    assert cfg.record_dir == str(tmp_path / "rec") and cfg.queue_size == 16
    assert cfg.engine_id == "east-1" and cfg.dp_rank == 2 and cfg.pin is False
    assert parse({"policies": [{"name": "lru"}, {"name": "s3fifo",
                                                 "params": {"small-size-ratio": 0.3}}]}
                 ).policies[1].params == "small-size-ratio=0.3"


@pytest.mark.parametrize("extra, where, what", [
    ({"polices": ["lru"]}, "kv_connector_extra_config.polices", "unknown key"),
    ({"policies": []}, "kv_connector_extra_config.policies", "is empty"),
    ({"policies": ["lru", "nosuch"]}, "kv_connector_extra_config.policies[1]", "unknown policy"),
    ({"policies": ["belady"]}, "kv_connector_extra_config.policies[0]", "needs the future"),
    ({"policies": ["lru", "lru"]}, "kv_connector_extra_config.policies[1]", "listed twice"),
    ({"policies": ["s3fifo:small-size-ratio=abc"]}, "kv_connector_extra_config.policies[0]",
     "small-size-ratio"),
    ({"capacities": [10, -1]}, "kv_connector_extra_config.capacities[1]", "must be >= 1"),
    ({"capacities": [1.5]}, "kv_connector_extra_config.capacities[0]", "expected an integer"),
    ({"capacity_factors": [0]}, "kv_connector_extra_config.capacity_factors[0]", "must be > 0"),
    ({"capacity_factors": ["x"]}, "kv_connector_extra_config.capacity_factors[0]",
     "expected a number"),
    ({"capacity_factors": [], "capacities": []}, "kv_connector_extra_config.capacities",
     "no capacity left"),
    ({"cost_model": "nosuch"}, "kv_connector_extra_config.cost_model", "nosuch"),
    ({"match": "longest"}, "kv_connector_extra_config.match", "unknown match mode"),
    ({"segment_max_bytes": "12XB"}, "kv_connector_extra_config.segment_max_bytes",
     "byte count"),
    ({"segment_max_bytes": 100}, "kv_connector_extra_config.segment_max_bytes", "at least 4096"),
    ({"segment_max_seconds": 0}, "kv_connector_extra_config.segment_max_seconds", "> 0"),
    ({"metrics_port": 70000}, "kv_connector_extra_config.metrics_port", "<= 65535"),
    ({"metrics_host": ""}, "kv_connector_extra_config.metrics_host", "host"),
    ({"queue_size": 0}, "kv_connector_extra_config.queue_size", ">= 1"),
    ({"worker_nice": 20}, "kv_connector_extra_config.worker_nice", "<= 19"),
    ({"id_horizon_s": "soon"}, "kv_connector_extra_config.id_horizon_s", "expected a number"),
    ({"pin": "maybe"}, "kv_connector_extra_config.pin", "true or false"),
    ({"record_dir": ""}, "kv_connector_extra_config.record_dir", "directory path"),
    ({"record_session_window": -1}, "kv_connector_extra_config.record_session_window",
     ">= 0"),
    ({"mrc": "sometimes"}, "kv_connector_extra_config.mrc", "true, false or a mapping"),
    ({"mrc": [1]}, "kv_connector_extra_config.mrc", "true, false or a mapping"),
    ({"mrc": {"max_ids": 10}}, "kv_connector_extra_config.mrc.max_ids", ">= 64"),
    ({"mrc": {"max_ids": "x"}}, "kv_connector_extra_config.mrc.max_ids", "expected an integer"),
    ({"mrc": {"rate": 0}}, "kv_connector_extra_config.mrc.rate", "> 0"),
    ({"mrc": {"rate": 1.5}}, "kv_connector_extra_config.mrc.rate", "not a sampling rate"),
    ({"mrc": {"rate": 0.1, "max_ids": 100}}, "kv_connector_extra_config.mrc", "one only"),
    ({"mrc": {"seed": 1}}, "kv_connector_extra_config.mrc.seed", "unknown key"),
])
def test_bad_values_name_the_key(extra, where, what):
    with pytest.raises(ShadowError) as ei:
        parse(extra)
    msg = str(ei.value)
    assert msg.startswith(where + ":"), msg
    assert what in msg
    assert "\n" not in msg


@pytest.mark.parametrize("below,words", [
    ("", "afile exists and is not a directory"),
    ("sub", "afile/sub is below {f}, which is not a directory"),
    ("sub/deeper", "afile/sub/deeper is below {f}, which is not a directory"),
])
def test_record_dir_that_is_or_is_below_a_file(below, words, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(ShadowError) as ei:
        parse({"record_dir": str(f / below) if below else str(f)})
    msg = str(ei.value)
    assert msg.startswith("kv_connector_extra_config.record_dir: ") and "\n" not in msg, msg
    assert words.format(f=f) in msg, msg
    assert [p.name for p in tmp_path.iterdir()] == ["afile"] and f.read_text() == "x"


def test_engine_facts_are_checked():
    with pytest.raises(ShadowError, match="block size"):
        parse(None, block_size=0)
    with pytest.raises(ShadowError, match="0 KV blocks"):
        parse(None, engine_blocks=0)


@pytest.mark.parametrize("extra,words", [
    ({"policies": ["s3fifo:small-size-ratio=7"]}, "policies[0]: policy s3fifo: small-size-ratio"),
    ({"policies": ["clock:n-bit-counter=0"]}, "policies[0]: policy clock: n-bit-counter"),
    ({"capacity_factors": [1e9]}, "capacity_factors[0]: 1000000000.0 x"),
    ({"capacities": [2**31]}, "capacities[0]: must be <= 2147483646"),
])
def test_the_connector_refuses_what_simulate_refuses(extra, words):
    """One validation with `shadow simulate` (shadow.sim.registry.check_policy, MAX_CAPACITY)."""
    with pytest.raises(ShadowError) as ei:
        parse_extra_config(extra, block_size=32, engine_blocks=100, engine_id="0", dp_rank=0)
    assert words in str(ei.value), str(ei.value)


@pytest.mark.parametrize("extra,words", [
    ([1, 2], "kv_connector_extra_config: expected a mapping"),
    ({"policies": [{"name": "s3fifo", "params": 5}]}, "policies[0].params: expected a k=v,k=v"),
    ({"policies": [{"name": "s3fifo", "params": [1, 2]}]}, "policies[0].params: expected"),
])
def test_values_of_the_wrong_type_are_one_line_errors(extra, words):
    """Not a TypeError traceback at engine start: a ShadowError naming the key."""
    with pytest.raises(ShadowError) as ei:
        parse_extra_config(extra, block_size=32, engine_blocks=100, engine_id="0", dp_rank=0)
    assert words in str(ei.value), str(ei.value)


def test_params_as_a_mapping():
    cfg = parse_extra_config({"policies": [{"name": "s3fifo", "params": {"small-size-ratio": 0.2}}]},
                             block_size=32, engine_blocks=100, engine_id="0", dp_rank=0)
    assert cfg.policies == (PolicySpec("s3fifo", "small-size-ratio=0.2"),)


def test_cost_model_defaults_to_the_served_models_config(tmp_path, caplog):
    """Without a cost_model key the caches cost blocks by the served model's config.json
    (model:CONFIG,BLOCK) when it is at hand; the key overrides it; a config the costs cannot use
    falls back to uniform with one warning line."""
    cfg_json = tmp_path / "config.json"
    cfg_json.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                    "num_attention_heads": 4, "intermediate_size": 128}))
    assert parse(None, model_config_json=str(cfg_json)).cost_model == f"model:{cfg_json},32"
    assert parse({"cost_model": "uniform"}, model_config_json=str(cfg_json)).cost_model == \
        "uniform"
    assert parse({"cost_model": "position"}).cost_model == "position"
    assert parse(None).cost_model == "uniform"
    cfg_json.write_text(json.dumps({"num_hidden_layers": 2}))
    with caplog.at_level("WARNING", logger="shadow.connector.config"):
        assert parse(None, model_config_json=str(cfg_json)).cost_model == "uniform"
    (rec,) = [r for r in caplog.records if "cost_model uniform" in r.getMessage()]
    assert "'hidden_size'" in rec.getMessage() and "\n" not in rec.getMessage()


def test_replica_and_fleet_key(tmp_path):
    """The replica's name (``@rank`` added under data parallelism; the host's name by default)
    and the fleet key (a secret, or a file holding it; random per process without either)."""
    import socket

    from shadow.connector.blockkey import derive_key

    cfg = parse({"replica": "east", "fleet_key": "s3cret"})
    assert cfg.replica == "east" and cfg.fleet_key == derive_key("s3cret") and cfg.fleet_key_set
    assert parse({"replica": "east"}, dp_rank=3, dp_size=4).replica == "east@3"
    assert parse({}).replica == socket.gethostname()[-32:]
    key_file = tmp_path / "key"
    key_file.write_text("s3cret\n")
    assert parse({"fleet_key_file": str(key_file)}).fleet_key == derive_key("s3cret")
    a, b = parse({}), parse({})
    assert not a.fleet_key_set and a.fleet_key != b.fleet_key and len(a.fleet_key) == 32
    assert "s3cret" not in repr(cfg)


@pytest.mark.parametrize("extra, where, what", [
    ({"replica": ""}, "replica", "expected a printable name"),
    ({"replica": 7}, "replica", "expected a printable name"),
    ({"replica": "a\nb"}, "replica", "expected a printable name"),
    ({"replica": "x" * 33}, "replica", "longer than 32 bytes"),
    ({"fleet_key": ""}, "fleet_key", "non-empty secret"),
    ({"fleet_key": "a", "fleet_key_file": "/x"}, "fleet_key_file", "not both"),
    ({"fleet_key_file": "/nonexistent/key"}, "fleet_key_file", "/nonexistent/key"),
])
def test_bad_replica_and_fleet_key_name_the_key(extra, where, what):
    with pytest.raises(ShadowError) as ei:
        parse(extra)
    msg = str(ei.value)
    assert msg.startswith(f"kv_connector_extra_config.{where}: ") and what in msg, msg
    assert "\n" not in msg


def test_a_replica_too_long_with_its_dp_suffix():
    with pytest.raises(ShadowError, match="longer than 32 bytes with the DP rank suffix"):
        parse({"replica": "x" * 31}, dp_rank=1, dp_size=2)
