"""session_lru reference: sessions in an OrderedDict, first = least recently recorded."""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference._session import SessionRef

DEFAULTS = ""
HONOURS_PINS = True


class SessionLRU(SessionRef):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.order: OrderedDict[object, None] = OrderedDict()

    def select(self):
        return next(iter(self.order), None)

    def on_touch(self, key, is_new: bool) -> None:
        if is_new:
            self.order[key] = None
        else:
            self.order.move_to_end(key)

    def on_removed(self, key) -> None:
        self.order.pop(key, None)


def make(capacity: int, params: dict) -> SessionLRU:
    return SessionLRU(capacity)
