"""workload_aware (arXiv 2506.02634 §4.2): the shared checks, the reference followed request by
request on multi-turn traces with arrival times, types and turns (several category folds, pins on
and off), and hand-traced fits and choices: the EWMA, the category head, the offset tie-break
and the fork's list order."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.sim.reference import workload_aware as ref_mod
from shadow.sim.reference.loop import Acc, Arrival, Ctx
from shadow.sim.registry import make_policy
from tests.sim._traces import session_trace
from tests.sim.policy_mixin import PolicyMixin, run_both
from tests.tiers import unit_rows

NAME = "workload_aware"


class TestWorkloadAware(PolicyMixin):
    NAME = NAME


@pytest.mark.parametrize("category", ["type+first-turn", "type+turn", "none"])
@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("capacity", unit_rows([3, 8, 20, 64], 4, first=1))
@pytest.mark.parametrize("seed", unit_rows([1, 2], 2))
def test_session_traces_follow_the_reference(seed, capacity, pin, category):
    reqs, rec = session_trace(np.random.default_rng(seed), 160)
    got, want, gc, wc, sim, ref = run_both(NAME, "", capacity, reqs, pin=pin, records=rec,
                                           category=category)
    assert got == want
    assert gc == wc
    pol = sim.runs[0].policy
    assert pol.mean_gaps() == ref.policy.mean_gap          # the same fits, bit for bit
    assert pol.life == ref.policy.life
    assert pol.lists() == {c: list(q) for c, q in ref.policy.lists.items()}
    if category != "none" and capacity >= 8:
        assert len([g for g in pol.mean_gaps().values() if g != ref_mod.PRIOR_MEAN_GAP]) >= 2
    if pin:
        assert gc["n_self_eviction"] == 0


class Both:
    """The Cython policy and the reference driven by the same calls; victims must agree."""

    def __init__(self, capacity: int = 16) -> None:
        self.c = make_policy(NAME, capacity)
        self.r = ref_mod.make(capacity, {})
        self.vtime = 0

    def arrive(self, ts: float, category: int = 0) -> None:
        self.c.py_arrive(ts, category, self.vtime)
        self.r.set_request_ctx(Arrival(ts, category, -1, -1, 0, self.vtime))

    def request(self, ts: float, category: int, ids: list[int]) -> None:
        """A request of ``ids`` (prefix order), accessed deepest first, with no eviction."""
        self.arrive(ts, category)
        self.c.py_record(ids)
        self.r.on_request(Ctx(list(ids), len(ids), ts, 0, 0))
        for pos in range(len(ids) - 1, -1, -1):
            b = ids[pos]
            self.vtime += 1
            self.c.py_get(b, vtime=self.vtime, position=pos)
            if self.r.find(b):
                self.r.hit(b, Acc(b, 1, 1.0, -1, self.vtime, 0, pos))
            else:
                self.r.insert(b, Acc(b, 1, 1.0, -1, self.vtime, 0, pos))

    def evict(self) -> int:
        v = self.c.py_evict()
        assert self.r.evict(None, set()) == v
        return v


def _ewma(gaps: list[float]) -> float:
    m = 1.0e6
    for g in gaps:
        m = 0.95 * m + 0.05 * g
    return m


def test_ewma_by_hand():
    b = Both()
    b.request(10.0, 1, [1, 2])
    b.request(14.0, 1, [1])            # block 1: gap 4
    b.request(14.0, 2, [1, 5])         # same second: gap 0, no update (5 is new, category 2)
    b.request(15.0, 1, [1, 2])         # block 1: gap 1, block 2: gap 5 (prefix order)
    b.request(12.0, 2, [5])            # earlier than the clock: the clock stays at 15, gap 1
    assert b.c.now == 15.0
    want = {1: _ewma([4.0, 1.0, 5.0]), 2: _ewma([1.0])}
    assert b.c.mean_gaps() == want == b.r.mean_gap
    assert b.c.life == _ewma([4.0, 1.0, 5.0, 1.0]) == b.r.life


def _fitted() -> Both:
    """Category 2 holds the oldest block at the prior fit; category 1 is fitted to one reuse a
    second (mean gap and life near 1 s)."""
    b = Both()
    b.request(0.0, 2, [100])
    b.request(1.0, 1, [1])
    for k in range(400):
        b.request(2.0 + k, 1, [2, 3] if k == 399 else [2])
    # at 401: category 1 holds 1 (idle since 1), then 2 and 3 (offsets 0 and 1)
    assert b.c.mean_gaps()[1] < 1.1 and b.c.mean_gaps()[2] == 1.0e6
    assert b.c.lists() == {2: [100], 1: [1, 2, 3]}
    return b


def test_category_head_choice_is_not_lru():
    # block 100 (prior: ReuseProb about life / 1e6 = 1e-6 whatever its idle time) against
    # category 1's head: exp(-t) (1 - exp(-1)), below 1e-6 once t passes about 13 s
    b = _fitted()
    b.arrive(405.0, 1)
    assert [b.evict() for _ in range(4)] == [1, 100, 2, 3]
    b = _fitted()
    b.arrive(420.0, 1)
    assert [b.evict() for _ in range(4)] == [1, 2, 3, 100]
    # at the prior in both categories the older block goes first
    b = Both()
    b.request(0.0, 2, [100])
    b.request(1.0, 1, [1])
    b.arrive(3.0, 1)
    assert b.evict() == 100


def test_offset_tie_break_and_seq():
    b = Both()
    b.request(0.0, 1, [1, 2, 3])                  # offsets 0, 1, 2; inserted 3, 2, 1
    b.request(0.0, 2, [7])                        # offset 0
    b.arrive(1.0, 1)
    # equal reuse probabilities (same prior, same idle time): the deeper block first; then
    # block 1 and block 7 tie on offset too and category 2's key is the older (seq)
    assert [b.evict() for _ in range(4)] == [3, 2, 7, 1]


def test_fork_list_order_is_reproduced():
    # reused blocks move to the back in prefix order (root first), new ones in access order
    b = Both()
    b.request(0.0, 1, [1, 2])
    b.request(5.0, 1, [1, 2, 3, 4])
    assert b.c.lists()[1] == [1, 2, 4, 3] == list(b.r.lists[1])
    b.arrive(6.0, 1)
    assert [b.evict() for _ in range(4)] == [1, 2, 4, 3]


def test_pinned_candidates_are_skipped():
    p = make_policy(NAME, 8)
    p.py_arrive(0.0, 1)
    for pos, blk in enumerate([1, 2, 3]):
        p.py_get(blk, vtime=pos + 1, position=0)
    p.py_arrive(0.0, 2)
    p.py_get(9, vtime=4, position=0)
    p.py_pin(1)
    p.py_pin(2)
    p.py_arrive(1.0, 1)
    assert p.py_evict() == 3                      # category 1's first unpinned block
    assert p.py_evict() == 9
    assert p.py_evict() in (1, 2)                 # everything pinned: best effort


@pytest.mark.slow
def test_a_trace_without_categories_warns_once_and_runs(tmp_path):
    import subprocess
    import sys

    from tests.sim._traces import ROOT

    out = tmp_path / "results.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-c", "64", "-a",
                        "workload_aware,asym_cache", "-o", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    notes = [ln for ln in r.stderr.splitlines() if "shadow.sim.commands" in ln]
    assert len(notes) == 2, notes
    assert "workload_aware: no request has a category" in notes[1]
    assert "one class" in notes[1]
    assert "asym_cache: the cost model is uniform" in notes[0] and "lru" in notes[0]
    assert len(out.read_text().splitlines()) == 2


def test_requests_without_times_fall_back_to_the_block_clock():
    reqs, rec = session_trace(np.random.default_rng(3), 40)
    sim = run_both(NAME, "", 30, reqs, pin=True)[4]
    assert sim.runs[0].policy.trace_notes() == [
        "workload_aware: no request has a category (the trace has no types or turns, or "
        "--category none): one class, ordered by recency with the fork's list order",
        "workload_aware: 40 of 40 requests have no arrival time: their clock is the block count "
        "before them"]
    assert run_both(NAME, "", 8, reqs, pin=True, records=rec)[4].runs[0].policy.trace_notes() == []
