"""The fleet driver with several replicas: each replica's figures are those of its share served
alone, the cache-reading path equals a plain loop over the live caches, the load and index
figures, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.fleet import probe_ref
from shadow.sim.fleet.router import parse_router
from shadow.sim.fleet.run import FleetSetup, _sub, prompt_blocks, run_fleet
from shadow.sim.core.results import CacheSpec
from shadow.sim.timing.service import parse_service
from shadow.sim.core.simulator import Simulator
from shadow.trace import Batch, open_trace
from tests.sim.fleet._view import FakeView, query

SPECS = [CacheSpec("lru", 400), CacheSpec("arc", 400)]


def _setup(path, ft, timing="serial", service=None):
    lookup = "all" if timing == "serial" else "vllm"
    return FleetSetup(dict(trace_name=path, lookup=lookup, block_size_tokens=ft.block_size,
                           threads=1), timing=timing, service=service, path=path)


@pytest.mark.parametrize("streamed", [True, False])
def test_round_robin_replicas_are_their_shares_served_alone(synth_small, synth_ft, streamed):
    ft = synth_ft
    if streamed:
        with open_trace(synth_small) as tr:
            got = run_fleet(SPECS, tr, 3, parse_router("round_robin"), _setup(synth_small, ft))
    else:
        got = run_fleet(SPECS, ft, 3, parse_router("round_robin"), _setup(synth_small, ft))
    for r in range(3):
        idx = np.arange(r, ft.n, 3)
        rec, off, ids, nxt = _sub(ft, idx, False)
        sim = Simulator(SPECS, trace_name=synth_small, threads=1)
        sim.feed(Batch(rec, off, ids, nxt))
        sim.close()
        for k, want in enumerate(sim.results()):
            assert got[k].replicas[r].result_line() == want.result_line()
    for f in got:
        assert f.requests == [len(range(r, ft.n, 3)) for r in range(3)]
        assert f.total.n_req + f.total.n_req_skipped == ft.n
        assert f.total.n_hits == sum(p.n_hits for p in f.replicas)
        fl = f.fields()
        assert fl["replicas"] == 3 and fl["router"] == "round_robin"
        assert float(fl["replica_hit_min"]) <= f.total.block_hit_ratio <= float(
            fl["replica_hit_max"])


def test_kv_aware_fleet_equals_a_plain_loop(synth_small, synth_ft):
    """Route each request by kv_aware's rule over the live caches (probe_ref), serve it in the
    chosen replica's own simulator: the same figures as the driver."""
    ft = synth_ft
    spec = CacheSpec("lru", 300)
    got = run_fleet([spec], ft, 3, parse_router("kv_aware:speculative=false"),
                    _setup(synth_small, ft))[0]
    sims = [Simulator([spec], trace_name=synth_small, threads=1) for _ in range(3)]
    pb = prompt_blocks(ft)
    counts = [0, 0, 0]
    for i in range(ft.n):
        a = int(ft.off[i])
        score = probe_ref.prefix_lengths([s.runs[0] for s in sims], ft.ids[a:a + int(pb[i])])
        best = max(score)
        pick = 2 - score[::-1].index(best) if best > 0 and pb[i] > 0 else 0
        counts[pick] += 1
        rec, off, ids, nxt = _sub(ft, np.array([i]), False)
        sims[pick].feed(Batch(rec, off, ids, nxt, first_request=i))
    for r, s in enumerate(sims):
        s.close()
        assert got.replicas[r].result_line() == s.results()[0].result_line()
    assert got.requests == counts


def test_model_timing_loads_and_index(synth_small, synth_ft):
    ft = synth_ft
    service = parse_service("concurrency=2,decode=20")
    got = run_fleet([CacheSpec("lru", 300)], ft, 4, parse_router("kv_aware"),
                    _setup(synth_small, ft, "model", service))[0]
    assert max(got.peak_running) <= 2 and sum(got.requests) == ft.n
    # without speculation the index is the replicas' resident blocks: at most their capacity
    plain = run_fleet([CacheSpec("lru", 300)], ft, 4, parse_router("kv_aware:speculative=false"),
                      _setup(synth_small, ft, "model", service))[0]
    assert 0 < plain.index_peak <= 4 * 300
    lb = run_fleet([CacheSpec("lru", 300)], ft, 4, parse_router("least_load"),
                   _setup(synth_small, ft, "model", service))[0]
    assert max(lb.requests) - min(lb.requests) <= ft.n // 4


def test_load_tracks_the_schedule():
    from shadow.sim.fleet.run import Load
    load = Load(2)
    load.routed(0, 10, 15, 30, 100, 4)
    load.routed(0, 30, 35, 50, 50, 2)
    load.advance(12)
    assert (load.in_flight(0), load.waiting(0), load.prefill_tokens(0)) == (2, 1, 150)
    load.advance(30)                     # the first completes as the second starts
    assert (load.in_flight(0), load.waiting(0), load.decode_blocks(0)) == (1, 0, 2)
    assert load.peak_running == [1, 0]
    load.advance(50)
    assert load.in_flight(0) == 0 and load.prefill_tokens(0) == 0


def test_recorded_timing_routes_at_the_arrival(synth_small, synth_ft):
    """A merged recording's arrival_time_us is when the router decided (before the engine
    queued and admitted the request): --timing recorded routes in arrival order, and by the
    admission where the arrival is unknown (a v1 trace)."""
    ft = synth_ft
    n = 6
    sub = type(ft)(*_sub(ft, np.arange(n), False), ft.header, ft.block_size)
    # admissions in the reverse of the arrivals: queued the longer the earlier they arrived
    sub.rec["arrival_time_us"] = 1_000 + 10 * np.arange(n)
    sub.rec["start_time_us"] = 2_000 - 10 * np.arange(n)
    sub.rec["complete_time_us"] = 3_000
    rr = parse_router("round_robin")
    got = run_fleet([CacheSpec("lru", 400)], sub, 2, rr, _setup(synth_small, ft, "recorded"))[0]
    assert got.assign.tolist() == [k % 2 for k in range(n)]
    # a router's clock is the routing time too (least_load reads the queries)
    seen: dict[int, float] = {}
    got = run_fleet([CacheSpec("lru", 400)], sub, 2, _Clocked(parse_router("least_load"), seen),
                    _setup(synth_small, ft, "recorded"))[0]
    assert seen == {k: (1_000 + 10 * k) / 1e6 for k in range(n)}
    sub.rec["arrival_time_us"] = -1
    got = run_fleet([CacheSpec("lru", 400)], sub, 2, rr, _setup(synth_small, ft, "recorded"))[0]
    assert got.assign.tolist() == [(n - 1 - k) % 2 for k in range(n)]


class _Clocked:
    """A router choice whose routers note each query's time (``seen[index] = t``)."""

    def __init__(self, choice, seen: dict[int, float]) -> None:
        self.choice, self.seen = choice, seen

    def __getattr__(self, key):
        return getattr(self.choice, key)

    def make(self, replicas, ctx):
        inner, seen = self.choice.make(replicas, ctx), self.seen

        class Noting:
            def __getattr__(self, key):
                return getattr(inner, key)

            def route(self, q, view):
                seen[q.index] = q.t
                return inner.route(q, view)

        return Noting()


def test_refusals_of_what_a_request_lacks(synth_small, synth_ft):
    """The driver's own refusals: what one request lacks (the run's settings are RunSpec's:
    tests/sim/test_run.py)."""
    ft = synth_ft
    timeless = type(ft)(ft.rec.copy(), ft.off, ft.ids, ft.nxt, ft.header, ft.block_size)
    timeless.rec["start_time_us"] = -1
    timeless.rec["complete_time_us"] = -1
    with pytest.raises(ShadowError, match="request 0 has no time, and router cache_aware needs"):
        run_fleet(SPECS, timeless, 2, parse_router("cache_aware"), _setup(synth_small, ft))
    run_fleet(SPECS, timeless, 2, parse_router("cache_aware:eviction_interval_secs=0"),
              _setup(synth_small, ft))
    with pytest.raises(ShadowError, match="no arrival time"):
        run_fleet(SPECS, timeless, 2, parse_router("round_robin"),
                  _setup(synth_small, ft, "model", parse_service(None)))


@pytest.mark.parametrize("timing", ["serial", "model"])
def test_run_drives_every_router_as_the_driver_does(synth_small, synth_ft, timing):
    """``run()`` of a spec with routers: one fleet per (router, cache), routers outer, each the
    driver's figures; the RESULT lines are the totals' with the fleet keys appended."""
    from shadow.sim.run import RunSpec, run

    routers = "round_robin,kv_aware" + (",least_load" if timing == "model" else "")
    spec = RunSpec.from_options(SPECS, timing=timing, threads=1, trace_name=synth_small,
                                replicas=3, router=routers,
                                router_params=["kv_aware:speculative=false"])
    seen = []
    with spec.open_trace(synth_small) as tr:
        got = run(spec, tr, progress=lambda a, r: seen.append((a, r)))
    choices = spec.router_choices
    assert [f.router for f in got.fleet] == [c.label for c in choices for _ in SPECS]
    assert [r is f.total for r, f in zip(got.caches, got.fleet)] == [True] * len(got.fleet)
    service = parse_service(None) if timing == "model" else None
    for k, choice in enumerate(choices):
        want = run_fleet(SPECS, synth_ft, 3, choice, _setup(synth_small, synth_ft, timing, service))
        mine = got.fleet[k * len(SPECS):(k + 1) * len(SPECS)]
        assert [f.result_line() for f in mine] == [f.result_line() for f in want]
    assert got.lines() == [f.result_line() for f in got.fleet]
    assert seen == sorted(seen) and seen[-1] == (len(choices) * int(synth_ft.off[-1]),
                                                 len(choices) * synth_ft.n)


def test_fake_view_prefix_matches_probe_rule():
    v = FakeView(2, resident=[{1, 2}, {1, 3}])
    assert v.prefix(query([1, 2, 3])).tolist() == [2, 1]


@pytest.mark.parametrize("router", ["consistent_hash", "sticky_least_loaded", "cache_aware",
                                    "random:seed=9"])
def test_streamed_equals_loaded(synth_small, synth_ft, router):
    with open_trace(synth_small) as tr:
        a = run_fleet(SPECS, tr, 3, parse_router(router), _setup(synth_small, synth_ft))
    b = run_fleet(SPECS, synth_ft, 3, parse_router(router), _setup(synth_small, synth_ft))
    assert [f.result_line() for f in a] == [f.result_line() for f in b]
    assert len({tuple(f.requests) for f in a}) == 1 and sum(a[0].requests) == synth_ft.n
