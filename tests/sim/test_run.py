"""shadow.sim.run: the one description of a run (RunSpec) and the one way to run it (run).

Every cross-check is refused in one line from each source that can reach it (simulate's options,
a sweep cell, the connector's live form); a spec never changes once built; and ``run`` gives the
RESULT lines that driving the simulator by hand with each driver gives, on the bundled trace.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from shadow.errors import ShadowError
from shadow.sim.cost.models import COST_UNITS, parse_cost_model
from shadow.sim.core.results import CacheSpec
from shadow.sim.run import RUN_TIMINGS, RunResults, RunSpec, check_policy_runs, run
from shadow.sweep.plan import Cell
from tests.sim._traces import SYNTHETIC
from tests.tiers import by_name, unit_rows

pytest.importorskip("shadow.sim.core.loop")

LRU = (CacheSpec("lru", 64),)
BELADY = (CacheSpec("lru", 64), CacheSpec("belady", 64))


def opts(caches=LRU, **kw) -> RunSpec:
    return RunSpec.from_options(caches, **kw)


def cell(**kw) -> Cell:
    kw.setdefault("algo", "lru")
    return Cell("/t/x.lcp", capacity=64, **kw)


def live(caches=LRU, **kw) -> RunSpec:
    kw.setdefault("cost", parse_cost_model("uniform"))
    kw.setdefault("block_size", 16)
    return RunSpec.live(caches, **kw)


# ---- every cross-check, from every source that can reach it ----

#: (what, a spec built from one source, the words of its one-line error)
REFUSED = [
    ("simulate: unknown policy", lambda: opts((CacheSpec("nosuch", 8),)), "unknown policy 'nosuch'"),
    ("sweep: unknown policy", lambda: RunSpec.from_cell(cell(algo="nosuch")),
     "unknown policy 'nosuch'"),
    ("connector: unknown policy", lambda: live((CacheSpec("nosuch", 8),)),
     "unknown policy 'nosuch'"),
    ("simulate: policy parameter", lambda: opts((CacheSpec("clock", 8, "n-bit-counter=0"),)),
     "policy clock: n-bit-counter must be 1..8"),
    ("sweep: policy parameter", lambda: RunSpec.from_cell(cell(algo="clock",
                                                               params="n-bit-counter=0")),
     "policy clock: n-bit-counter must be 1..8"),
    ("connector: policy parameter", lambda: live((CacheSpec("clock", 8, "n-bit-counter=0"),)),
     "policy clock: n-bit-counter must be 1..8"),
    ("connector: an oracle live", lambda: live(BELADY),
     "policy 'belady' needs the future (next-access times) and cannot run live"),
    ("simulate: no cache", lambda: opts(()), "no cache to simulate"),
    ("simulate: cost model", lambda: opts(cost_model="linear:1"), "expected linear:A,B"),
    ("sweep: cost model", lambda: RunSpec.from_cell(cell(cost_model="nosuch")),
     "unknown cost model 'nosuch'"),
    ("simulate: --service without --timing model", lambda: opts(service="decode=3"),
     "--service is --timing model's, not --timing serial's"),
    ("simulate: --service with --timing recorded",
     lambda: opts(timing="recorded", service="decode=3"),
     "--service is --timing model's, not --timing recorded's"),
    ("sweep: a bad service", lambda: RunSpec.from_cell(cell(timing="model:decode=0")),
     "--service: decode must be a positive number, got '0'"),
    ("simulate: --bytes-per-block without --tier", lambda: opts(bytes_per_block=100),
     "--bytes-per-block and --kv-config size a --tier; no --tier given"),
    ("simulate: --kv-config without --tier", lambda: opts(kv_config="/x.json"),
     "no --tier given"),
    ("simulate: both block bytes",
     lambda: opts(tiers=["cpu:8kblk:lru"], bytes_per_block=100, kv_config="/x.json"),
     "both give a block's bytes: one only"),
    ("simulate: --bytes-per-block 0", lambda: opts(tiers=["cpu:8kblk:lru"], bytes_per_block=0),
     "--bytes-per-block 0 is not a positive byte count"),
    ("simulate: --kv-config missing", lambda: opts(tiers=["cpu:1g:lru"], kv_config="/no/c.json"),
     "--kv-config /no/c.json: cannot read it: no such file"),
    ("sweep: --kv-config missing",
     lambda: RunSpec.from_cell(cell(tier="cpu:1g:lru", kv_bytes="/no/c.json,fp8")),
     "--kv-config /no/c.json: cannot read it: no such file"),
    ("simulate: an oracle under --tier", lambda: opts(BELADY, tiers=["cpu:8kblk:lru"]),
     "--tier cannot run belady (an oracle)"),
    ("sweep: an oracle under --tier",
     lambda: RunSpec.from_cell(cell(algo="belady", tier="cpu:8kblk:lru")),
     "--tier cannot run belady (an oracle)"),
    ("simulate: --tier with --lookup prompt",
     lambda: opts(tiers=["cpu:8kblk:lru"], lookup="prompt"),
     "--tier uses vLLM's block rules (--lookup vllm), not --lookup prompt"),
    ("simulate: a tier in bytes without the bytes", lambda: opts(tiers=["cpu:1g:lru"]),
     "--tier cpu:1g: a size in bytes (1g) needs the bytes of a KV block"),
    ("sweep: a tier in bytes without the bytes",
     lambda: RunSpec.from_cell(cell(tier="cpu:1g:lru")), "needs the bytes of a KV block"),
    ("simulate: a tier below one chunk", lambda: opts(tiers=["cpu:3blk:lru:chunk=4"]),
     "smaller than one offload chunk"),
    ("simulate: a tier in bytes below one chunk",
     lambda: opts(tiers=["cpu:1m:lru"], bytes_per_block=1 << 30), "smaller than one offload chunk"),
    ("simulate: --timing with --lookup prompt", lambda: opts(timing="model", lookup="prompt"),
     "--timing model uses vLLM's block rules (--lookup vllm), not --lookup prompt"),
    ("simulate: an oracle under --timing recorded", lambda: opts(BELADY, timing="recorded"),
     "--timing recorded cannot run belady: an oracle's next-access times follow the file's "
     "order, not the recorded times"),
    ("sweep: an oracle under --timing model",
     lambda: RunSpec.from_cell(cell(algo="belady", timing="model")),
     "--timing recorded and model cannot run belady: an oracle's next-access times follow the "
     "file's order"),
    ("simulate: --threads 0", lambda: opts(threads=0), "--threads must be at least 1, got 0"),
    ("simulate: category", lambda: opts(category="kind"), "--category: unknown category fold"),
    ("sweep: category", lambda: RunSpec.from_cell(cell(category="kind")),
     "unknown category fold 'kind'"),
    ("simulate: lookup mode", lambda: opts(lookup="most"), "bad lookup mode 'most'"),
    ("simulate: replay order", lambda: opts(replay_order="backwards"),
     "bad replay order 'backwards'"),
    ("simulate: block-id mode", lambda: opts(block_id="hash"), "bad block-id mode 'hash'"),
    ("simulate: timing", lambda: opts(timing="sometimes"), "unknown timing 'sometimes'"),
    ("simulate: --replicas 0", lambda: opts(replicas=0, router="round_robin"),
     "--replicas must be between 1 and 4096, got 0"),
    ("simulate: --replicas 4097", lambda: opts(replicas=4097, router="round_robin"),
     "--replicas must be between 1 and 4096, got 4097"),
    ("simulate: --replicas without a router", lambda: opts(replicas=2),
     "--replicas 2 needs a router to spread the requests"),
    ("simulate: an unknown router", lambda: opts(router="round_robin,nope"),
     "unknown router 'nope'"),
    ("simulate: an empty --router", lambda: opts(router=" "), "--router is empty"),
    ("simulate: a router twice", lambda: opts(router="random,random"),
     "--router lists a router twice"),
    ("simulate: an unknown router parameter",
     lambda: opts(router="cache_aware", router_params=["cache_aware:nope=1"]),
     "router cache_aware: unknown parameter 'nope'"),
    ("simulate: a parameter every router does not take",
     lambda: opts(router="random,round_robin", router_params=["seed=1"]),
     "router round_robin: unknown parameter 'seed'"),
    ("simulate: a bad router value",
     lambda: opts(router="kv_aware", router_params=["kv_aware:ttl=-1"]), "ttl must be >= 0"),
    ("simulate: parameters in --router", lambda: opts(router="kv_aware:ttl=1"),
     "--router 'kv_aware:ttl=1': --router names routers (R[,R...]); their parameters go to "
     "--router-params R:k=v,..."),
    ("simulate: parameters of a router not run",
     lambda: opts(router="random", router_params=["dynamo:seed=1"]),
     "--router-params 'dynamo:seed=1': dynamo is not in --router"),
    ("simulate: --router-params without --router", lambda: opts(router_params=["seed=1"]),
     "--router-params without --router"),
    ("simulate: a load router under serial timing", lambda: opts(router="least_load"),
     "router least_load routes by load, which a time model gives"),
    ("simulate: an oracle in a fleet", lambda: opts(BELADY, replicas=2, router="random"),
     "belady (an oracle) cannot run in a fleet of 2"),
    ("simulate: --dump-holes in a fleet",
     lambda: opts(replicas=2, router="random", dump_holes="/tmp/h"),
     "--dump-holes names its files by cache alone: it runs with one replica only"),
    ("simulate: a fleet with a tier",
     lambda: opts(router="round_robin", tiers=["cpu:8kblk:lru"]),
     "--tier runs behind one engine: a fleet (--router) has no offload tiers"),
    ("connector: a router", lambda: dataclasses.replace(live(), routers=("round_robin",)),
     "the connector runs in one engine: a router is simulate's"),
    ("a cost model not parsed", lambda: RunSpec(LRU, cost="uniform"),
     "a run needs a parsed cost model"),
]


@pytest.mark.parametrize("what,make,words", unit_rows(REFUSED, 3, ids=by_name))
def test_each_cross_check_is_one_line(what, make, words):
    with pytest.raises(ShadowError) as ei:
        make()
    msg = str(ei.value)
    assert words in msg and "\n" not in msg, msg


def test_live_skips_the_offline_only_checks():
    """The connector's tiers run beside the live caches (no lookup forcing, no offline byte
    checks: the engine gives the block's bytes); its lookup follows ``match``."""
    from shadow.sim.tiers.model import parse_tiers

    spec = live(tiers=parse_tiers("cpu:8kblk:lru"), bytes_per_block=4096)
    assert spec.timing == "live" and spec.lookup_mode == "vllm" and not spec.verify
    assert live(match="full").lookup_mode == "prompt"
    with pytest.raises(ShadowError, match="no trace to bind"):
        spec.bind(SimpleNamespace(block_size_tokens=16, has_next_access=True), "x")


def test_check_policy_runs_is_the_connectors_per_policy_check():
    check_policy_runs("lru", "", "live")
    check_policy_runs("belady", "", "serial")
    with pytest.raises(ShadowError, match="cannot run live"):
        check_policy_runs("belady", "", "live")


# ---- trace-dependent checks: bind ----

H16 = SimpleNamespace(block_size_tokens=16, has_next_access=True)
H0 = SimpleNamespace(block_size_tokens=0, has_next_access=False)


@pytest.mark.parametrize("spec,words", [
    (lambda: opts(BELADY), "t.lcp: the trace has no next-access times, which belady needs "
                           "(convert it with `shadow convert`)"),
    (lambda: opts(lookup="prompt"), "t.lcp: --lookup prompt needs the block size in tokens"),
    (lambda: opts(timing="recorded"), "t.lcp: --timing recorded needs the block size in tokens"),
    (lambda: opts(tiers=["cpu:8kblk:lru"]), "t.lcp: --tier needs the block size in tokens"),
    (lambda: opts(router="recorded"), "t.lcp: router recorded needs a merged recording"),
    (lambda: opts(router="round_robin,cache_aware"), "t.lcp: router cache_aware needs the block "
     "size in tokens (it sizes its tree in tokens), which the trace's header does not give"),
    (lambda: opts(router="dynamo"), "t.lcp: router dynamo needs the block size in tokens (it "
     "counts blocks of tokens)"),
], ids=["oracle", "lookup", "timing", "tier", "recorded", "cache_aware", "dynamo"])
def test_bind_refuses_what_the_header_lacks(spec, words):
    with pytest.raises(ShadowError) as ei:
        spec().bind(H0, "t.lcp")
    assert words in str(ei.value)


def test_bind_refuses_a_recorded_fleet_of_another_size():
    merged = SimpleNamespace(block_size_tokens=16, has_next_access=True, n_replicas=3)
    opts(router="recorded", replicas=3).bind(merged, "m.lcp")
    with pytest.raises(ShadowError, match="m.lcp: router recorded replays the 3 replicas this "
                                          "recording names: --replicas 3, not 2"):
        opts(router="recorded", replicas=2).bind(merged, "m.lcp")


def test_bind_reads_the_block_bytes_from_a_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4,
                               "hidden_size": 64, "num_key_value_heads": 1}))
    per_block = 2 * 2 * 1 * 16 * 16 * 2                # layers, K+V, heads, dim, tokens, bytes
    spec = opts(tiers=["cpu:1m:lru"], kv_config=str(cfg))
    assert spec.bytes_per_block is None and spec.block_size == 0
    bound = spec.bind(H16, "t.lcp")
    assert bound.bytes_per_block == per_block and bound.kv_config is None
    assert bound.block_size == 16 and spec.kv_config == str(cfg)      # the original unchanged
    assert bound.bind(H16, "t.lcp").bytes_per_block == per_block      # binding again: the same
    with pytest.raises(ShadowError, match="smaller than one offload chunk"):
        opts(tiers=["cpu:1k:lru"], kv_config=str(cfg)).bind(H16, "t.lcp")


# ---- one spec, never changed ----

def test_a_spec_is_frozen():
    spec = opts(tiers=["cpu:8kblk:lru", "cpu:4kblk:arc"], timing="model")
    for name, value in [("pin", False), ("caches", ()), ("cost", parse_cost_model("position")),
                        ("replicas", 2), ("timing", "serial")]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(spec, name, value)
    assert isinstance(spec.caches, tuple) and isinstance(spec.tiers, tuple)
    assert len(spec.tiers) == 2 and spec.service is not None      # model: the default service
    assert spec.lookup == "all" and spec.lookup_mode == "vllm"


def test_the_cost_model_says_its_unit(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"prefill_model": {"coef": [0.01, 1e-4, 1e-8]},
                                  "block_size": 16}))
    assert parse_cost_model(f"fit:{report}").unit == "us"
    for text in ("uniform", "position", "linear:1,2", "qwen3coder30b_blksz_16"):
        assert parse_cost_model(text).unit == "relative"
    h200 = Path(__file__).resolve().parents[2] / "shadow" / "data" / "h200_prefill.jsonl"
    assert parse_cost_model(f"profile:{h200},model=llama3_8b").unit == "s"
    assert set(COST_UNITS) == {"relative", "us", "s"}
    spec = RunSpec.from_cell(cell(cost_model=f"fit:{report}"))
    assert spec.cost.unit == "us" and spec.cost.name == f"fit:{report}"


def test_a_cell_and_the_options_give_the_same_spec():
    c = cell(algo="s3fifo", params="small-size-ratio=0.2", cost_model="position", pin=False,
             replay_order="prefix-order", timing="model:decode=3", tier="cpu:8kblk:lru",
             kv_bytes="4096", category="none")
    a = RunSpec.from_cell(c)
    b = RunSpec.from_options((CacheSpec("s3fifo", 64, "small-size-ratio=0.2"),),
                             cost_model="position", pin=False, replay_order="prefix-order",
                             timing="model", service="decode=3", tiers=["cpu:8kblk:lru"],
                             bytes_per_block=4096, trace_name="x.lcp", category="none",
                             source="sweep")
    fields = [f.name for f in dataclasses.fields(RunSpec) if f.name != "cost"]
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}
    assert a.cost.name == b.cost.name == "position"


def test_setup_notes_come_from_the_spec():
    notes = opts((CacheSpec("asym_cache", 64), CacheSpec("lru", 64))).setup_notes()
    assert len(notes) == 1 and "asym_cache" in notes[0] and "uniform" in notes[0]
    assert opts((CacheSpec("asym_cache", 64),), cost_model="position").setup_notes() == []


def test_run_timings_name_the_drivers():
    from shadow.sim.timing.run import TIMING_MODES

    assert RUN_TIMINGS == (*TIMING_MODES, "live")


# ---- run() gives what each driver gives, driven by hand ----

CACHES = (CacheSpec("lru", 1024), CacheSpec("s3fifo", 1024), CacheSpec("vllm", 4096))


def _by_hand(driver: str, **sim_kw) -> list[str]:
    """The RESULT lines of driving a Simulator with one driver directly (as the commands did)."""
    from shadow.sim.core.simulator import run_trace, sim_decode_threads
    from shadow.sim.timing.service import parse_service
    from shadow.sim.core.simulator import Simulator
    from shadow.sim.tiers.model import parse_tiers
    from shadow.sim.tiers.run import run_with_tiers
    from shadow.sim.timing.run import SerialOrder, run_trace_recorded
    from shadow.trace import open_trace

    with open_trace(SYNTHETIC, decode_threads=sim_decode_threads()) as tr:
        B = tr.header.block_size_tokens
        sim = Simulator(list(CACHES), trace_name="mooncake_synthetic.jsonl",
                        block_size_tokens=B, **sim_kw)
        if driver == "serial":
            run_trace(sim, tr, str(SYNTHETIC))
            return [r.result_line() for r in sim.results()]
        if driver == "model":
            run_trace_recorded(sim, tr, str(SYNTHETIC), B, service=parse_service(None))
            return [r.result_line() for r in sim.results()]
        tiers = parse_tiers("cpu:8kblk:lru") + parse_tiers("cpu:2kblk:arc:chunk=4")
        out = run_with_tiers(sim, tr, str(SYNTHETIC), B, tiers, None, sim.cost,
                             service=SerialOrder())
        results = sim.results()
        return [f"{r.result_line()} {t.suffix()}" for r in results for t in out
                if t.spec == r.spec]


@pytest.mark.parametrize("driver,options,sim_kw", [
    ("serial", {}, {}),
    ("serial", {"cost_model": "position", "pin": False, "replay_order": "prefix-order",
                "lookup": "vllm"},
     {"cost_model": "position", "pin": False, "replay_order": "prefix-order", "lookup": "vllm"}),
    ("model", {"timing": "model"}, {"lookup": "vllm"}),
    ("tiers", {"tiers": ["cpu:8kblk:lru", "cpu:2kblk:arc:chunk=4"]}, {"lookup": "vllm"}),
], ids=["serial", "serial-options", "timing-model", "tiers"])
def test_run_gives_the_drivers_result_lines(driver, options, sim_kw):
    spec = opts(CACHES, trace_name="mooncake_synthetic.jsonl", **options)
    with spec.open_trace(SYNTHETIC) as tr:
        started = []
        got = run(spec, tr, on_start=lambda: started.append(True))
    assert started == [True]
    assert isinstance(got, RunResults) and len(got.caches) == len(CACHES)
    assert [r.spec for r in got.caches] == list(CACHES)
    assert bool(got.tiers) == (driver == "tiers")
    want = _by_hand(driver, **sim_kw)
    assert got.lines() == want and len(want) == len(CACHES) * (2 if driver == "tiers" else 1)


def test_run_aborts_the_caches_when_on_start_fails(tmp_path):
    spec = opts(dump_holes=str(tmp_path))
    with spec.open_trace(SYNTHETIC) as tr, pytest.raises(KeyboardInterrupt):
        run(spec, tr, on_start=lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert list(tmp_path.iterdir()) == []


def test_run_refuses_a_live_spec():
    with pytest.raises(ShadowError, match="driven by the engine"):
        run(live(), SimpleNamespace(path="x", header=H16))
