"""Checks every eviction policy must pass (cachetools-style shared mixin).

Usage, in ``tests/sim/test_<name>.py``::

    class TestMine(PolicyMixin):
        NAME = "mine"

The class fails while the policy's extension module is missing (a registered policy must be built).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck
from hypothesis import strategies as st

from shadow.sim.registry import is_built, make_policy, policy_info
from shadow.sim.reference import make_reference, reference_module
from shadow.sim.reference.loop import RefCache
from tests.sim._traces import intern_prefix, next_access, random_trace

from shadow.trace.batch import Batch

# Requests as raw hash lists over a small alphabet (many shared prefixes), interned like the
# trace layer does; and "raw" requests (duplicates, unsorted ids) for the loop's slow path.
_raw_request = st.lists(st.integers(0, 5), min_size=1, max_size=10)
prefix_traces = st.lists(_raw_request, min_size=1, max_size=40).map(intern_prefix)
raw_traces = st.lists(st.lists(st.integers(1, 25), min_size=1, max_size=8), min_size=1, max_size=40)


def run_both(name: str, params: str, capacity: int, trace: list[list[int]], *, pin: bool,
             replay_order: str = "deepest-first", cost_model: str = "position",
             records: np.ndarray | None = None, category: str = "type+first-turn"):
    """Per-request (hits, prefix hits) and final counters from the Cython and the reference loop.

    With ``records`` (lcp ``RECORD_DTYPE``, one per request: ``_traces.session_trace``) both loops
    get each request's arrival seconds, ``category`` fold, session and next request."""
    from shadow.sim import CacheSpec, Simulator
    from shadow.sim.category import request_info
    from shadow.sim.live.wire import INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT

    nxt = next_access(trace)
    info = request_info(records, category) if records is not None else None
    sim = Simulator([CacheSpec(name, capacity, params)], pin=pin, replay_order=replay_order,
                    cost_model=cost_model, category=category)
    ref = RefCache(make_reference(name, capacity, params), capacity, pin=pin,
                   replay_order=replay_order, cost_model=cost_model)
    run = sim.runs[0]
    got, want = [], []
    vt = 1
    for i, req in enumerate(trace):
        h0, p0, s0 = run.n_hits, run.n_prefix_hits, run.n_req_skipped
        rec = records[i:i + 1] if records is not None else None
        sim.feed(Batch.from_lists([req], next_access=[nxt[i]], records=rec, first_request=i,
                                  first_vtime=vt))
        vt += len(req)
        got.append((run.n_hits - h0, run.n_prefix_hits - p0, run.n_req_skipped - s0))
        if info is None:
            r = ref.serve(req, nxt[i])
        else:
            r = ref.serve(req, nxt[i], timestamp_s=float(records["start_time_us"][i]) / 1e6,
                          category=int(info[i, INFO_CATEGORY]),
                          session_id=int(info[i, INFO_SESSION]),
                          session_next_req=int(info[i, INFO_SESSION_NEXT]))
        want.append((r.n_hits, r.n_prefix_hits, int(r.status == "skipped")))
    res = sim.results()[0]
    assert res.error is None, res.error
    keys = ("n_req", "n_req_skipped", "n_blocks", "n_eviction", "n_self_eviction",
            "n_unexpected_eviction")
    got_c = {k: getattr(res, k) for k in keys}
    want_c = {k: ref.stats()[k] for k in keys}
    return got, want, got_c, want_c, sim, ref


def _spills(name: str, capacity: int, params: str) -> bool:
    """True if the policy's reference can evict inside hit/insert (it has ``spilled``)."""
    try:
        return hasattr(make_reference(name, capacity, params), "spilled")
    except LookupError:
        return False


class PolicyMixin:
    NAME: str = ""
    PARAMS: str = ""
    #: False for a sampling policy whose reference cannot follow the same random draws
    COMPARE_REFERENCE: bool = True

    @pytest.fixture(autouse=True)
    def _built(self):
        # NOTE: fails, not skips: a registered policy that is not built is a broken build
        assert is_built(self.NAME), f"policy {self.NAME} is not built (run `make build`)"

    def make(self, capacity: int):
        return make_policy(self.NAME, capacity, self.PARAMS)

    # ---- structural properties ----

    def test_registered_metadata(self):
        info = policy_info(self.NAME)
        assert isinstance(info.honours_pins, bool)
        assert info.description

    def test_capacity_never_exceeded(self):
        rng = np.random.default_rng(1)
        for cap in (1, 2, 5, 17):
            p = self.make(cap)
            for t in range(400):
                b = int(rng.integers(1, 40))
                p.py_get(b, vtime=t + 1, next_access=t + 1 + int(rng.integers(1, 50)))
                assert p.n_resident <= cap
                assert len(p.resident_ids()) == p.n_resident
            assert len(set(p.resident_ids())) == p.n_resident

    def test_evict_empty_returns_zero(self):
        assert self.make(4).py_evict() == 0

    def test_evict_removes_exactly_one(self):
        p = self.make(6)
        for b in range(1, 7):
            p.py_get(b, vtime=b)
        before = set(p.resident_ids())
        victim = p.py_evict(vtime=7)
        assert victim in before
        assert set(p.resident_ids()) == before - {victim}
        assert p.py_find(victim) == -1

    def test_find_is_read_only(self):
        rng = np.random.default_rng(2)
        seq = [int(x) for x in rng.integers(1, 30, size=300)]
        a, b = self.make(8), self.make(8)
        evict_a, evict_b = [], []
        for t, blk in enumerate(seq):
            for x in range(1, 31):
                a.py_find(x)          # probes must not change anything
            a.py_get(blk, vtime=t + 1)
            b.py_get(blk, vtime=t + 1)
            if t % 37 == 0:
                evict_a.append(a.py_evict(vtime=t + 1))
                evict_b.append(b.py_evict(vtime=t + 1))
        assert evict_a == evict_b
        assert sorted(a.resident_ids()) == sorted(b.resident_ids())

    def test_pins_honoured(self):
        if not policy_info(self.NAME).honours_pins:
            pytest.skip(f"{self.NAME} does not honour pins")
        rng = np.random.default_rng(3)
        p = self.make(10)
        for t in range(60):
            p.py_get(int(rng.integers(1, 25)), vtime=t + 1)
        resident = p.resident_ids()
        keep = resident[: len(resident) - 2]
        for b in keep:
            p.py_pin(b)
        v1 = p.py_evict(vtime=100)
        v2 = p.py_evict(vtime=101)
        assert v1 not in keep and v2 not in keep
        assert all(p.py_find(b) >= 0 for b in keep)
        # every block pinned: best effort still evicts something
        assert p.py_evict(vtime=102) in keep

    def test_pin_count_past_16_bits(self):
        # pins are 16 bits with the excess in a side list: counts past 65535 stay exact
        p = self.make(4)
        for b in (1, 2, 3):
            p.py_get(b, vtime=b)
        n = 70_000
        p.py_pin(2, n)
        p.py_pin(3, 2)
        assert p.pin_count(2) == n and p.n_pinned == 2
        p.py_pin(2, -(n - 1))
        assert p.pin_count(2) == 1 and p.n_pinned == 2
        p.py_pin(2, -1)
        assert p.pin_count(2) == 0 and p.n_pinned == 1
        p.py_pin(2, 65_536)
        p.py_remove(2)                # a saturated block leaves: its excess goes with it
        assert p.n_pinned == 1
        p.py_get(2, vtime=10)
        assert p.pin_count(2) == 0
        p.py_pin(2, 65_535)
        p.py_pin(2, 1)
        assert p.pin_count(2) == 65_536

    # ---- differential vs the pure-Python reference, through both serve loops ----

    def _differential(self, trace, capacity, pin, replay_order="deepest-first"):
        if not self.COMPARE_REFERENCE:
            pytest.skip("sampling policy: compared statistically elsewhere")
        try:
            reference_module(self.NAME)
        except LookupError:
            pytest.fail(f"{self.NAME} has no pure-Python reference (shadow/sim/reference/)")
        got, want, gc, wc, _, _ = run_both(self.NAME, self.PARAMS, capacity, trace, pin=pin,
                                           replay_order=replay_order)
        assert got == want
        assert gc == wc

    def test_differential_seeded_traces(self):
        """The unit tier's differential (the hypothesis ones below are ``slow``): random traces
        of shared prefixes from fixed seeds, pins on and off, both replay orders."""
        for seed, capacity, pin, order in ((1, 3, True, "deepest-first"),
                                           (2, 8, False, "deepest-first"),
                                           (3, 20, True, "prefix-order")):
            trace = random_trace(np.random.default_rng(seed), 30, n_roots=3, max_len=8, n_raw=4)
            self._differential(trace, capacity, pin, order)

    @pytest.mark.slow
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans())
    def test_differential_prefix_traces(self, trace, capacity, pin):
        self._differential(trace, capacity, pin)

    @pytest.mark.slow
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans())
    def test_differential_raw_ids(self, trace, capacity, pin):
        self._differential(trace, capacity, pin)

    @pytest.mark.slow
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(trace=prefix_traces, capacity=st.integers(2, 24))
    def test_differential_prefix_order(self, trace, capacity):
        self._differential(trace, capacity, True, "prefix-order")

    @pytest.mark.slow
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors])
    @given(trace=prefix_traces, capacity=st.integers(2, 24), pin=st.booleans())
    def test_loop_invariants(self, trace, capacity, pin):
        from shadow.sim import CacheSpec, Simulator

        sim = Simulator([CacheSpec(self.NAME, capacity, self.PARAMS)], pin=pin)
        sim.feed(Batch.from_lists(trace, next_access=next_access(trace)))
        r = sim.results()[0]
        assert r.error is None
        assert sim.runs[0].policy.n_resident <= capacity
        if not _spills(self.NAME, capacity, self.PARAMS):
            # NOTE: twoq/slru may evict inside insert (libCacheSim's spilled evictions), which
            # the loop counts as unexpected; every other policy evicts only when asked.
            assert r.n_unexpected_eviction == 0
        assert r.n_prefix_hits <= r.n_hits <= r.n_blocks
        assert r.hole_len_sum == r.n_blocks - r.n_hits          # holes add up to the misses
        if pin and policy_info(self.NAME).honours_pins:
            assert r.n_self_eviction == 0


class RingAlways:
    """Slot orders (``SOrder``: fifo) as rings at every size (production: from
    LR_RING_MIN slots; smaller caches keep a list): the exact differential tests then check the
    ring form too."""

    def setup_method(self, method):
        from shadow.sim.policies._shared.dlist import set_ring_min_slots
        self._old_ring_min = set_ring_min_slots(0)

    def teardown_method(self, method):
        from shadow.sim.policies._shared.dlist import set_ring_min_slots
        set_ring_min_slots(self._old_ring_min)
