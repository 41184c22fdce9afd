"""session_arc reference: ARC's T1, T2, B1, B2 over session keys, the target ``p`` in sessions."""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference._session import SessionRef

DEFAULTS = ""
HONOURS_PINS = True


class SessionARC(SessionRef):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.t1: OrderedDict[object, None] = OrderedDict()
        self.t2: OrderedDict[object, None] = OrderedDict()
        self.b1: OrderedDict[object, None] = OrderedDict()
        self.b2: OrderedDict[object, None] = OrderedDict()
        self.p = 0.0

    def _trim(self) -> None:
        c = len(self.t1) + len(self.t2) + 1
        while len(self.b1) + len(self.b2) > c:
            (self.b1 if self.b1 else self.b2).popitem(last=False)

    def select(self):
        if not self.t1 and not self.t2:
            return None
        if self.t1 and (not self.t2 or len(self.t1) > self.p):
            return next(iter(self.t1))
        return next(iter(self.t2))

    def on_touch(self, key, is_new: bool) -> None:
        n1, n2 = float(len(self.b1)), float(len(self.b2))
        c = float(len(self.t1) + len(self.t2) + 1)
        if key in self.t1 or key in self.t2:
            self.t1.pop(key, None)
            self.t2.pop(key, None)
        elif key in self.b1:
            self.p = min(c, self.p + max(1.0, n2 / max(1.0, n1)))
            del self.b1[key]
        elif key in self.b2:
            self.p = max(0.0, self.p - max(1.0, n1 / max(1.0, n2)))
            del self.b2[key]
        else:
            self.t1[key] = None
            self._trim()
            return
        self.t2[key] = None
        self._trim()

    def on_removed(self, key) -> None:
        if key in self.t1:
            del self.t1[key]
            self.b1[key] = None
        elif key in self.t2:
            del self.t2[key]
            self.b2[key] = None
        self._trim()


def make(capacity: int, params: dict) -> SessionARC:
    return SessionARC(capacity)
