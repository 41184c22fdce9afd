"""kv_aware's compiled serial loop against the reference path (its router object, one request at
a time): the same decisions, figures and index peak, with speculations that outlive a skipped
request handed back and forth."""

from __future__ import annotations

import pytest

from shadow.sim.fleet import run as fleet_run
from shadow.sim.fleet.router import parse_router
from shadow.sim.fleet.run import FleetSetup, run_fleet
from shadow.sim.core.results import CacheSpec


@pytest.mark.parametrize("policy, size", [("lru", 250), ("arc", 400), ("vllm", 320),
                                          ("s3fifo", 2000)])
@pytest.mark.parametrize("router", ["kv_aware", "kv_aware:speculative=false,ttl=0.5"])
def test_compiled_equals_reference(synth_small, synth_ft, monkeypatch, policy, size, router):
    setup = FleetSetup(dict(trace_name=synth_small, threads=1), path=synth_small)
    spec = CacheSpec(policy, size)
    fast = run_fleet([spec], synth_ft, 3, parse_router(router), setup)[0]
    monkeypatch.setattr(fleet_run, "_REFERENCE_ONLY", True)
    ref = run_fleet([spec], synth_ft, 3, parse_router(router), setup)[0]
    assert fast.result_line() == ref.result_line()
    assert [p.result_line() for p in fast.replicas] == [p.result_line() for p in ref.replicas]
    assert fast.requests == ref.requests


def test_a_skipped_request_leaves_its_speculation(synth_small, synth_ft):
    """With caches smaller than some requests, a skipped request's blocks stay speculated on its
    replica: the index (and its peak) holds them for the ttl."""
    setup = FleetSetup(dict(trace_name=synth_small, threads=1), path=synth_small)
    spec = CacheSpec("lru", 250)
    with_spec = run_fleet([spec], synth_ft, 3, parse_router("kv_aware:ttl=1000"), setup)[0]
    without = run_fleet([spec], synth_ft, 3, parse_router("kv_aware:speculative=false"),
                        setup)[0]
    assert with_spec.total.n_req_skipped > 0
    assert with_spec.index_peak > without.index_peak
