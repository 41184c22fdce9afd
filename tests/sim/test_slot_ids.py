"""A policy's per-slot block ids (``Policy.slot_ids``): 32 bits while every id stored fits
(1 .. 2**31 - 1), 64 bits for good from the first one that does not.  Ids jump past 2**31, 2**32
and up to 2**62 partway through a run (the cache full, free slots and pins present): every policy
must give exactly the results of its reference and of the same run on small ids."""

from dataclasses import asdict

import numpy as np
import pytest

from shadow.sim.registry import make_policy, policy_specs
from tests.tiers import unit_rows

INT32_MAX = 2**31 - 1

# every policy, with the params under which its reference follows it exactly (the registry's
# spec), plus parameter variants worth their own run
_SPECS = policy_specs(built_only=False)
_POLICIES = ([(n, s.reference_params) for n, s in _SPECS.items()]
             + [("clock", "n-bit-counter=2"), ("gdsf", "cost-aware=true")])
# and the production params of those that batch their evictions (compared with small ids only)
_BATCHED = [(n, "") for n, s in _SPECS.items() if s.reference_params]
# the policies whose decisions do not depend on the id values (not ``hashes_ids``): the same
# run on other ids must decide alike
_ID_BLIND = [(n, p) for n, p in _POLICIES + _BATCHED if not _SPECS[n].hashes_ids]


def _widening_map(cut: int, top: int, last: int) -> dict[int, int]:
    """A monotone id map that keeps ids up to ``cut`` and shifts the later ones: the first few
    end exactly at 2**31 - 1 (the largest narrow id), the next cross 2**31, the last third jumps
    past 2**32 and the last sixth to about 2**62 (``last`` is the largest id; ``top`` = its
    third point)."""
    out = {}
    base = INT32_MAX - cut - 5            # cut + 5 -> 2**31 - 1, cut + 6 -> 2**31
    for b in range(1, last + 1):
        if b <= cut:
            out[b] = b
        elif b <= top:
            out[b] = b + base
        elif b <= (top + last) // 2:
            out[b] = b + base + 2**32
        else:
            out[b] = b + 2**62
    return out


def _jumping(trace: list[list[int]], cut: int) -> tuple[list[list[int]], dict[int, int]]:
    last = max(max(r) for r in trace)
    m = _widening_map(cut, cut + (last - cut) // 3, last)
    return [[m[b] for b in r] for r in trace], m


def _random_trace(seed: int, n_req: int = 900) -> list[list[int]]:
    from tests.sim._traces import random_trace

    return random_trace(np.random.default_rng(seed), n_req, n_roots=3, max_len=10, n_raw=3)


# ---- through both serve loops, vs the pure-Python references --------------------------------

@pytest.mark.parametrize("name,params", unit_rows(_POLICIES, 10))
@pytest.mark.parametrize("capacity", unit_rows([7, 40], 2))
def test_policies_exact_with_ids_widening_mid_run(name, params, capacity):
    from tests.sim.policy_mixin import run_both

    small = _random_trace(capacity)
    # the cut: the largest id of the first third of the requests (the cache is full by then)
    cut = max(max(r) for r in small[:300])
    assert cut > capacity
    trace, _ = _jumping(small, cut)
    got, want, gc, wc, sim, _ = run_both(name, params, capacity, trace, pin=True)
    assert got == want
    assert gc == wc
    policy = sim.runs[0].policy
    assert policy.id_bits == 64
    if _SPECS[name].hashes_ids:
        return
    # and the same decisions as on the small ids, which never widen
    got_small, _, gc_small, _, sim_small, _ = run_both(name, params, capacity, small, pin=True)
    assert got == got_small and gc == gc_small
    assert sim_small.runs[0].policy.id_bits == 32


# ---- large caches (rings with prefetches, tables that read keys back): vs small ids -----------

def _run_sim(specs, trace, pin: bool = True):
    from shadow.sim import CacheSpec, Simulator
    from tests.sim._traces import batches_of

    sim = Simulator([CacheSpec(n, c, p) for n, c, p in specs], pin=pin)
    per_batch = []
    for b in batches_of(trace, 250):
        sim.feed(b)
        per_batch.append([(r.n_hits, r.n_prefix_hits, r.n_eviction) for r in sim.runs])
    return sim, per_batch


@pytest.mark.slow
@pytest.mark.parametrize("capacity", [20_000, 33_000])
def test_large_caches_widen_mid_run_with_the_same_decisions(capacity):
    # NOTE: 20k slots: the resident table reads keys back from slot_ids on deletion (no
    # fp_home); 33k: rings that prefetch ahead, and the compact tables.
    from tests.sim._traces import read_jsonl

    small = read_jsonl()
    seen, cut = set(), None
    for r in small:
        seen.update(r)
        if len(seen) >= capacity + 2000:
            cut = max(seen)
            break
    assert cut is not None
    trace, m = _jumping(small, cut)
    specs = [(n, capacity, p) for n, p in _ID_BLIND]
    sim_a, per_a = _run_sim(specs, small)
    sim_b, per_b = _run_sim(specs, trace)
    assert per_a == per_b
    for ra, rb in zip(sim_a.results(), sim_b.results()):
        assert ra.error is None and rb.error is None
        assert asdict(ra) == asdict(rb)
    for run_a, run_b in zip(sim_a.runs, sim_b.runs):
        assert run_a.policy.id_bits == 32 and run_b.policy.id_bits == 64, run_a.policy
        assert sorted(m[b] for b in run_a.policy.resident_ids()) == sorted(
            run_b.policy.resident_ids())


# ---- one policy, driven directly: widening with free slots and pins in place ------------------

@pytest.mark.parametrize("name,params", _ID_BLIND)
@pytest.mark.parametrize("big", unit_rows([INT32_MAX - 2, 2**32 + 7, 2**62], 3, first=2))
def test_direct_widening_with_free_slots_and_pins(name, params, big):
    rng = np.random.default_rng(11)
    cap = 24
    a, b = make_policy(name, cap, params), make_policy(name, cap, params)
    # ids 1 .. 60 stay; 61 .. 120 map to ``big`` .. in b (from INT32_MAX - 2: 63 is the last
    # narrow id)
    shift = big - 61

    def f(x: int) -> int:
        return x if x <= 60 else x + shift

    vt = 0

    def get(x: int) -> bool:
        nonlocal vt
        vt += 1
        nxt = vt + int(rng.integers(1, 40))
        cost = int(rng.integers(1, 5))
        ra = a.py_get(x, cost=cost, next_access=nxt, vtime=vt, req_vtime=vt)
        rb = b.py_get(f(x), cost=cost, next_access=nxt, vtime=vt, req_vtime=vt)
        assert ra == rb, (x, vt)
        return ra

    for x in range(1, 61):                       # the cache full of small ids, churned
        get(int(rng.integers(1, 61)) if x > 30 else x)
    for x in sorted(a.resident_ids())[::5]:      # free slots in the middle of the free stack
        a.py_remove(x)
        b.py_remove(f(x))
    pinned = sorted(a.resident_ids())[1::3]      # and pins
    for x in pinned:
        a.py_pin(x, 2)
        b.py_pin(f(x), 2)
    assert b.id_bits == 32 and a.n_resident < cap
    get(61)
    assert b.id_bits == (32 if shift + 61 <= INT32_MAX else 64)
    for x in (62, 63, 64, 65):
        get(x)
    assert b.id_bits == 64 and a.id_bits == 32
    for _ in range(400):
        r = rng.random()
        x = int(rng.integers(1, 121))
        if r < 0.75:
            get(x)
        elif r < 0.85 and a.py_find(x) >= 0:
            a.py_remove(x)
            b.py_remove(f(x))
        elif r < 0.95 and a.py_find(x) >= 0:
            d = 1 if a.pin_count(x) == 0 or rng.random() < 0.5 else -1
            a.py_pin(x, d)
            b.py_pin(f(x), d)
        else:
            vt += 1
            va, vb = a.py_evict(vtime=vt), b.py_evict(vtime=vt)
            assert (f(va) if va else 0) == vb
        assert sorted(f(y) for y in a.resident_ids()) == sorted(b.resident_ids())
        assert a.n_resident == b.n_resident and a.n_pinned == b.n_pinned
    for x in pinned:
        assert a.pin_count(x) == b.pin_count(f(x))


def test_narrow_bounds():
    p = make_policy("lru", 4)
    p.py_get(INT32_MAX)                          # the largest narrow id
    p.py_get(1)
    assert p.id_bits == 32 and p.py_find(INT32_MAX) == 0
    p.py_get(INT32_MAX + 1)                      # the first that widens
    assert p.id_bits == 64
    assert sorted(p.resident_ids()) == [1, INT32_MAX, INT32_MAX + 1]
    # the free slots survived the widening: the cache still fills to capacity, then evicts
    p.py_get(2**63 - 1)
    assert p.n_resident == 4
    p.py_get(5)
    assert sorted(p.resident_ids()) == [1, 5, INT32_MAX + 1, 2**63 - 1]     # the oldest left
