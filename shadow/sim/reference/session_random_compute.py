"""session_random_compute reference: ``n-sample`` draws with replacement from the live sessions
(splitmix64, ``seed``; append on creation, swap-with-last on removal), the lowest
``cost_sum / max(now - last, 1)`` goes, the first drawn winning ties."""

from __future__ import annotations

from shadow.sim.reference._session import SessionRef
from shadow.sim.reference.random_compute import SplitMix64

DEFAULTS = "n-sample=8,seed=1"
HONOURS_PINS = True


class SessionRandomCompute(SessionRef):
    def __init__(self, capacity: int, n_sample: int, seed: int) -> None:
        super().__init__(capacity)
        self.n_sample = n_sample
        self.rng = SplitMix64(seed)
        self.pool: list[object] = []
        self.pos: dict[object, int] = {}

    def select(self):
        if not self.pool:
            return None
        best_key, best = None, 0.0
        for _ in range(min(len(self.pool), max(1, self.n_sample))):
            key = self.pool[self.rng.below(len(self.pool))]
            s = self.sessions[key]
            age = float(self.now - s.last)
            score = s.cost_sum / (age if age > 1.0 else 1.0)
            if best_key is None or score < best:
                best_key, best = key, score
        return best_key

    def on_touch(self, key, is_new: bool) -> None:
        if is_new:
            self.pos[key] = len(self.pool)
            self.pool.append(key)

    def on_removed(self, key) -> None:
        i = self.pos.pop(key)
        last = self.pool.pop()
        if i < len(self.pool):
            self.pool[i] = last
            self.pos[last] = i


def make(capacity: int, params: dict) -> SessionRandomCompute:
    return SessionRandomCompute(capacity, int(params["n-sample"]), int(params["seed"]))
