import pytest

from shadow.errors import ShadowError
from shadow.sim.registry import make_policy
from tests.sim.policy_mixin import PolicyMixin


class TestS3FIFOCompute(PolicyMixin):
    NAME = "s3fifo_compute"


class TestS3FIFOComputeThreshold(PolicyMixin):
    """A threshold between the costs the mixin's position cost model gives (1 + position), so that both
    outcomes of every test (promote/ghost, reinsert/leave) and the ghost's freq are exercised."""
    NAME = "s3fifo_compute"
    PARAMS = "small-size-ratio=0.3,ghost-size-ratio=0.5,move-to-main-threshold=4"


def _fill(p, n, cost=1):
    for b in range(1, n + 1):
        p.py_get(b, cost=cost)


def test_s3fifo_compute_fills_main_first_then_small():
    p = make_policy("s3fifo_compute", 10)          # small 1, main 9, ghost 9
    assert (p.small_size, p.main_size, p.ghost_size) == (1, 9, 9)
    _fill(p, 10)
    q = p.queues()
    assert q["main"] == list(range(1, 10)) and q["small"] == [10]
    assert set(q["freq"].values()) == {1}                # insert sets freq 1


def test_s3fifo_compute_uniform_cost_is_fifo_then_clock():
    """cost 1, threshold 1: every small victim is promoted (freq >= 1), and main is a CLOCK whose
    counter is freq: a block with freq f gets min(f, 4) - 1 further passes."""
    p = make_policy("s3fifo_compute", 10)
    _fill(p, 10)
    p.py_get(3)                                      # freq(3) = 2
    p.py_get(3)                                      # 3
    p.py_get(3)                                      # 4
    p.py_get(3)                                      # 5 (min(5, 4) - 1 = 3 passes)
    # small's 10 (freq 1) moves to main; main (10 > 9) then reinserts 1..9 and 10 once each
    # (freq 1 -> 0, 3: 5 -> 3) and 1, met again with freq 0, leaves
    assert p.py_get(11) is False
    q = p.queues()
    assert 1 not in q["main"] and q["small"] == [11]
    assert q["main"] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert q["freq"][3] == 3 and q["freq"][2] == 0 and q["freq"][10] == 0
    assert q["ghost"] == []                          # nothing left small by the ghost
    p.py_get(12)                                     # small's 11 promoted; main 10 > 9: 2 leaves
    assert p.queues()["main"] == [3, 4, 5, 6, 7, 8, 9, 10, 11]
    p.py_get(13)                                     # 12 promoted; 3 (freq 3) reinserted with 2; 4 leaves
    q = p.queues()
    assert 4 not in q["main"] and q["main"][-1] == 3 and q["freq"][3] == 2


def test_s3fifo_compute_arriving_cost_decides_promotion():
    """Threshold 2: small's candidate with freq 1 is promoted iff the ARRIVING block's cost is at
    least 2 (freq / (1 / cost) >= 2), whatever the candidate's own cost."""
    p = make_policy("s3fifo_compute", 10, "move-to-main-threshold=2")
    _fill(p, 10, cost=1)                             # main 1..9, small [10], all freq 1
    assert p.py_evict(cost=1) == 10                  # 1 * 1 < 2: into the ghost with freq 1
    assert p.queues()["ghost"] == [10]
    p.py_get(20, cost=1)                             # small [20]
    # arriving cost 2: 20 (freq 1) promoted; main then over its size: 1 (1 * 2 >= 2) reinserted
    # with 0, ..., 9 likewise, 20 likewise; 1 leaves (0 < 2)
    assert p.py_evict(cost=2) == 1
    q = p.queues()
    assert q["small"] == [] and q["main"][-1] == 20 and q["freq"][20] == 0


def test_s3fifo_compute_ghost_hit():
    p = make_policy("s3fifo_compute", 10, "move-to-main-threshold=3")
    _fill(p, 10)
    assert p.py_evict(cost=1) == 10                  # 1 * 1 < 3: into the ghost, freq 1
    assert p.py_evict(cost=1) == 1                   # small empty: main's 1 (1 * 1 < 3) leaves
    p.py_get(30)                                     # small [30]
    p.py_get(10, cost=1)                             # ghost freq 1: 1 * 1 < 3: small, freq 2
    q = p.queues()
    assert q["small"] == [30, 10] and q["freq"][10] == 2 and q["ghost"] == []
    assert p.py_evict(cost=1) == 30
    assert p.py_evict(cost=1) == 10                  # freq 2 * 1 < 3
    assert p.queues()["ghost"] == [30, 10]
    p.py_get(10, cost=1)                             # small is empty (mean size 0): main
    assert p.queues()["main"][-1] == 10 and p.queues()["freq"][10] == 1
    p.py_get(31)                                     # small [31]
    p.py_remove(5)                                   # room, so no eviction comes first
    p.py_get(30, cost=3)                             # ghost freq 1, cost 3: 1 / (1/3) >= 3: main
    q = p.queues()
    assert q["main"][-1] == 30 and q["freq"][30] == 1 and q["small"] == [31]


def test_s3fifo_compute_pinned_main_candidate():
    p = make_policy("s3fifo_compute", 10)
    _fill(p, 10)
    p.py_evict()                                     # as the uniform trace: 1 leaves, freqs 0
    p.py_get(11)                                     # small [11]
    p.py_pin(11)                                     # pinned but passes: promoted all the same
    p.py_pin(2)                                      # main's oldest, freq 0: would leave
    # small's 11 moves to main; main is then over its size: 2 is passed over (keeps its place and
    # freq 0), 3 (freq 0) leaves
    assert p.py_evict() == 3
    q = p.queues()
    assert q["small"] == [] and q["main"][0] == 2 and q["freq"][2] == 0
    assert q["main"][-1] == 11 and q["freq"][11] == 1


def test_s3fifo_compute_pinned_small_candidate_then_other_queue():
    p = make_policy("s3fifo_compute", 20, "move-to-main-threshold=2")   # small 2, main 18
    _fill(p, 20)                                     # main 1..18, small [19, 20], freq 1
    p.py_pin(19)
    assert p.py_evict(cost=1) == 20                  # 19 would leave (1 * 1 < 2): passed over
    q = p.queues()
    assert q["small"] == [19] and q["ghost"] == [20]
    # small has only a pinned block that would leave: main takes the step; 1 (1 * 1 < 2) leaves
    assert p.py_evict(cost=1) == 1
    assert p.queues()["small"] == [19]


def test_s3fifo_compute_all_pinned_best_effort():
    p = make_policy("s3fifo_compute", 4, "move-to-main-threshold=2")   # small 1, main 3
    _fill(p, 4)                                      # main 1 2 3, small [4], freq 1
    for b in range(1, 5):
        p.py_pin(b)
    assert p.py_evict(cost=1) == 4                   # every block would leave: small's oldest
    assert p.queues()["ghost"] == [4]
    assert p.py_evict(cost=1) == 1                   # then main's oldest
    q = make_policy("s3fifo_compute", 4)             # threshold 1: the pinned blocks pass, so
    _fill(q, 4)                                      # each is promoted/reinserted down to freq 0
    for b in range(1, 5):
        q.py_pin(b)
    assert q.py_evict() == 1
    assert q.queues()["main"] == [2, 3, 4] and set(q.queues()["freq"].values()) == {0}


@pytest.mark.parametrize("params,message", [
    ("small-size-ratio=1", "policy s3fifo_compute: small-size-ratio must be in (0, 1)"),
    ("ghost-size-ratio=5", "policy s3fifo_compute: ghost-size-ratio must be in [0, 4]"),
    ("move-to-main-threshold=0", "policy s3fifo_compute: move-to-main-threshold must be in [1, 255]"),
])
def test_s3fifo_compute_refuses_out_of_range(params, message):
    with pytest.raises(ShadowError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        make_policy("s3fifo_compute", 100, params)
