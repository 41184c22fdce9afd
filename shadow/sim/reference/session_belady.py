"""session_belady reference: the live session whose next request is farthest (ties: the one
recorded longest ago); a heap of (next, last, key) entries checked against the session on pop."""

from __future__ import annotations

import heapq

from shadow.sim.reference._session import SessionRef

DEFAULTS = ""
HONOURS_PINS = True


class SessionBelady(SessionRef):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.heap: list[tuple[int, int, object]] = []

    def select(self):
        while self.heap:
            neg_next, last, key = self.heap[0]
            s = self.sessions.get(key)
            if s is None or s.last != last:
                heapq.heappop(self.heap)
                continue
            return key
        return None

    def on_touch(self, key, is_new: bool) -> None:
        s = self.sessions[key]
        heapq.heappush(self.heap, (-s.next, s.last, key))


def make(capacity: int, params: dict) -> SessionBelady:
    return SessionBelady(capacity)
