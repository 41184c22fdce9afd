"""session_arc: the shared checks, the differential on multi-turn traces, hand-traced order."""

from __future__ import annotations

from tests.sim.session_checks import SessionMixin, at_step, serve_hand


class TestSessionARC(SessionMixin):
    NAME = "session_arc"


def test_t1_goes_first_and_a_b1_ghost_raises_the_target():
    # session 1 recorded twice (T2), session 2 once (T1); session 3 needs room: T1's session 2 goes
    reqs = [[1, 2], [1, 2, 3], [4, 5], [6, 7], [4, 5, 8]]
    sess = [1, 1, 2, 3, 2]
    p, r = at_step(serve_hand("session_arc", 6, reqs, sess), 3)
    assert sorted(p.resident_ids()) == [1, 2, 3, 6, 7]
    assert p.p == 0.0
    p, r = at_step(serve_hand("session_arc", 6, reqs, sess), 4)
    # session 2 back from B1: p = min(c, 0 + max(1, |B2| / |B1|)) = 1 and it enters T2; the room
    # came from T1's session 3 (|T1| = 1 > p = 0 at the eviction)
    assert p.p == 1.0
    assert sorted(p.resident_ids()) == [1, 2, 3, 4, 5, 8]
