"""The ghost FIFO ring (shadow/sim/policies/_ghost): a bounded FIFO of ids with removal from the
middle, checked against an ordered-dict model, tombstones and compaction included."""

from collections import OrderedDict

import pytest
from hypothesis import given, settings, strategies as st

pytest.importorskip("shadow.sim.policies._ghost")
from shadow.sim.policies._ghost import GhostFIFO  # noqa: E402


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


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(0, 40),
       ops=st.lists(st.tuples(st.sampled_from("aadp"), st.integers(1, 60)), max_size=400))
def test_matches_ordered_dict(limit, ops):
    g = GhostFIFO(limit)
    model: OrderedDict[int, None] = OrderedDict()
    for op, key in ops:
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
    g.check()
    assert g.ids() == list(reversed(model))
    for key in range(1, 61):
        assert (key in g) == (key in model)


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
