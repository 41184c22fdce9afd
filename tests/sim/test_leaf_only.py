"""The ``leaf-only`` modifier (radix-tree eviction): a block leaves only once no resident block
names it as its prefix parent (shadow/sim/core/policy.pxd, ``leaf``; docs/policies.md "Leaf-only").

Which policies take it is the registry's (honours pins, reads no future); the policies checked
event by event against the reference are those of ``test_live_oracle.CASES`` that take it.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.sim.registry import leaf_only_refusal, make_policy, policy_specs
from tests.sim._traces import batch_of, random_trace
from tests.sim.policy_mixin import prefix_traces, raw_traces, run_both
from tests.sim.test_live_oracle import CASES, _check_coverage, _events, one_at_a_time
from tests.tiers import unit_rows

LEAF = "leaf-only=1"


def _takes_leaf(name: str) -> bool:
    return leaf_only_refusal(policy_specs()[name]) is None


#: every built policy that takes the modifier, with its reference parameters
ELIGIBLE = [name for name in policy_specs() if _takes_leaf(name)]
def _batched(name: str) -> bool:
    """The reference takes a batch of victims at once (``evict_n``): from one pinned set, where
    the Cython policy sees the holds its earlier victims of the batch released."""
    return hasattr(make_reference(name, 8, dict(CASES).get(name) or None), "evict_n")


#: those whose reference follows them event by event under leaf-only
EXACT = [(name, params) for name, params in CASES if _takes_leaf(name) and not _batched(name)]
#: strict_pins policies never pass over an evictable leaf for a held block: for them the
#: resident set stays prefix-closed on any prefix trace, pins on or off
STRICT = [name for name in ELIGIBLE if policy_specs()[name].strict_pins]


def _params(name: str, extra: str = LEAF) -> str:
    own = dict(CASES).get(name, "")
    return ",".join(p for p in (own, extra) if p)


# ---- hand-traced ----

def test_a_parent_with_a_resident_child_is_never_evicted_lru_prefix_order():
    # cap 3, prefix order: [1,2,3] leaves 1 least recent.  [4] needs one block: plain lru evicts
    # the root 1 and keeps its children, then 2 for [5], so 3 is a gap-spanning hit of the last
    # request; leaf-only lru evicts 3, the only leaf, then 2 for [5]: 1 stays while a child of
    # it is resident, and is the last request's prefix hit.
    reqs = [[1, 2, 3], [4], [5], [1, 2, 3]]
    sim = Simulator([CacheSpec("lru", 3), CacheSpec("lru", 3, LEAF)], replay_order="prefix-order")
    plain, leaf = sim.runs
    sim.feed(batch_of(reqs[:1]))
    assert leaf.policy.held_ids() == [1, 2] and leaf.policy.n_held == 2
    assert leaf.policy.pin_count(1) == 0 and leaf.policy.n_hold_only == 2
    sim.feed(batch_of(reqs[1:2], first_request=1))
    assert sorted(plain.policy.resident_ids()) == [2, 3, 4]
    assert sorted(leaf.policy.resident_ids()) == [1, 2, 4]
    assert leaf.policy.held_ids() == [1]
    sim.feed(batch_of(reqs[2:3], first_request=2))
    assert sorted(leaf.policy.resident_ids()) == [1, 4, 5]
    assert leaf.policy.held_ids() == [] and leaf.policy.n_pinned == 0
    sim.feed(batch_of(reqs[3:], first_request=3))
    p, l = sim.results()
    assert (p.n_hits, p.n_prefix_hits) == (1, 0)      # 3 behind the missing 1 and 2
    assert (l.n_hits, l.n_prefix_hits) == (1, 1)      # 1 hit, as its own prefix


def test_parent_recorded_at_insert_and_released_with_its_last_child():
    sim = Simulator([CacheSpec("fifo", 8, LEAF)], replay_order="prefix-order")
    sim.feed(batch_of([[1, 2, 3], [1, 2, 4]]))
    pol = sim.runs[0].policy
    assert [pol.leaf_parent(b) for b in (1, 2, 3, 4)] == [0, 1, 2, 2]
    assert pol.held_ids() == [1, 2]
    pol.py_remove(3)
    assert pol.held_ids() == [1, 2]                   # 4 is still a child of 2
    pol.py_remove(4)
    assert pol.held_ids() == [1]
    assert pol.n_pinned == 1 and pol.n_hold_only == 1


def test_request_pins_and_holds_are_told_apart():
    # a held root pinned by a running request: one request pin, one hold; the release drops
    # the pin only, and the hold goes with the last child
    sim = Simulator([CacheSpec("lru", 8, LEAF)])
    a = sim.admit([1, 2])
    pol = sim.runs[0].policy
    assert pol.pin_count(1) == 1 and pol.held_ids() == [1]
    assert (pol.n_pinned, pol.n_held, pol.n_hold_only) == (2, 1, 0)
    sim.release(a)
    assert pol.pin_count(1) == 0 and pol.held_ids() == [1]
    assert (pol.n_pinned, pol.n_held, pol.n_hold_only) == (1, 1, 1)
    assert pol.py_evict() == 2 and pol.held_ids() == [] and pol.n_pinned == 0


def test_room_held_by_running_requests_counts_request_pins_only():
    # cap 3: [1,2] runs; its root is held as a parent *and* pinned.  [5] fits in the free slot;
    # after [1,2] ends, [6] must evict: held 1 is not room a request holds, so it is served by
    # evicting the leaf 2 first (a live admission is skipped only for request pins)
    sim = Simulator([CacheSpec("lru", 3, LEAF)])
    a = sim.admit([1, 2])
    b = sim.admit([5])
    assert b.served == [True]
    assert sim.admit([6]).served == [False]           # every block pinned by a running request
    sim.release(a)
    c = sim.admit([6])
    assert c.served == [True]
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 5, 6]


@pytest.mark.parametrize("params,message", [
    ("leaf-only=maybe", "policy lru: bad value 'maybe' for leaf-only: expected bool"),
])
def test_bad_modifier_value(params, message):
    with pytest.raises(ShadowError) as e:
        make_policy("lru", 8, params)
    assert str(e.value) == message


def test_refused_for_oracles_session_policies_and_policies_that_ignore_pins():
    names = [n for n in policy_specs() if not _takes_leaf(n)]
    assert "belady" in names and "belady_compute" in names
    for name in names:
        with pytest.raises(ShadowError) as e:
            make_policy(name, 8, LEAF)
        assert str(e.value) == (f"policy {name}: leaf-only needs "
                                f"{leaf_only_refusal(policy_specs()[name])}")
        assert "\n" not in str(e.value)


def test_off_is_the_policy_unchanged():
    reqs = random_trace(np.random.default_rng(5), 300)
    sim = Simulator([CacheSpec("lru", 40), CacheSpec("lru", 40, "leaf-only=false")])
    sim.feed(batch_of(reqs))
    a, b = sim.results()
    assert not sim.runs[1].policy.leaf_only
    assert (a.n_hits, a.n_eviction) == (b.n_hits, b.n_eviction)


# ---- properties over random traces ----

def _prefix_closed(pol) -> bool:
    resident = set(pol.resident_ids())
    return all(pol.leaf_parent(b) in resident or pol.leaf_parent(b) == 0 for b in resident)


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("name", unit_rows(STRICT, 10, first=5))
def test_resident_set_stays_prefix_closed(name, pin):
    reqs = random_trace(np.random.default_rng(11), 250, max_len=10)
    for order in ("deepest-first", "prefix-order"):
        sim = Simulator([CacheSpec(name, c, _params(name)) for c in (6, 17, 40)], pin=pin,
                        replay_order=order)
        for i, req in enumerate(reqs):
            sim.feed(batch_of([req], first_request=i))
            for run in sim.runs:
                assert _prefix_closed(run.policy), f"{name} {run.policy.capacity} at {i}"
        assert all(r.error is None for r in sim.results())


@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("name", unit_rows(ELIGIBLE, 10))
def test_gap_spanning_and_first_miss_ratios_equal(name, pin):
    # with distinct prefix ids every hit is then a prefix hit: no block outlives its parent
    rng = np.random.default_rng(7)
    for order in ("deepest-first", "prefix-order"):
        reqs = random_trace(rng, 400, max_len=14)
        sim = Simulator([CacheSpec(name, c, _params(name)) for c in (8, 24, 64)], pin=pin,
                        replay_order=order)
        sim.feed(batch_of(reqs))
        for r in sim.results():
            assert r.error is None
            assert r.n_hits == r.n_prefix_hits, f"{name} {r.spec.capacity} {order}"
            assert r.n_eviction > 0


def test_without_leaf_only_the_ratios_differ():
    # the traces of the test above do leave gaps without the modifier (it can fail)
    reqs = random_trace(np.random.default_rng(7), 400, max_len=14)
    sim = Simulator([CacheSpec(n, 24) for n in ("fifo", "random", "mru")])
    sim.feed(batch_of(reqs))
    for r in sim.results():
        assert r.n_hits > r.n_prefix_hits, r.spec.policy


# ---- differential vs the reference loop ----

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.differing_executors])


@pytest.mark.parametrize("name,params", unit_rows(EXACT, 12))
@settings(max_examples=30, **SETTINGS)
@given(trace=prefix_traces, capacity=st.integers(1, 20), pin=st.booleans(),
       order=st.sampled_from(["deepest-first", "prefix-order"]))
def test_differential_prefix_traces(name, params, trace, capacity, pin, order):
    got, want, gc, wc, sim, ref = run_both(name, _params(name), capacity, trace, pin=pin,
                                           replay_order=order)
    assert got == want
    assert gc == wc
    assert sorted(sim.runs[0].policy.held_ids()) == sorted(ref.held())


@pytest.mark.parametrize("name,params", unit_rows(EXACT, 6, first=3))
@settings(max_examples=20, **SETTINGS)
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans())
def test_differential_raw_ids(name, params, trace, capacity, pin):
    # repeated and unsorted ids: cycles of parents, best-effort evictions of held blocks
    got, want, gc, wc, sim, ref = run_both(name, _params(name), capacity, trace, pin=pin)
    assert got == want
    assert gc == wc
    assert sorted(sim.runs[0].policy.held_ids()) == sorted(ref.held())


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(2))
def test_live_admit_release_equal_the_reference(seed):
    specs = [CacheSpec(name, cap, _params(name)) for name, _ in EXACT for cap in (4, 8, 16)]
    sim = Simulator(specs, cost_model="position", threads=1)
    refs = [RefCache(make_reference(s.policy, s.capacity, s.params), s.capacity,
                     cost_model="position") for s in specs]

    def same_holds(e: int) -> None:
        for spec, run, ref in zip(specs, sim.runs, refs):
            assert sorted(run.policy.held_ids()) == sorted(ref.held()), \
                f"{spec.policy} {spec.capacity} event {e}"

    one_at_a_time(sim, refs, _events(seed, True), same_holds)
    _check_coverage(sim)


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (["-a", "belady", "--algo-params", "belady:leaf-only=1"],
     "policy belady: leaf-only needs a policy that honours pins and reads no future"),
    (["-a", "lru", "--algo-params", "leaf-only=2"],
     "policy lru: bad value '2' for leaf-only: expected bool"),
    (["-a", "sglang", "--algo-params", "leaf-only=off"],
     "policy sglang: leaf-only cannot be turned off"),
])
def test_simulate_refuses_in_one_line(args, message, tmp_path):
    import subprocess
    import sys

    from tests.sim._traces import ROOT

    out = tmp_path / "results.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-c", "8k", *args, "-o",
                        str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert message in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.slow
def test_simulate_runs_a_leaf_only_cache(tmp_path):
    import subprocess
    import sys

    from tests.sim._traces import ROOT

    out = tmp_path / "results.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-c", "2k", "-a",
                        "lru,sglang", "--algo-params", "lru:leaf-only=1", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "leaf-only=1" in out.read_text()
