"""partial_node_random_compute: shared mixin, hand-traced nodes and trims, exact batched differential."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim import CacheSpec, Simulator
from shadow.trace.batch import Batch
from tests.sim.policy_mixin import PolicyMixin, prefix_traces, raw_traces
from tests.sim.test_random_compute import assert_same, ref_get


class TestPartialNodeMicro(PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "micro-batch=1"     # one block per sample: the one-evict-at-a-time reference loop is exact


class TestPartialNodeSmallSample(PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "n-sample=2,micro-batch=1,seed=3"


def _serve(trace, capacity, params="", pin=True, replay_order="deepest-first"):
    sim = Simulator([CacheSpec("partial_node_random_compute", capacity, params)], pin=pin,
                    cost_model="uniform", replay_order=replay_order)
    nodes = []
    for i, req in enumerate(trace):
        sim.feed(Batch.from_lists([req], first_request=i))
        nodes.append(sorted(p for _, p in sim.runs[0].policy.node_paths()))
    return sim, nodes


def test_nodes_split_and_trim_hand_traced():
    sim, nodes = _serve([[1, 2, 3, 4], [1, 2, 5, 6], [11, 12, 13]], 8)
    assert nodes[0] == [[1, 2, 3, 4]]                    # one request's new run: one node
    assert nodes[1] == [[1, 2], [3, 4], [5, 6]]          # B's path splits A's node after block 2
    # C needs 1 slot: [3, 4] is the oldest node (1/4 against 1 for the others) and loses its tail
    assert nodes[2] == [[1, 2], [3], [5, 6], [11, 12, 13]]
    stamps = dict((tuple(p), s) for s, p in sim.runs[0].policy.node_paths())
    assert stamps[(3,)] == 4 and stamps[(1, 2)] == 8     # the split-off branch kept A's stamp
    assert sim.results()[0].n_eviction == 1


def test_prefix_order_builds_the_same_nodes():
    trace = [[1, 2, 3, 4], [1, 2, 5, 6]]
    _, a = _serve(trace, 8, replay_order="deepest-first")
    _, b = _serve(trace, 8, replay_order="prefix-order")
    assert a == b


def test_micro_takes_at_most_micro_batch_per_sample():
    # one old 6-block node and a fresh one; C needs 4 slots: micro-batch=2 trims the old node twice
    # (it stays the lowest score), drain takes all 4 at once; both leave [1, 2] resident
    trace = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12]]
    for params in ("micro-batch=2", "eviction-mode=drain"):
        sim, nodes = _serve(trace, 8, params)
        assert nodes[-1] == [[1, 2], [7, 8], [9, 10, 11, 12]], params


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 24), pin=st.booleans(),
       params=st.sampled_from(["", "eviction-mode=drain", "micro-batch=2,n-sample=3",
                               "eviction-mode=drain,n-sample=1"]))
def test_batched_differential_prefix(trace, capacity, pin, params):
    assert_same("partial_node_random_compute", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=raw_traces, capacity=st.integers(1, 12), pin=st.booleans(),
       params=st.sampled_from(["micro-batch=2,n-sample=3", "eviction-mode=drain,n-sample=2"]))
def test_batched_differential_raw(trace, capacity, pin, params):
    assert_same("partial_node_random_compute", params, capacity, trace, pin)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(2, 24))
def test_batched_differential_prefix_order(trace, capacity):
    assert_same("partial_node_random_compute", "micro-batch=3,n-sample=4", capacity, trace, True,
                "prefix-order")


def test_bad_mode_is_a_clear_error():
    import pytest

    from shadow.errors import ShadowError
    from shadow.sim.registry import make_policy

    for bad in ("eviction-mode=batch", "micro-batch=0", "n-sample=0"):
        with pytest.raises(ShadowError):
            make_policy("partial_node_random_compute", 8, bad)


class _PassesAlways:
    """Draws in passes from the first node on (production: from 16384 live nodes): the exact
    differential tests then check that the passes make the same draws as one at a time."""

    def setup_method(self, method):
        from shadow.sim.policies.partial_node import partial_node_random_compute as m
        self._old_pass_min = m.set_pass_min_nodes(0)

    def teardown_method(self, method):
        from shadow.sim.policies.partial_node import partial_node_random_compute as m
        m.set_pass_min_nodes(self._old_pass_min)


class TestPartialNodeMicroPasses(_PassesAlways, PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "micro-batch=1"


class TestPartialNodeSmallSamplePasses(_PassesAlways, PolicyMixin):
    NAME = "partial_node_random_compute"
    PARAMS = "n-sample=2,micro-batch=1,seed=3"


# --- 32-bit stamps (an epoch that moves, then 64 bits for good) ---------------------------------

# NOTE: gaps around the 32-bit span (2**32) and the epoch's headroom (2**31): a stamp 2**32 past
# the epoch moves it if the live stamps span less than 2**31, else the stamps widen for good.
_STAMP_GAPS = [0, 0, 1, 1, 3, 40, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1,
               2**33 + 5]


def drive_requests(name: str, params: str, capacity: int, ops: list[tuple]) -> object:
    """Run ``ops`` on the Cython policy (``py_request`` then one ``py_get`` per block) and on its
    reference (``on_request`` then hit, or evict-if-full and insert), comparing after each op:
    hit or miss, residents, and every live node's (stamp, ids) in sampling order (and its freq
    for the freq variant).

    An op is ``(ids, gap, lag, cost)``: the stamp advances by ``gap`` and the request's blocks are
    got at ``vtime = stamp - lag`` (a draw's ``now`` may lag the stamps), ``((), gap, lag, 0)``:
    one eviction at that ``now``, or ids all negative: ``remove`` of the resident ones among their
    negations.  Returns the policy."""
    from types import SimpleNamespace

    from shadow.sim.reference import make_reference
    from shadow.sim.registry import make_policy

    p = make_policy(name, capacity, params)
    r = make_reference(name, capacity, params)
    t = 0
    for ids, gap, lag, cost in ops:
        t += gap
        vt = t - lag
        if not ids:
            acc = SimpleNamespace(block_id=0, cost=1, vtime=vt, req_vtime=vt, position=0)
            assert p.py_evict(vtime=vt) == r.evict(acc, set())
        elif ids[0] < 0:
            for b in ids:
                if r.find(-b):
                    r.remove(-b)
                    p.py_remove(-b)
        else:
            p.py_request(list(ids), t)
            r.on_request(SimpleNamespace(block_ids=list(ids), req_vtime=t))
            for i, b in enumerate(ids):
                acc = SimpleNamespace(block_id=b, cost=cost, vtime=vt, req_vtime=t, position=i)
                want = ref_get(r, capacity, b, acc)
                assert p.py_get(b, cost=cost, vtime=vt, req_vtime=t, position=i) == want
        assert sorted(p.resident_ids()) == sorted(r.node_of)
        live = r.nodes.items[:r.nodes.n]
        assert p.node_paths() == [(r.stamp[nd], r.chain[nd]) for nd in live], t
        if hasattr(r, "freq"):
            assert p.node_freqs() == {tuple(r.chain[nd]): r.freq[nd] for nd in live}
    return p


_request = st.tuples(st.lists(st.integers(1, 10), max_size=5), st.sampled_from(_STAMP_GAPS),
                     st.sampled_from([0, 0, 1, 5]), st.sampled_from([1, 2, 7, 300]))
stamp_ops = st.lists(_request, min_size=1, max_size=40)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=stamp_ops, capacity=st.integers(1, 8),
       params=st.sampled_from(["n-sample=4,micro-batch=1", "n-sample=2,micro-batch=2,seed=5",
                               "eviction-mode=drain,n-sample=3"]))
def test_stamps_past_32_bits_differential(ops, capacity, params):
    # stamps that jump past 2**32 at once and in steps: the epoch moves (live stamps close
    # together) or the stamps widen (an old node stays), mid-run, with splits and evictions
    drive_requests("partial_node_random_compute", params, capacity, ops)


def test_stamps_epoch_moves_then_widens():
    p = drive_requests("partial_node_random_compute", "n-sample=4", 4,
                       [((1, 2), 5, 0, 1), ((1,), 2**32, 0, 1)])    # [1] touched, [2] kept 5
    assert p.stamp_bits() == 64                                      # 2**32 apart: widened
    J = 2**32 + 7
    p = drive_requests("partial_node_random_compute", "n-sample=4", 4,
                       [((1,), 5, 0, 1), ((1,), J - 5, 0, 1)])      # the only node restamped
    assert p.stamp_bits() == 32 and p.stamp_epoch == J
    # [1] at 5 is restamped at J while [2] (2**31 + 100) is live: within 2**31, so the epoch
    # moves to [2]'s stamp; the stamps after it fit 32 bits from there
    E = 2**31 + 100
    p = drive_requests("partial_node_random_compute", "n-sample=4", 4,
                       [((1,), 5, 0, 1), ((2,), E - 5, 0, 1), ((1, 2, 3), J - E, 0, 1),
                        ((4,), 2**31, 0, 1)])
    assert p.stamp_bits() == 32 and p.stamp_epoch == E
    assert [s for s, _ in p.node_paths()] == [J, J, J, J + 2**31]


_removals = st.tuples(st.lists(st.integers(-10, -1), min_size=1, max_size=3), st.just(0),
                      st.just(0), st.just(1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.one_of(_request, _removals), min_size=1, max_size=40),
       capacity=st.integers(1, 8))
def test_remove_differential(ops, capacity):
    # removes of heads, tails, middles and whole nodes (the node set's order after the search for
    # a node's index), between requests that split and evictions
    drive_requests("partial_node_random_compute", "n-sample=3,micro-batch=2", capacity, ops)


def test_remove_unlinks_middle_head_and_tail():
    # no down links: removing a middle block finds the one below it by walking up from the tail
    sim, _ = _serve([[1, 2, 3, 4, 5]], 8)
    p = sim.runs[0].policy
    for b, want in ((3, [[1, 2, 4, 5]]), (5, [[1, 2, 4]]), (1, [[2, 4]]), (2, [[4]]), (4, [])):
        p.py_remove(b)
        assert [ids for _, ids in p.node_paths()] == want, b
