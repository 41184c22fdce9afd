"""The ghost FIFO ring (shadow/sim/policies/_shared/ghost): a bounded FIFO of ids with removal from the
middle, checked against an ordered-dict model, tombstones and compaction included."""

from collections import OrderedDict

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("shadow.sim.policies._shared.ghost")
from shadow.sim.policies._shared.ghost import GhostFIFO  # noqa: E402
from tests.tiers import unit_rows


def test_hand_traced_order_and_bound():
    g = GhostFIFO(3)
    for k in (5, 6, 7):
        g.add(k)
    assert g.ids() == [7, 6, 5]
    g.add(8)                      # 5, the oldest, leaves
    assert g.ids() == [8, 7, 6]
    assert 5 not in g and 6 in g
    assert g.discard(7)           # a ghost hit in the middle: a tombstone
    assert g.ids() == [8, 6]
    g.add(9)
    g.add(10)                     # 6 leaves; the tombstone of 7 is passed
    assert g.ids() == [10, 9, 8]
    assert g.pop() == 8
    g.check()


def test_compaction_keeps_order_and_positions():
    # Remove every other id from the middle so tombstones fill the ring and force compactions.
    g = GhostFIFO(100)
    model = []
    nxt = 1
    for _ in range(50):
        for _ in range(30):
            if len(model) >= 100:
                model.pop(0)
            g.add(nxt)
            model.append(nxt)
            nxt += 1
        for k in model[5::2][:15]:
            assert g.discard(k)
            model.remove(k)
        g.check()
        assert g.ids() == model[::-1]


def test_zero_limit_holds_nothing():
    g = GhostFIFO(0)
    g.add(3)
    assert len(g) == 0 and 3 not in g and g.pop() == 0


def _run_bounded_model(limit: int, ops: list, offset: int = 0, switch: int = 0) -> GhostFIFO:
    """Apply ``ops`` (add/discard/pop of key k, pushed as k + ``offset`` from op ``switch`` on) to
    a ring and an ordered dict, comparing every answer; returns the ring."""
    g = GhostFIFO(limit)
    model: OrderedDict[int, None] = OrderedDict()
    for i, (op, k) in enumerate(ops):
        key = k + offset if i >= switch else k
        if op == "a":
            if key in model:
                continue
            if limit >= 1:
                while len(model) >= limit:
                    model.popitem(last=False)
                model[key] = None
            g.add(key)
        elif op == "d":
            assert g.discard(key) == (key in model)
            model.pop(key, None)
        else:
            want = next(iter(model)) if model else 0
            assert g.pop() == want
            model.pop(want, None)
        assert len(g) == len(model)
        if i % 50 == 0:
            g.check()
    g.check()
    assert g.ids() == list(reversed(model))
    for k in range(1, 61):
        assert (k in g) == (k in model)
        assert (k + offset in g) == (k + offset in model)
    return g


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(limit=st.integers(0, 40),
       ops=st.lists(st.tuples(st.sampled_from("aadp"), st.integers(1, 60)), max_size=400))
def test_matches_ordered_dict(limit, ops):
    _run_bounded_model(limit, ops)


def test_unbounded_push_grows_the_ring():
    g = GhostFIFO(4)
    model = []
    for k in range(1, 301):
        g.push(k)
        model.append(k)
        if k % 3 == 0:
            assert g.discard(k - 1)
            model.remove(k - 1)
        if k % 50 == 0:
            g.check()
    assert g.capacity[0] > 200
    assert g.ids() == model[::-1]
    assert all(k in g for k in model)
    assert g.pop() == model[0]


# ---- 32-bit ring entries, widened to 64 bits at the first id past them --------------------------

_KEYS = st.integers(1, 60)
# After the switch, key k is pushed as k + offset: the first offset keeps k <= 29 within 32 bits
# and crosses at k = 30 (2**31, which ARC's negation also leaves outside int32); the others cross
# at once, the last up to the largest id the trace format allows.
_OFFSETS = st.sampled_from([2**31 - 30, 2**32, 2**63 - 61])


def _widened(offset: int, switch: int, ops: list, pushes: str) -> bool:
    """True if an op of ``pushes`` had a key past 32 bits (pushed, or already live, so pushed)."""
    return any(i >= switch and k + offset > 2**31 - 1 for i, (op, k) in enumerate(ops)
               if op in pushes)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(limit=st.integers(0, 40), offset=_OFFSETS, switch=st.integers(0, 300),
       ops=st.lists(st.tuples(st.sampled_from("aadp"), _KEYS), max_size=400))
def test_matches_ordered_dict_across_32_bits(limit, offset, switch, ops):
    # ids small until op ``switch``, then past 2**31: the ring widens holding live ids and
    # tombstones, after compactions, and keeps every answer
    g = _run_bounded_model(limit, ops, offset, switch)
    assert g.id_bits == (64 if limit >= 1 and _widened(offset, switch, ops, "a") else 32)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(offset=_OFFSETS, switch=st.integers(0, 100),
       ops=st.lists(st.tuples(st.sampled_from("ppqqdo"), _KEYS), max_size=400))
def test_unbounded_two_lists_across_32_bits(offset, switch, ops):
    # ARC's way: no bound (the ring grows), the second list's ids stored negated
    g = GhostFIFO(4)
    model: OrderedDict[int, int] = OrderedDict()        # id -> stored value (negated: second)
    for i, (op, k) in enumerate(ops):
        key = k + offset if i >= switch else k
        if op in "pq":
            if key in model:
                continue
            g.push(key, second=op == "q")
            model[key] = -key if op == "q" else key
        elif op == "d":
            assert g.discard(key) == (key in model)
            model.pop(key, None)
        else:
            want = next(iter(model.values())) if model else 0
            assert g.pop() == want
            model.pop(abs(want), None)
        if i % 50 == 0:
            g.check()
    g.check()
    assert g.ids() == list(reversed(model.values()))
    assert all(key in g for key in model)
    assert g.id_bits == (64 if _widened(offset, switch, ops, "pq") else 32)


def test_widening_keeps_order_tombstones_and_compactions():
    g = GhostFIFO(100)
    model = []
    for nxt in range(1, 3001):
        key = nxt if nxt <= 1500 else nxt + 2**40
        if len(model) >= 100:
            model.pop(0)
        g.add(key)
        model.append(key)
        if nxt % 3 == 0:                      # ghost hits in the middle: tombstones, compactions
            assert g.discard(model[len(model) // 2])
            del model[len(model) // 2]
        if nxt in (1499, 1500, 1501, 1502) or nxt % 250 == 0:
            g.check()
            assert g.ids() == model[::-1]
            assert g.id_bits == (32 if nxt <= 1500 else 64)
    assert [g.pop() for _ in range(len(model))] == model


@pytest.mark.parametrize("offset", [2**31 - 60, 2**62])
def test_widening_then_growth_unbounded(offset):
    # ARC's way: 50 small ids, then ids past 32 bits (from the 60th on with the first offset,
    # some of them stored negated); the ring grows several times after it has widened
    g = GhostFIFO(4)
    model = []
    for nxt in range(1, 401):
        key = nxt if nxt <= 50 else nxt + offset
        g.push(key, second=nxt % 3 == 0)
        model.append(-key if nxt % 3 == 0 else key)
        if nxt % 4 == 0:
            assert g.discard(abs(model[len(model) // 2]))
            del model[len(model) // 2]
        if nxt % 5 == 0:
            assert g.pop() == model.pop(0)
        if nxt % 25 == 0 or nxt in (59, 60, 61):
            g.check()
            assert g.ids() == model[::-1]
    assert g.id_bits == 64 and g.capacity[0] > 200
    assert all(abs(v) in g for v in model)
    assert [g.pop() for _ in range(len(model))] == model


# ---- policies with ghost rings, ids jumping past 2**31 partway: exact vs their references ------

def _jumping_trace(seed: int, offset: int, tail: int) -> list[list[int]]:
    """A random prefix trace whose ids from the one first seen at a third of the requests on are
    shifted by ``offset`` (still distinct, still in first-appearance order), then ``tail``
    requests of one new id each (they push shifted ids into every ghost at the end)."""
    from tests.sim._traces import random_trace
    import numpy as np

    trace = random_trace(np.random.default_rng(seed), 900, n_roots=3, max_len=10, n_raw=3)
    cut = max(max(r) for r in trace[:300])
    top = max(max(r) for r in trace)
    return ([[b + offset if b > cut else b for b in r] for r in trace]
            + [[top + offset + j] for j in range(1, tail + 1)])


def _ghost_values(policy) -> list[int]:
    """The ghost ids a policy holds now (ARC's B2 as stored: negated)."""
    if hasattr(policy, "ghost_ids"):
        return policy.ghost_ids()
    q = policy.queues()
    return q.get("ghost", []) + q.get("aout", []) + q.get("b1", []) + [-v for v in q.get("b2", [])]


@pytest.mark.parametrize("name,params", unit_rows([
    ("s3fifo", ""), ("s3fifo", "small-size-ratio=0.3,ghost-size-ratio=0.5"), ("arc", ""),
    ("twoq", ""), ("twoq", "Ain-size-ratio=0.1,Aout-size-ratio=1.0"),
    ("random_compute_small_queue", "evict-batch=1"),
    ("random_compute_small_queue", "evict-batch=1,small-size-ratio=0.3,n-sample=4,seed=3")], 7))
@pytest.mark.parametrize("offset", [2**31 - 40, 2**62])
@pytest.mark.parametrize("capacity", [7, 40])
def test_policies_exact_with_ids_past_32_bits(name, params, offset, capacity):
    from tests.sim.policy_mixin import run_both

    trace = _jumping_trace(capacity, offset, 2 * capacity)
    got, want, gc, wc, sim, _ = run_both(name, params, capacity, trace, pin=True)
    assert got == want
    assert gc == wc
    # the ghost ring did widen: it holds such ids at the end
    assert any(abs(v) > 2**31 - 1 for v in _ghost_values(sim.runs[0].policy))
