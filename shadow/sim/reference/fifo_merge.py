"""fifo_merge reference: one list in insertion order, a hand, and the pending victims of the last
scan, with the same splitmix64 draws (see ``policies/frequency/fifo_merge.pyx`` for the policy)."""

from __future__ import annotations

from shadow.sim.reference.random_compute import SplitMix64

DEFAULTS = "n-exam=100,n-keep=50,retain-policy=freq,seed=1"
HONOURS_PINS = True


class FIFOMerge:
    """``q[0]`` is the tail (oldest insert), ``q[-1]`` the head; ``value[b]`` is b's hit count
    (freq) or last access vtime (recency); ``hand`` is the next id a scan examines (None: the tail);
    ``pend[pos:]`` are the pending victims (None: removed since)."""

    def __init__(self, capacity: int, n_exam: int, n_keep: int, by_freq: bool, seed: int) -> None:
        self.capacity = capacity
        self.n_exam = n_exam
        self.n_keep = n_keep
        self.by_freq = by_freq
        self.rng = SplitMix64(seed)
        self.q: list[int] = []
        self.value: dict[int, int] = {}
        self.hand: int | None = None
        self.pend: list[int | None] = []
        self.pos = 0

    def __len__(self) -> int:
        return len(self.q)

    def find(self, b: int) -> bool:
        return b in self.value

    def hit(self, b: int, acc) -> None:
        self.value[b] = self.value[b] + 1 if self.by_freq else acc.vtime

    def insert(self, b: int, acc) -> None:
        self.q.append(b)
        self.value[b] = 0 if self.by_freq else acc.vtime

    def _leave(self, b: int) -> int:
        i = self.q.index(b)
        if b == self.hand:
            self.hand = self.q[i + 1] if i + 1 < len(self.q) else None
        del self.q[i]
        del self.value[b]
        return b

    def _next_pending(self, pinned: set[int]) -> int | None:
        while self.pos < len(self.pend):
            b = self.pend[self.pos]
            self.pos += 1
            if b is not None and b not in pinned:
                return b
        return None

    def _scan(self) -> None:
        n = len(self.q)
        start = 0 if self.hand is None else self.q.index(self.hand)
        window = [self.q[(start + i) % n] for i in range(self.n_exam)]
        nxt = (start + self.n_exam - 1) % n + 1
        self.hand = self.q[nxt] if nxt < n else None
        if self.by_freq:
            metric = [1.0e6 * (float(self.value[b]) + (self.rng.next() % 1000) / 10000.0)
                      for b in window]
        else:
            metric = [float(self.value[b]) for b in window]
        ranked = sorted(range(self.n_exam), key=lambda i: (metric[i], i))
        self.pend = [window[i] for i in ranked[:max(self.n_exam - self.n_keep - 1, 1)]]
        self.pos = 0

    def _oldest_unpinned(self, pinned: set[int]) -> int:
        return next((b for b in self.q if b not in pinned), self.q[0])

    def evict(self, acc, pinned: set[int]) -> int:
        if not self.q:
            return 0
        b = self._next_pending(pinned)
        if b is not None:
            return self._leave(b)
        if len(self.q) <= self.n_exam:
            self.hand = None
        else:
            self._scan()
            b = self._next_pending(pinned)
            if b is not None:
                return self._leave(b)
        return self._leave(self._oldest_unpinned(pinned))

    def remove(self, b: int) -> None:
        self.pend = [None if x == b else x for x in self.pend]
        self._leave(b)

    def on_request(self, ctx) -> None:
        pass


def make(capacity: int, params: dict) -> FIFOMerge:
    policy = str(params["retain-policy"]).lower()
    if policy not in ("freq", "frequency", "recency"):
        raise ValueError(f"retain-policy must be freq or recency, got {policy!r}")
    return FIFOMerge(capacity, int(params["n-exam"]), int(params["n-keep"]), policy != "recency",
                     int(params["seed"]))
