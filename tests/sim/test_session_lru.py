"""session_lru: the shared checks, the differential on multi-turn traces, and hand-traced rules
of the session family (claims, shared prompts, overshoot, record-time frees, pins)."""

from __future__ import annotations

from tests.sim.session_checks import SessionMixin, at_step, serve_hand


class TestSessionLRU(SessionMixin):
    NAME = "session_lru"


def _step(pin: bool, k: int):
    # sessions 1 and 2 share the system prompt [1, 2]; session 3 is unrelated
    reqs = [[1, 2, 3], [1, 2, 4], [5, 6, 7], [1, 2, 4, 8]]
    return at_step(serve_hand("session_lru", 6, reqs, [1, 2, 3, 2], pin=pin), k)


def test_shared_prompt_survives_while_another_session_claims_it():
    p, r = _step(True, 2)
    # session 1 (least recent) went: its private block 3 only; 1 and 2 stay for session 2
    assert sorted(p.resident_ids()) == [1, 2, 4, 5, 6, 7]
    assert r.n_eviction == 1
    assert p.py_claims(1) == 1 and p.py_claims(2) == 1 and p.py_claims(4) == 1
    assert set(p.py_sessions()) == {("s", 2), ("s", 3)}


def test_overshooting_evict_n_is_counted_and_pins_keep_the_request():
    p, r = _step(True, 3)
    # one slot needed; session 2 (the arriving one) is least recent: dropped, its pinned blocks
    # 1, 2, 4 stay (claimed again by its new turn), then session 3 goes whole: 3 blocks for 1
    assert sorted(p.resident_ids()) == [1, 2, 4, 8]
    assert r.n_eviction == 1 + 3
    assert r.n_self_eviction == 0 and r.n_unexpected_eviction == 0
    assert p.py_orphans() == []
    assert p.py_sessions() == {("s", 2): [1, 2, 4, 8]}


def test_unpinned_the_arriving_session_evicts_itself():
    p, r = _step(False, 3)
    # --no-pin (the seed's behaviour): session 2's blocks go (3 self-evictions), then session 3
    assert r.n_self_eviction == 3
    assert r.n_eviction == 1 + 6
    assert sorted(p.resident_ids()) == [1, 2, 4, 8]
    assert r.n_hits == 2 + 3 and r.n_unexpected_eviction == 0     # match hits count before


def test_a_turn_frees_the_blocks_it_dropped_as_evictions():
    reqs = [[1, 2, 3, 4], [10, 2, 3], [1, 5]]
    p, r = at_step(serve_hand("session_lru", 10, reqs, [1, 2, 1]), 2)
    # session 1's turn slid: 3 and 4 left its path; 3 is still session 2's, 4 is freed at once
    assert sorted(p.resident_ids()) == [1, 2, 3, 5, 10]
    assert r.n_eviction == 1 and r.n_unexpected_eviction == 0


def test_requests_without_a_session_are_their_own_sessions():
    reqs = [[1, 2], [1, 3], [4, 5]]
    p, r = at_step(serve_hand("session_lru", 4, reqs, [-1, -1, -1]), 2)
    # the first request's session (its own) went: block 2; block 1 stays for the second
    assert sorted(p.resident_ids()) == [1, 3, 4, 5]
    assert p.trace_warning() is not None
