"""Each router model against hand-traced decisions from its source's rules (docs/fleet.md), the
registry's invariants, and the consistent-hash port against values the real Rust code gives."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from shadow.errors import ShadowError
from shadow.sim.fleet.router import (MAX_REPLICAS, ROUTERS, FleetContext, check_replicas,
                                     parse_router, parse_router_list, router_specs)
from tests.sim.fleet._view import FakeView, query

ROOT = Path(__file__).resolve().parents[3]


def make(text: str, n: int, names=None, B: int = 16):
    ctx = FleetContext(tuple(names or [f"r{i}" for i in range(n)]), B)
    return parse_router(text).make(n, ctx)


def test_registry_specs_and_docs():
    doc = (ROOT / "docs" / "fleet.md").read_text()
    for name, spec in router_specs().items():
        assert spec.description and spec.source
        assert f"### {name}" in doc, f"docs/fleet.md has no section for {name}"
        make(name, 2)                                  # builds with its defaults


@pytest.mark.parametrize("text, words", [
    ("nope", "unknown router 'nope'"),
    ("cache_aware:cache_thresh=0.1", "unknown parameter 'cache_thresh'"),
    ("cache_aware:cache_threshold=x", "bad value 'x' for cache_threshold"),
    ("cache_aware:cache_threshold=2", "cache_threshold must be in [0, 1]"),
    ("consistent_hash:key=cookie", "key must be header or body"),
    ("dynamo:overlap_score_credit=1.5", "between 0.0 and 1.0"),
    ("kv_aware:ttl=-1", "ttl must be >= 0"),
])
def test_bad_router_text_is_one_shadow_error(text, words):
    with pytest.raises(ShadowError, match=None) as e:
        parse_router(text)
    assert words in str(e.value)


def test_router_list_and_per_router_params():
    got = parse_router_list("random,cache_aware",
                            ("cache_aware:cache_threshold=0.7", "random:seed=4"))
    assert [c.name for c in got] == ["random", "cache_aware"]
    assert got[1].params["cache_threshold"] == 0.7 and got[0].params["seed"] == 4
    assert got[1].label == "cache_aware:cache_threshold=0.7"
    # k=v without a router name is every router's: round_robin has no seed
    with pytest.raises(ShadowError, match="router round_robin: unknown parameter 'seed'"):
        parse_router_list("random,round_robin", ("seed=1",))
    with pytest.raises(ShadowError, match="dynamo is not in --router"):
        parse_router_list("random", ("dynamo:seed=1",))
    with pytest.raises(ShadowError, match="twice"):
        parse_router_list("random,random")
    for bad in (0, MAX_REPLICAS + 1, -3):
        with pytest.raises(ShadowError, match="--replicas must be between 1 and 4096"):
            check_replicas(bad)
    assert check_replicas(MAX_REPLICAS) == MAX_REPLICAS


def test_round_robin_turns():
    r = make("round_robin", 3)
    v = FakeView(3)
    assert [r.route(query([1]), v) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_random_is_seeded_and_uniform():
    a = [make("random:seed=5", 4).route(query([1]), FakeView(4)) for _ in range(1)]
    r1, r2 = make("random:seed=5", 4), make("random:seed=5", 4)
    v = FakeView(4)
    s1 = [r1.route(query([1]), v) for _ in range(4000)]
    assert s1 == [r2.route(query([1]), v) for _ in range(4000)]
    assert a[0] == s1[0]
    assert all(900 < c < 1100 for c in Counter(s1).values())


def test_power_of_two_takes_the_less_loaded_of_two_distinct():
    r = make("power_of_two:seed=1", 3)
    v = FakeView(3, in_flight=[5, 0, 9])
    picks = Counter(r.route(query([1]), v) for _ in range(3000))
    # replica 2 (most loaded) never wins; replica 0 only against replica 2 (a third of pairs)
    assert picks[2] == 0
    assert 800 < picks[0] < 1200 and picks[1] > 1800
    assert make("power_of_two", 1).route(query([1]), FakeView(1)) == 0


def test_least_load_draws_among_the_least_loaded():
    r = make("least_load:seed=2", 4)
    v = FakeView(4, in_flight=[3, 1, 1, 2])
    assert set(r.route(query([1]), v) for _ in range(200)) == {1, 2}


# Values the real code gives: vllm-router 0.1.17 src/policies/consistent_hash.rs
# (ConsistentHashPolicy::fbi_hash, compiled with rustc 1.95 from the sdist).
FBI = {"http://w1:8000:0": 0x33F2D09E5831D9E2, "abc": 0xCA00380DC6CD9F55,
       "header:x-session-id:17": 0xBC80BE55AF5E7F30, "": 0xC0663E029346E424,
       "r0:159": 0xDFA013693A55B059}


def test_fbi_hash_equals_the_rust_code():
    from shadow.sim.fleet.consistent_hash import fbi_hash, furc_hash
    for key, want in FBI.items():
        assert fbi_hash(key) == want, key
    assert (furc_hash("abc", 10), furc_hash("abc", 8388607)) == (5, 6730815)


def test_consistent_hash_keys_and_stickiness():
    from shadow.sim.fleet.consistent_hash import Ring, fbi_hash, hash_key
    names = ["http://a:1", "http://b:2", "http://c:3"]
    r = make("consistent_hash", 3, names)
    v = FakeView(3)
    q = query([1], session=17, user=4)
    assert hash_key(q, "header") == "header:x-session-id:17"
    assert hash_key(q, "body") == "user:4"
    assert hash_key(query([1], user=4), "header") == "header:x-user-id:4"
    ring = Ring(names)
    # the ring by hand: the first of the 3 x 160 positions at or after the key's hash
    pos = sorted((fbi_hash(f"{u}:{i}"), k) for k, u in enumerate(names) for i in range(160))
    h = fbi_hash("header:x-session-id:17")
    want = next((k for p, k in pos if p >= h), pos[0][1])
    assert ring.lookup("header:x-session-id:17") == want
    assert {r.route(q, v) for _ in range(5)} == {want}
    spread = Counter(r.route(query([1], session=s), v) for s in range(3000))
    assert len(spread) == 3 and min(spread.values()) > 600


def test_sticky_least_loaded_sessions():
    from shadow.sim.fleet.consistent_hash import fbi_hash
    names = ["r0", "r1"]
    r = make("sticky_least_loaded:ttl=100", 2, names)
    v = FakeView(2)
    # a new session: both at 0 sessions, the higher rendezvous weight wins
    w = [fbi_hash(f"7:{n}") for n in names]
    first = 0 if w[0] >= w[1] else 1
    assert r.route(query([1], session=7, t=0.0), v) == first
    # the next new session goes to the other replica (fewest active sessions)
    assert r.route(query([1], session=8, t=1.0), v) == 1 - first
    # sessions stick while active
    assert r.route(query([1], session=7, t=50.0), v) == first
    # at t=120 the sweep (60 s since the first request) forgets session 8 (idle 119 s >= 100)
    # but not 7 (idle 70 s); 8 comes back new, to the replica without a session
    assert r.route(query([1], session=8, t=120.0), v) == 1 - first
    assert r.counts == [1, 1]
    # no session, no user: balanced, not recorded
    r.route(query([1], index=3, t=121.0), v)
    assert r.counts == [1, 1] and len(r.sessions) == 2


def test_cache_aware_prefix_threshold_and_balance():
    r = make("cache_aware:cache_threshold=0.5,balance_abs_threshold=2,"
             "balance_rel_threshold=1.5,eviction_interval_secs=0", 3)
    v = FakeView(3, in_flight=[0, 0, 0])
    # cold: nothing matches, the least loaded (first among equals) gets it and the tree learns
    assert r.route(query([1, 2, 3, 4]), v) == 0
    v.flight = [2, 0, 0]
    # 3 of 4 blocks match on replica 0 (rate 0.75 > 0.5): it wins despite its load
    assert r.route(query([1, 2, 3, 9]), v) == 0
    # 1 of 4 blocks (0.25): the least loaded
    assert r.route(query([1, 7, 8, 9]), v) == 1
    # imbalanced (5 - 0 > 2 and 5 > 0 * 1.5): the least loaded even with a full match
    v.flight = [5, 1, 0]
    assert r.route(query([1, 2, 3, 4]), v) == 2
    assert r.tree.match([1, 2, 3, 4], 2) == 4 and r.tree.match([1, 7], 1) == 2


def test_cache_aware_tree_evicts_oldest_leaves_to_the_budget():
    from shadow.sim.fleet.cache_aware import BlockTree
    t = BlockTree(2)
    t.insert([1, 2, 3], 0)        # stamp 1 on 1..3
    t.insert([1, 2, 4, 5], 0)     # 4, 5 new: stamp 2
    t.insert([1, 2, 3], 0)        # 3 restamped 3
    t.insert([1, 6], 1)
    assert t.size == [5, 2]
    t.evict(3)                    # oldest leaf of replica 0: 5 (2), then 4 (2): [1, 2, 3] left
    assert t.size == [3, 2]
    assert t.match([1, 2, 3], 0) == 3 and t.match([1, 2, 4], 0) == 2
    assert t.match([1, 6], 1) == 2
    t.evict(0)
    assert t.size == [0, 0] and not t.owners


def test_cache_aware_eviction_runs_on_the_trace_clock():
    r = make("cache_aware:max_tree_size=128,eviction_interval_secs=10", 2, B=16)  # 1 block
    v = FakeView(2)
    r.route(query([1, 2, 3], t=0.0), v)
    r.route(query([1, 2, 3], t=5.0), v)
    assert r.tree.size[0] == 3
    v.flight = [1, 0]
    r.route(query([7], t=10.0), v)      # the pass at t=10 runs first: replica 0 down to 1 block
    assert r.tree.size[0] == 1


def test_kv_aware_longest_prefix_last_among_equals_and_fallback():
    r = make("kv_aware:speculative=false", 3)
    v = FakeView(3, in_flight=[2, 1, 1], resident=[{1, 2}, {1, 2, 3}, {1, 2, 3, 5}])
    assert r.route(query([1, 2, 3, 4]), v) == 2          # 3, 3 on r1, r2: the last of them
    assert r.route(query([9, 1]), v) == 1                # no match: least loaded, first of equals
    assert r.route(query([]), v) == 1
    assert make("kv_aware", 1).route(query([5]), FakeView(1)) == 0


def test_kv_aware_speculation_is_seen_until_its_ttl():
    r = make("kv_aware:ttl=2.0", 2)
    v = FakeView(2, resident=[{1}, set()])
    assert r.route(query([1, 2, 3], t=0.0), v) == 0      # r0 holds 1; speculates 2, 3 on r0
    # before r0 stores them, a request for 1, 2, 3 sees all three on r0
    assert list(r.index.prefix(query([1, 2, 3], t=1.0), v)) == [3, 0]
    assert list(r.index.prefix(query([1, 2, 3], t=2.5), v)) == [1, 0]   # expired


def test_kv_aware_lag_hides_new_stores():
    r = make("kv_aware:speculative=false,lag=1.0", 2)
    v = FakeView(2, resident=[{1, 2}, set()])
    r.stored(0, __import__("numpy").array([2]), 10.0, v)
    assert list(r.index.prefix(query([1, 2], t=10.5), v)) == [1, 0]
    assert list(r.index.prefix(query([1, 2], t=11.0), v)) == [2, 0]


def test_llm_d_weighted_scores():
    r = make("llm_d:refresh=0", 3)
    v = FakeView(3, waiting=[4, 0, 2], usage=[0.25, 0.0, 0.25],
                 resident=[{1, 2, 3, 4}, {1}, set()])
    s = r.scores(query([1, 2, 3, 4]), v)
    # prefix 2 * (4/4, 1/4, 0); queue (4 - q) / 4; kv 1 - usage
    assert s == pytest.approx([2.0 + 0.0 + 0.75, 0.5 + 1.0 + 1.0, 0.0 + 0.5 + 0.75])
    assert r.route(query([1, 2, 3, 4]), v) == 0


def test_llm_d_reads_the_last_scrape():
    r = make("llm_d:refresh=0.05", 2)
    v = FakeView(2, waiting=[0, 3])
    r.scores(query([1], t=1.00), v)
    v.wait = [3, 0]
    assert r.queues == [0, 3]
    r.scores(query([1], t=1.04), v)
    assert r.queues == [0, 3]                 # 40 ms later: the same scrape
    r.scores(query([1], t=1.05), v)
    assert r.queues == [3, 0]


def test_dynamo_cost_and_argmin():
    r = make("dynamo", 2, B=16)
    v = FakeView(2, prefill=[32, 0], decode=[5, 0], resident=[{1, 2, 3}, set()])
    q = query([1, 2, 3, 4], tokens=64)
    # r0: max(0, (32 + 64)/16 - 3) + 5 = 8; r1: 64/16 + 0 = 4
    assert r.costs(q, v) == pytest.approx([8.0, 4.0])
    assert r.route(q, v) == 1
    v.dec = [0, 0]
    v.pre = [0, 0]
    assert r.costs(q, v) == pytest.approx([1.0, 4.0])
    assert r.route(q, v) == 0


def test_dynamo_ties_are_drawn():
    r = make("dynamo:seed=3", 3)
    v = FakeView(3)
    assert set(r.route(query([1, 2]), v) for _ in range(300)) == {0, 1, 2}


def test_recorded_follows_the_trace():
    r = make("recorded", 3)
    q = query([1])
    q.replica = 2
    assert r.route(q, FakeView(3)) == 2
    q.replica = 5
    with pytest.raises(ShadowError, match="names replica 5"):
        r.route(q, FakeView(3))


def test_every_registered_router_is_tested_here():
    src = Path(__file__).read_text()
    for name in ROUTERS:
        assert f'"{name}' in src, name


def test_kv_aware_cost_rule_of_the_release():
    """vllm-router 0.1.17: (new prefill + active prefill) * (in flight + 1), lowest first."""
    r = make("kv_aware:score=cost", 2, B=16)
    v = FakeView(2, in_flight=[3, 0], resident=[{1, 2, 3}, set()])
    q = query([1, 2, 3, 4], tokens=64, t=0.0)
    # r0: 3 blocks credited (at most (64 - 1) // 16 = 3) -> 16 new tokens, x4; r1: 64 x1
    assert r.costs(q, v)[0] == [64.0, 64.0]
    assert r.route(q, v) == 0                        # equal costs: the first
    v.flight = [4, 0]
    assert r.route(q, v) == 1
    r.placed(1, 5_000_000)                           # 64 new tokens in prefill on r1 until 5 s
    v.flight = [4, 1]
    assert r.costs(query([1, 2, 3, 4], tokens=64, t=1.0), v)[0] == [80.0, 256.0]
    assert r.costs(query([1, 2, 3, 4], tokens=64, t=5.0), v)[0] == [80.0, 128.0]
    # a prompt of exactly one block: its last token is recomputed, nothing credited
    assert r.new_prefill(query([1], tokens=16), 1) == 16
