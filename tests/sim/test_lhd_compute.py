"""lhd_compute: shared mixin (exact differential vs the reference under the position cost
model, at the default and at a short reconfiguration interval), a hand-traced rank and
eviction, the cost refreshed on every access, and: a uniform cost makes lhd's decisions."""

from __future__ import annotations

import pytest

from shadow.errors import ShadowError
from shadow.sim.reference.lhd import f32
from shadow.sim.registry import make_policy
from tests.sim._traces import conversation, next_access
from tests.sim.policy_mixin import PolicyMixin


class TestLHDCompute(PolicyMixin):
    NAME = "lhd_compute"


class TestLHDComputeReconfiguring(PolicyMixin):
    NAME = "lhd_compute"
    PARAMS = "reconfigure-interval=8,seed=7"


def test_rank_is_density_times_cost_hand_traced():
    p = make_policy("lhd_compute", 3)          # no explorers (budget 0)
    for b, c in ((1, 10), (2, 1), (3, 5)):
        p.py_get(b, cost=c)
    # all three at class 0, age 0: density 17
    assert [p.rank(b) for b in (1, 2, 3)] == [170.0, 17.0, 85.0]
    assert p.py_evict(cost=7) == 2             # the cheapest goes (lhd would take a draw)
    p.py_get(1, cost=3)                        # a hit refreshes the cost: 1 is now class 15
    assert p.block_cost(1) == 3.0 and p.rank(1) == 32.0 * 3
    assert p.state()["ewma_victim"] == f32(f32(1 - f32(0.9)) * 17.0)


def test_overflowed_block_goes_first_whatever_its_cost():
    # reconfigurations every 1000 accesses: from the 6th on, ages count 2 accesses (shift 1), so
    # block 1, untouched since clock 0, reaches age 19999 at clock 39998
    p = make_policy("lhd_compute", 2, "reconfigure-interval=1000")
    p.py_get(1, cost=1000)
    p.py_get(2, cost=1)
    for _ in range(39996):
        p.py_get(2, cost=1)
    assert p.state()["shift"] == 1 and p.state()["clock"] == 39998
    assert p.rank(1) == -3.4028234663852886e38 and p.rank(2) > 0
    assert p.py_evict() == 1


def _run(name: str, trace, cost_model: str, pin: bool):
    from shadow.sim import CacheSpec, Simulator
    from shadow.trace.batch import Batch

    sim = Simulator([CacheSpec(name, c, "") for c in (64, 512)], pin=pin,
                    cost_model=cost_model)
    sim.feed(Batch.from_lists(trace, next_access=next_access(trace)))
    return [(r.n_hits, r.n_eviction, r.n_self_eviction, sorted(run.policy.resident_ids()))
            for r, run in zip(sim.results(), sim.runs)]


@pytest.mark.slow
@pytest.mark.parametrize("pin", [False, True])
@pytest.mark.parametrize("cost_model", ["uniform", "linear:4,0"])
def test_uniform_cost_makes_lhd_decisions(cost_model, pin):
    trace = conversation()[:2000]
    assert _run("lhd_compute", trace, cost_model, pin) == _run("lhd", trace, cost_model, pin)


def test_position_cost_changes_decisions():
    trace = conversation()[:2000]
    assert _run("lhd_compute", trace, "position", False) != _run("lhd", trace, "position", False)


def test_bad_parameters_are_clear_errors():
    for bad, word in (("reconfigure-interval=0", "reconfigure-interval"),
                      ("seed=18446744073709551616", "seed")):
        with pytest.raises(ShadowError, match=f"lhd_compute: {word}"):
            make_policy("lhd_compute", 8, bad)
