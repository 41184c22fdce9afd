"""session_s3fifo reference: small and main FIFOs of sessions and a ghost FIFO of session keys."""

from __future__ import annotations

from collections import OrderedDict

from shadow.sim.reference._session import SessionRef

DEFAULTS = "small-size-ratio=0.1,move-to-main-threshold=1,ghost-sessions=0"
HONOURS_PINS = True


class SessionS3FIFO(SessionRef):
    def __init__(self, capacity: int, ratio: float, threshold: int, ghost_cap: int) -> None:
        super().__init__(capacity)
        self.ratio = ratio
        self.threshold = threshold
        self.ghost_cap = ghost_cap
        self.small: OrderedDict[object, None] = OrderedDict()
        self.main: OrderedDict[object, None] = OrderedDict()
        self.ghost: OrderedDict[object, None] = OrderedDict()

    def select(self):
        small, main = self.small, self.main
        for _ in range(2 * (len(small) + len(main)) + 9):
            if small and (not main or len(small) > self.ratio * (len(small) + len(main))):
                key = next(iter(small))
                if self.sessions[key].freq > self.threshold:
                    del small[key]
                    main[key] = None
                    continue
                return key
            if not main:
                return None
            key = next(iter(main))
            s = self.sessions[key]
            if s.freq > 0:
                s.freq -= 1
                main.move_to_end(key)
                continue
            return key
        return next(iter(small), None) or next(iter(main), None)

    def on_touch(self, key, is_new: bool) -> None:
        if not is_new:
            return
        if key in self.ghost:
            del self.ghost[key]
            self.main[key] = None
        else:
            self.small[key] = None

    def on_removed(self, key) -> None:
        if key in self.small:
            del self.small[key]
            self.ghost[key] = None
            cap = self.ghost_cap or len(self.small) + len(self.main) + 1
            while len(self.ghost) > cap:
                self.ghost.popitem(last=False)
        else:
            self.main.pop(key, None)


def make(capacity: int, params: dict) -> SessionS3FIFO:
    return SessionS3FIFO(capacity, float(params["small-size-ratio"]),
                         int(params["move-to-main-threshold"]), int(params["ghost-sessions"]))
