"""session_belady: the shared checks, the differential on multi-turn traces, hand-traced order."""

from __future__ import annotations

import pytest

from shadow.errors import ShadowError
from tests.sim.session_checks import SessionMixin, at_step, serve_hand


class TestSessionBelady(SessionMixin):
    NAME = "session_belady"


def test_the_session_whose_next_request_is_farthest_goes():
    reqs = [[1, 2], [3, 4], [5, 6], [7, 8], [3, 4, 9]]
    # next requests (1-based): session 1 never again, session 2 at 5, session 3 at 9, session 4 at 7
    nxt = [-1, 5, 9, 7, -1]
    p, r = at_step(serve_hand("session_belady", 6, reqs, [1, 2, 3, 4], nxt[:4]), 3)
    # full at 6: session 1 (never returns) went whole
    assert sorted(p.resident_ids()) == [3, 4, 5, 6, 7, 8]
    p, r = at_step(serve_hand("session_belady", 6, reqs, [1, 2, 3, 4, 2], nxt), 4)
    # session 3 (next at 9) is farther than session 4 (7); session 2 is the arriving one
    assert sorted(p.resident_ids()) == [3, 4, 7, 8, 9]
    assert r.n_eviction == 2 + 2


def test_ties_go_to_the_session_recorded_longest_ago():
    reqs = [[1], [2], [3], [4]]
    p, _ = at_step(serve_hand("session_belady", 3, reqs, [1, 2, 3, 4]), 3)
    assert sorted(p.resident_ids()) == [2, 3, 4]


def test_the_live_path_refuses_it():
    from shadow.connector.config import _check_policy_with_registry

    with pytest.raises(ShadowError, match="session_belady.*needs the future"):
        _check_policy_with_registry("session_belady", "")
