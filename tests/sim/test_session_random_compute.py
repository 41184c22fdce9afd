"""session_random_compute: the shared checks, the differential on multi-turn traces (same draws
as the reference), the score, its parameters' range checks."""

from __future__ import annotations

import pytest

from shadow.errors import ShadowError
from shadow.sim.reference.random_compute import SplitMix64
from shadow.sim.registry import make_policy
from tests.sim.session_checks import SessionMixin, at_step, serve_hand


class TestSessionRandomCompute(SessionMixin):
    NAME = "session_random_compute"


class TestSessionRandomComputeOneDraw(SessionMixin):
    NAME = "session_random_compute"
    PARAMS = "n-sample=1,seed=7"


def test_the_cheapest_drawn_per_idle_turn_goes():
    # at the 4th request's allocation (now = 3, uniform costs 1 a block): session 1 has 5 blocks
    # idle 2 turns (2.5), session 2 one block idle 1 (1.0), session 3 two blocks idle 0 -> 1
    # (2.0); one slot is needed.  Three draws with replacement from the pool [1, 2, 3] (as many
    # as sessions, n-sample being larger); the lowest drawn goes, the first drawn winning ties.
    reqs = [[1, 2, 3, 4, 5], [6], [7, 8], [9, 10]]
    blocks = {1: [1, 2, 3, 4, 5], 2: [6], 3: [7, 8]}
    score = {1: 2.5, 2: 1.0, 3: 2.0}
    for seed in range(1, 9):
        rng = SplitMix64(seed)
        drawn = [1 + rng.below(3) for _ in range(3)]
        victim = min(drawn, key=lambda s: score[s])
        p, r = at_step(serve_hand("session_random_compute", 9, reqs, [1, 2, 3, 4],
                                  params=f"n-sample=64,seed={seed}"), 3)
        want = sorted(b for s, ids in blocks.items() if s != victim for b in ids) + [9, 10]
        assert sorted(p.resident_ids()) == want, (seed, drawn)
        assert r.n_eviction == len(blocks[victim])


@pytest.mark.parametrize("params", ["n-sample=0", "seed=-1"])
def test_bad_parameters(params):
    with pytest.raises(ShadowError, match="session_random_compute"):
        make_policy("session_random_compute", 8, params)
