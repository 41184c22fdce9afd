"""``shadow simulate --replicas N --router R[,R...]`` through the command line: with one replica
every router's RESULT lines are ``simulate``'s with the fleet keys appended (serial, ``--timing
model`` and ``--timing recorded``); the table shows each router; ``--list-routers`` lists the
registry; ``-o`` takes the fleet's lines."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.sim.fleet.router import ROUTERS, parse_router
from shadow.sim.fleet.run import FLEET_KEYS
from shadow.sweep.store import parse_result_line
from tests.sim.fleet.test_one_replica import NEEDS_MERGED, _as_recording

#: every router that routes a trace which is not a merged recording
ROUTABLE = [r for r in ROUTERS if r not in NEEDS_MERGED]
SERIAL = [r for r in ROUTABLE if not parse_router(r).spec.needs_load]


def simulate(*args: str) -> str:
    r = CliRunner().invoke(cli, ["simulate", "--threads", "1", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def result_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("RESULT ")]


def split_fleet(line: str) -> tuple[str, dict[str, str]]:
    """A fleet RESULT line as (today's line, its fleet keys)."""
    head, sep, tail = line.partition(" router=")
    assert sep, line
    fleet = parse_result_line("RESULT router=" + tail)
    assert list(fleet) == list(FLEET_KEYS), line
    return head, fleet


def assert_one_replica_is_simulate(plain: str, fleet: str, routers: list[str]) -> None:
    want = result_lines(plain)
    got = result_lines(fleet)
    assert want and len(got) == len(routers) * len(want)
    for k, router in enumerate(routers):
        mine = [split_fleet(line) for line in got[k * len(want):(k + 1) * len(want)]]
        assert [head for head, _ in mine] == want, router
        for head, keys in mine:
            hit = parse_result_line(head)["block_hit_ratio"]
            assert keys["router"] == router and keys["replicas"] == "1"
            assert keys["replica_hit_min"] == keys["replica_hit_max"] == hit
            assert keys["req_imbalance"] == keys["prefill_imbalance"] == "1.0000"


@pytest.fixture(scope="module")
def converted(synth_small, tmp_path_factory) -> str:
    """The synthetic trace with next-access times (for belady)."""
    path = tmp_path_factory.mktemp("fleet-cli") / "synth-na.lcp"
    r = CliRunner().invoke(cli, ["convert", synth_small, str(path)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return str(path)


def test_serial_one_replica_is_simulate_for_every_router(converted):
    caches = ["-a", "lru,arc,vllm,belady", "-c", "300,1200"]
    plain = simulate("-t", converted, *caches)
    fleet = simulate("-t", converted, *caches, "--router", ",".join(SERIAL))
    assert_one_replica_is_simulate(plain, fleet, SERIAL)


def test_model_timing_one_replica_is_simulate_for_every_router(synth_small):
    caches = ["-a", "lru,arc,vllm", "-c", "300,1200", "--timing", "model", "--service",
              "concurrency=4"]
    plain = simulate("-t", synth_small, *caches)
    fleet = simulate("-t", synth_small, *caches, "--router", ",".join(ROUTABLE))
    assert_one_replica_is_simulate(plain, fleet, ROUTABLE)


def test_recorded_timing_one_replica_is_simulate(synth_small, tmp_path):
    path = _as_recording(synth_small, tmp_path / "rec.lcp")
    routers = ["round_robin", "least_load", "cache_aware", "kv_aware", "llm_d", "dynamo"]
    caches = ["-a", "lru,vllm", "-c", "600", "--timing", "recorded"]
    plain = simulate("-t", path, *caches)
    fleet = simulate("-t", path, *caches, "--router", ",".join(routers))
    assert_one_replica_is_simulate(plain, fleet, routers)


def test_router_parameters_label_the_lines(synth_small):
    out = simulate("-t", synth_small, "-a", "lru", "-c", "600", "--replicas", "3", "--router",
                   "random,kv_aware", "--router-params", "random:seed=7",
                   "--router-params", "kv_aware:ttl=1,speculative=false")
    keys = [split_fleet(line)[1] for line in result_lines(out)]
    assert [k["router"] for k in keys] == ["random:seed=7", "kv_aware:ttl=1,speculative=false"]
    assert {k["replicas"] for k in keys} == {"3"}
    assert "router random:seed=7, 3 replicas" in out


def test_table_shows_each_router_and_the_fleet_figures(synth_small):
    out = simulate("-t", synth_small, "-a", "lru,arc", "-c", "300,600", "--replicas", "2",
                   "--router", "round_robin,kv_aware", "--format", "table")
    lines = out.splitlines()
    for router in ("round_robin", "kv_aware"):
        head = lines.index(f"router {router}, 2 replicas (fleet totals):")
        assert lines[head + 1] == "block hit ratio:"
        assert lines[head + 3].split()[0] == "lru" and lines[head + 4].split()[0] == "arc"
    fleet = lines.index(next(x for x in lines if x.startswith("router ") and "index peak" in x))
    rows = [x.split() for x in lines[fleet + 1:fleet + 5]]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("round_robin", "lru", "300"), ("round_robin", "arc", "300"),
        ("round_robin", "lru", "600"), ("round_robin", "arc", "600")]
    assert int(rows[0][-1].replace(",", "")) == 0                       # no index
    kv = [x.split() for x in lines[fleet + 5:fleet + 9]]
    assert {r[0] for r in kv} == {"kv_aware"} and all(int(r[-1].replace(",", "")) > 0 for r in kv)


def test_list_routers_names_every_router():
    out = simulate("--list-routers")
    listed = [line.split()[0] for line in out.splitlines()[1:] if not line.strip().startswith("source:")]
    assert listed == list(ROUTERS)


def test_output_file_takes_the_fleet_lines(synth_small, tmp_path):
    out = tmp_path / "results.txt"
    printed = simulate("-t", synth_small, "-a", "lru", "-c", "600", "--replicas", "2",
                       "--router", "round_robin,cache_aware", "-o", str(out))
    assert out.read_text().splitlines() == result_lines(printed)
    assert len(result_lines(printed)) == 2
