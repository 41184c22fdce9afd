"""``tiers`` in kv_connector_extra_config: the two forms (``--tier`` text, a mapping), what they
apply to, sizes from the engine's bytes per block, and one-line refusals naming the key before
anything runs (the connector's constructor raises them at engine start)."""

from __future__ import annotations

import pytest

from shadow.connector.config import MAX_TIER_PAIRS, parse_extra_config
from shadow.connector.schema import TIER_FIELDS
from shadow.connector.worker import ShadowWorker
from shadow.errors import ShadowError
from shadow.sim.tiers.model import TierSpec, parse_tier


def parse(extra=None, **kw):
    kw.setdefault("block_size", 32)
    kw.setdefault("engine_blocks", 40)
    kw.setdefault("bytes_per_block", 65536)
    return parse_extra_config(extra, **kw)


def test_no_tiers_by_default():
    cfg = parse(None)
    assert cfg.tiers == () and cfg.tier_targets == [] and cfg.tier_caches == "engine"


def test_text_and_mapping_forms_give_the_specs_of_the_tier_grammar():
    cfg = parse({"tiers": ["cpu:1g,2GiB:lru",
                           {"medium": "disk", "sizes": ["64blk"], "policy": "arc",
                            "chunk_tokens": 64, "bw": 3, "threshold": 2, "tracker": 100}]})
    want = parse_tier("cpu:1g,2GiB:lru") + parse_tier("disk:64blk:arc:bw=3,chunk=2,threshold=2,"
                                                      "tracker=100")
    assert cfg.tiers == tuple(want)
    # 1 GiB of 64 KiB blocks; 64 blocks in chunks of 2
    assert cfg.tier_chunks == (16384, 32768, 32)
    # a mapping alone is one tier; the defaults are cpu and lru, vLLM's
    one = parse({"tiers": {"size": "8blk"}})
    assert one.tiers == (TierSpec("cpu", "8blk", "lru", 50.0, size_blocks=8),)


def test_by_default_the_tiers_go_behind_the_engine_capacity_vllm_cache_only():
    cfg = parse({"tiers": "cpu:8blk:lru", "capacity_factors": [0.5, 1, 2]})
    assert [cfg.caches[i] for i in cfg.tier_targets] == [
        (p, 40) for p in cfg.policies if p.name == "vllm"]
    everywhere = parse({"tiers": "cpu:8blk:lru", "tier_caches": "all",
                        "capacity_factors": [0.5, 1, 2]})
    assert everywhere.tier_targets == list(range(len(everywhere.caches)))


def test_bytes_per_block_key_overrides_the_engine():
    cfg = parse({"tiers": "cpu:1m:lru", "bytes_per_block": 1024})
    assert cfg.bytes_per_block == 1024 and cfg.tier_chunks == (1024,)
    cfg = parse({"tiers": "cpu:1m:lru", "bytes_per_block": 1024}, bytes_per_block=None)
    assert cfg.tier_chunks == (1024,)


@pytest.mark.parametrize("extra,where,what", [
    ({"tiers": "cpu:1g:lru"}, "tiers[0]", "needs the bytes of a KV block"),
    ({"tiers": [{"size": "1blk", "chunk": 2}]}, "tiers[0]", "smaller than one offload chunk"),
    ({"tiers": "cpu:32k:lru"}, "tiers[0]", "smaller than one offload chunk"),
    ({"tiers": {"size": "8blk", "chunk_tokens": 48}}, "tiers[0].chunk_tokens",
     "not a multiple of the engine block size (32 tokens)"),
    ({"tiers": "nvme:8blk:lru"}, "tiers[0]", "unknown medium 'nvme'"),
    ({"tiers": {"medium": "tape", "size": "8blk"}}, "tiers[0]", "unknown medium 'tape'"),
    ({"tiers": "cpu:8blk:mru"}, "tiers[0]", "unknown tier policy 'mru'"),
    ({"tiers": ["cpu:8blk:lru", {"size": "8blk", "colour": "red"}]}, "tiers[1].colour",
     "unknown tier key"),
    ({"tiers": {"policy": "lru"}}, "tiers[0]", "no size"),
    ({"tiers": "cpu:8blk:lru:chunk=1.5"}, "tiers[0]", "chunk=1.5 is not a positive whole number"),
    ({"tiers": []}, "tiers", "non-empty list"),
    ({"tiers": 7}, "tiers", "non-empty list"),
    ({"tiers": ["cpu:8blk:lru", "cpu:8blk:lru"]}, "tiers[1]", "listed twice"),
    ({"tiers": "cpu:8blk:lru", "tier_caches": "some"}, "tier_caches", "unknown value 'some'"),
    ({"tiers": "cpu:8blk:lru", "policies": ["lru"]}, "tier_caches", "not configured"),
    ({"tiers": "cpu:8blk:lru", "capacity_factors": [2]}, "tier_caches", "not configured"),
    ({"tiers": "cpu:8blk,16blk:lru", "tier_caches": "all", "policies": ["lru", "fifo"],
      "capacities": list(range(1, 20))}, "tiers", f"more than {MAX_TIER_PAIRS}"),
    ({"tiers": "cpu:8blk:lru", "bytes_per_block": 0}, "bytes_per_block", "must be >= 1"),
])
def test_bad_tiers_are_one_line_errors_naming_the_key(extra, where, what):
    with pytest.raises(ShadowError) as e:
        parse(extra, bytes_per_block=None if "1g" in str(extra) else 65536)
    msg = str(e.value)
    assert msg.startswith(f"kv_connector_extra_config.{where}: "), msg
    assert what in msg and "\n" not in msg


def test_the_worker_builds_one_tier_per_cache_and_size_and_reports_them_from_start():
    cfg = parse({"tiers": ["cpu:1m,2m:lru"], "tier_caches": "all", "policies": ["lru", "vllm"],
                 "capacity_factors": [1], "capacities": [8]}, bytes_per_block=4096)
    w = ShadowWorker(cfg, start=False)
    assert w.tier_keys == ("lru|8|cpu:1m:lru", "lru|8|cpu:2m:lru", "lru|40|cpu:1m:lru",
                           "lru|40|cpu:2m:lru", "vllm|8|cpu:1m:lru", "vllm|8|cpu:2m:lru",
                           "vllm|40|cpu:1m:lru", "vllm|40|cpu:2m:lru")
    snap = w.snapshot
    assert snap.tier_keys == w.tier_keys
    assert snap.tiers == ((0,) * len(TIER_FIELDS),) * 8
    assert snap.tier_occupancy == (0,) * 8
    assert snap.tier_capacity == (1 << 20, 2 << 20) * 4
    # without tiers the snapshot carries none (the stats path's cost is unchanged)
    plain = ShadowWorker(parse({"policies": ["lru"]}), start=False).snapshot
    assert plain.tier_keys == () and plain.tiers == ()


def test_the_worker_drives_a_tier_with_each_admissions_first_miss_hit():
    """Hand-traced (B = 4, as tests/sim/test_tier_cli.py's ABC): A and C share blocks a-d (17
    prompt tokens: 4 full blocks), B pushes them out of a 5-block lru cache (4 + the partial
    block's slot); a tier of 8 one-block chunks still holds them when C comes: 16 tokens, 4
    chunks loaded; A and B stored 4 chunks each; nothing evicted.  Behind the 8-block vllm pool
    B's allocation takes the free queue's head: A's partial block, the 3 never-used blocks and
    A's d (freed tail first, so d is the oldest cached), so C hits a-c on the GPU and d (4
    tokens) in the tier.  A reset empties the tiers and keeps their counters."""
    from shadow.connector.worker import Reset
    from shadow.sim.engine.rules import partial_tail_blocks

    cfg = parse_extra_config({"policies": ["lru", "vllm"], "capacity_factors": [1],
                              "capacities": [5], "tiers": "cpu:8blk:lru", "tier_caches": "all",
                              "bytes_per_block": 100}, block_size=4, engine_blocks=8)
    w = ShadowWorker(cfg, start=False)
    blocks = {"A": ["a", "b", "c", "d"], "B": ["e", "f", "g", "h"], "C": ["a", "b", "c", "d"]}
    from shadow.connector.worker import Admit, Release
    for t, (rid, names) in enumerate(blocks.items()):
        w.submit(Admit(rid, [n.encode() for n in names], 17, 0, False, float(t)))
        w.submit(Release(rid, [], 1, t + 0.5, 17,
                         partial_tail_blocks(num_computed_tokens=17, n_full_blocks=4,
                                             block_size=4), 17))
        w._drain()
    rows = dict(zip(w.tier_keys, w.snapshot.tiers))
    occ = dict(zip(w.tier_keys, w.snapshot.tier_occupancy))
    assert rows["lru|5|cpu:8blk:lru"] == (16, 4 * 100, 8 * 100, 0, 0)
    assert occ["lru|5|cpu:8blk:lru"] == 8 * 100
    assert rows["vllm|8|cpu:8blk:lru"] == (4, 100, 800, 0, 0)
    w.submit_control(Reset())
    w._drain()
    assert dict(zip(w.tier_keys, w.snapshot.tiers))["lru|5|cpu:8blk:lru"] == (16, 400, 800, 0, 0)
    assert set(w.snapshot.tier_occupancy) == {0}


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("tiers,words", [
    # 32 KiB is half of one of the tiny model's 64 KiB blocks (read from the engine)
    ("cpu:32KiB:lru", "kv_connector_extra_config.tiers[0]: 32kib is smaller than one offload chunk"),
    ({"size": "1MiB", "chunk_tokens": 48},
     "kv_connector_extra_config.tiers[0].chunk_tokens: 48 is not a multiple of the engine block "
     "size (32 tokens)"),
])
def test_a_real_engine_refuses_a_bad_tier_at_start(tiers, words):
    """The connector's constructor raises while the engine starts; no engine serves."""
    from tests.vllm_support import inprocess_llm, tiny_model_path, vllm_available

    if not vllm_available():
        pytest.skip("vllm is not installed")
    from vllm.config import KVTransferConfig

    ktc = KVTransferConfig(kv_connector="ShadowConnector",
                           kv_connector_module_path="shadow.connector", kv_role="kv_producer",
                           kv_connector_extra_config={"tiers": tiers})
    with pytest.raises(Exception) as e:
        with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc,
                           num_gpu_blocks_override=28, max_model_len=512):
            pass
    chain, exc = [], e.value
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert any(words in m for m in chain), chain
