"""One replica: every router sends every request to it, and the fleet's figures are the single
cache's exactly (the serve loop, under each timing), for several policies."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.sim.core.simulator import run_trace
from shadow.sim.fleet.router import ROUTERS, parse_router
from shadow.sim.fleet.run import FleetSetup, run_fleet
from shadow.sim.core.results import CacheSpec
from shadow.sim.timing.service import parse_service
from shadow.sim.core.simulator import Simulator
from shadow.sim.timing.run import run_trace_recorded
from shadow.trace import Batch, LcpWriter, open_trace
from tests.tiers import unit_rows

SPECS = [CacheSpec("lru", 300), CacheSpec("s3fifo", 300), CacheSpec("arc", 1200),
         CacheSpec("vllm", 600), CacheSpec("sieve", 1200)]
#: routers whose rules need more than the synthetic trace gives (a merged recording)
NEEDS_MERGED = {"recorded"}


def _single(path: str, timing: str, specs=SPECS, service=None) -> list[str]:
    lookup = "all" if timing == "serial" else "vllm"
    with open_trace(path) as tr:
        sim = Simulator(specs, trace_name=path, lookup=lookup,
                        block_size_tokens=tr.header.block_size_tokens, threads=1)
        if timing == "serial":
            run_trace(sim, tr, path)
        else:
            run_trace_recorded(sim, tr, path, tr.header.block_size_tokens, service=service)
    return [r.result_line() for r in sim.results()]


def _fleet(path: str, router: str, timing: str, specs=SPECS, service=None):
    lookup = "all" if timing == "serial" else "vllm"
    with open_trace(path) as tr:
        kw = dict(trace_name=path, lookup=lookup, block_size_tokens=tr.header.block_size_tokens,
                  threads=1)
        # NOTE: the open trace, as the CLI passes it: streamed where the driver can
        return run_fleet(specs, tr, 1, parse_router(router),
                         FleetSetup(kw, timing=timing, service=service, path=path))


ROUTABLE = [r for r in ROUTERS if r not in NEEDS_MERGED] + ["kv_aware:score=cost"]
SERIAL = [r for r in ROUTABLE if not parse_router(r).spec.needs_load]


@pytest.mark.parametrize("router", unit_rows(SERIAL, 3))
def test_serial_equals_simulate(synth_small, router):
    want = _single(synth_small, "serial")
    got = _fleet(synth_small, router, "serial")
    assert [f.total.result_line() for f in got] == want
    for f in got:
        assert f.requests == [f.total.n_req + f.total.n_req_skipped]
        assert f.fields()["replicas"] == 1


@pytest.mark.parametrize("router", unit_rows(ROUTABLE, 4))
def test_model_timing_equals_simulate(synth_small, router):
    service = parse_service("concurrency=4")
    want = _single(synth_small, "model", service=service)
    got = _fleet(synth_small, router, "model", service=service)
    assert [f.total.result_line() for f in got] == want
    assert max(f.peak_running[0] for f in got) <= 4


def _as_recording(src: str, dst) -> str:
    """``src`` with the service model's start and completion times as its recorded ones."""
    with open_trace(src) as tr:
        batches = list(tr)
        B = tr.header.block_size_tokens
    rec = np.concatenate([b.records for b in batches])
    arr = np.where(rec["start_time_us"] >= 0, rec["start_time_us"], rec["complete_time_us"])
    start, done = parse_service("concurrency=3").schedule(arr, rec["input_length"],
                                                          rec["output_length"])
    out = []
    for b in batches:
        r = b.records.copy()
        k = r.shape[0]
        r["start_time_us"], r["complete_time_us"] = start[:k], done[:k]
        r["type_id"] = 0          # NOTE: the writer here names no request types
        start, done = start[k:], done[k:]
        out.append(Batch(r, b.offsets, b.block_ids, b.next_access, b.first_request,
                         b.first_vtime))
    with LcpWriter(str(dst), block_size_tokens=B) as w:
        for b in out:
            w.write_batch(b)
    return str(dst)


@pytest.mark.parametrize("router", unit_rows(["round_robin", "least_load", "cache_aware", "kv_aware",
                                    "kv_aware:score=cost", "llm_d", "dynamo"], 4))
def test_recorded_timing_equals_simulate(synth_small, tmp_path, router):
    path = _as_recording(synth_small, tmp_path / "rec.lcp")
    want = _single(path, "recorded")
    got = _fleet(path, router, "recorded")
    assert [f.total.result_line() for f in got] == want
