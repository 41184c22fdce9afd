"""``sticky_least_loaded``: a session stays on the replica it was first given; a new session goes
to the replica with the fewest active sessions.

vllm-router 0.1.17 ``src/policies/sticky_least_loaded.rs``: the load is the count of active
sessions per replica (not requests in flight); a new session takes the least of them, ties
broken by rendezvous hashing, the highest ``fbi_hash("{session}:{url}")`` (lines 150-179, the
first replica on equal weights); a session idle for ``ttl`` seconds (7200, line 41) is
reassigned when it returns, and a sweep every 60 s of the clock (lines 47, 123-143) forgets the
idle ones, so their replicas' counts drop.  The session id is the value of the first id header
(``x-session-id``, then ``x-user-id``: ``hash_key.rs:76``): the trace's session, else its user.
A request with neither is balanced the same way but not recorded; the real router breaks its
ties with the request's text, which a trace has not: here its file index (``request:<i>``).
The clock is the trace's (arrival times); ``ttl=0`` keeps sessions for ever (a trace without
times needs it).
"""

from __future__ import annotations

from shadow.errors import ShadowError
from shadow.sim.fleet.consistent_hash import fbi_hash
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="sessions stick; a new session to the replica with the fewest active sessions",
    source="vllm-router 0.1.17 src/policies/sticky_least_loaded.rs:41-47,123-179,204-299",
    defaults="ttl=7200.0",
)

#: seconds between sweeps of idle sessions (``SWEEP_INTERVAL_SECS``)
SWEEP_S = 60.0


class StickyLeastLoaded(Router):
    def __init__(self, names: list[str], ttl: float) -> None:
        self.names = names
        self.ttl = ttl
        self.sessions: dict[str, tuple[int, float]] = {}     # id -> (replica, last access)
        self.counts = [0] * len(names)
        self.last_sweep: float | None = None

    def needs_clock(self) -> str | None:
        return "its sessions expire after ttl seconds (ttl=0 keeps them)" if self.ttl > 0 else None

    def _expired(self, last: float, now: float) -> bool:
        return self.ttl > 0 and now - last >= self.ttl

    def _sweep(self, now: float) -> None:
        if self.last_sweep is None:
            self.last_sweep = now
        if now - self.last_sweep < SWEEP_S:
            return
        for sid in [s for s, (_, last) in self.sessions.items() if self._expired(last, now)]:
            r, _ = self.sessions.pop(sid)
            self.counts[r] -= 1
        self.last_sweep = now

    def _least(self, tie_key: str) -> int:
        low = min(self.counts)
        best, best_w = -1, -1
        for r, c in enumerate(self.counts):
            if c != low:
                continue
            w = fbi_hash(f"{tie_key}:{self.names[r]}")
            if best < 0 or w > best_w:
                best, best_w = r, w
        return best

    def route(self, q: Query, view: FleetView) -> int:
        now = max(q.t, 0.0)
        self._sweep(now)
        sid = str(q.session) if q.session >= 0 else str(q.user) if q.user >= 0 else None
        if sid is None:
            return self._least(f"request:{q.index}")
        entry = self.sessions.get(sid)
        if entry is not None:
            r, last = entry
            if not self._expired(last, now):
                self.sessions[sid] = (r, now)
                return r
            del self.sessions[sid]
            self.counts[r] -= 1
        r = self._least(sid)
        self.sessions[sid] = (r, now)
        self.counts[r] += 1
        return r


def check(params: dict) -> None:
    if not params["ttl"] >= 0:
        raise ShadowError(f"router sticky_least_loaded: ttl must be >= 0 seconds, got "
                          f"{params['ttl']}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return StickyLeastLoaded(list(ctx.names), float(params["ttl"]))
