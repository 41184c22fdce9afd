"""session_s3fifo: the shared checks, the differential on multi-turn traces, hand-traced order,
its parameters' range checks."""

from __future__ import annotations

import pytest

from shadow.errors import ShadowError
from shadow.sim.registry import make_policy
from tests.sim.session_checks import SessionMixin, at_step, serve_hand


class TestSessionS3FIFO(SessionMixin):
    NAME = "session_s3fifo"


class TestSessionS3FIFOSmallRatio(SessionMixin):
    NAME = "session_s3fifo"
    PARAMS = "small-size-ratio=0.5,move-to-main-threshold=0,ghost-sessions=2"


def test_small_head_goes_unless_recorded_twice_and_a_ghost_enters_main():
    reqs = [[1, 2], [1, 2, 3], [4, 5], [6, 7], [8], [4, 5, 9]]
    sess = [1, 1, 2, 3, 4, 2]
    # session 1 (freq 2 > 1) is promoted from small's head; session 2 (freq 1) is the victim
    p, _ = at_step(serve_hand("session_s3fifo", 7, reqs, sess), 4)
    assert sorted(p.resident_ids()) == [1, 2, 3, 6, 7, 8]
    p, _ = at_step(serve_hand("session_s3fifo", 7, reqs, sess), 5)
    # session 2 came back from the ghost (into main); its room came from small's head, session 3
    assert sorted(p.resident_ids()) == [1, 2, 3, 4, 5, 8, 9]


@pytest.mark.parametrize("params", ["small-size-ratio=1.5", "move-to-main-threshold=4",
                                    "ghost-sessions=-1"])
def test_bad_parameters(params):
    with pytest.raises(ShadowError, match="session_s3fifo"):
        make_policy("session_s3fifo", 8, params)
