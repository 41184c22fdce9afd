"""Block hash -> dense block id, with bounded memory over weeks of traffic.

vLLM's block hashes are chained (a hash names a block *and* its whole prefix), so interning the
hash alone gives ids with lcp's identity rule: two entries share an id iff the block and its
prefix are the same.  Ids start at 1 and only grow; an id is never reused.

Forgetting: the table keeps two generations.  A lookup promotes a hash from the old generation
to the current one.  Every ``horizon_s / 2`` seconds the generations rotate: each entry of the
old generation that was not seen since is forgotten **unless some shadow cache still holds its
id** (``is_held(id)``), in which case it is carried over.  Invariant: a hash seen within the last
``horizon_s / 2`` seconds, or resident in any shadow cache, keeps its id; memory is bounded by
what the caches hold plus what was seen within one horizon.

What forgetting costs (see docs/connector.md): a forgotten hash that comes back gets a new id, so
an offline replay of the recording's ids sees a new block where the engine saw an old one.  No
live shadow cache could have hit it (none held it), but an offline run with a larger cache, or a
policy that would have kept it, under-counts that hit; only reuse distances beyond the horizon
are affected.  The block's key (``keys``: id -> block key, :mod:`.blockkey`) is forgotten with
its id and computed again, to the same value, so a trace joined by its keys loses nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence


class BlockInterner:
    """Dense ids for opaque block hashes (``bytes`` or ``int``), forgetting cold ones."""

    def __init__(self, horizon_s: float = 600.0,
                 is_held: Callable[[int], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.horizon_s = float(horizon_s)
        self._is_held = is_held or (lambda _id: False)
        self._clock = clock
        self._cur: dict = {}
        self._old: dict = {}
        self._next_id = 1
        #: id -> block key, for the ids the recording has written (forgotten with the id)
        self.keys: dict[int, int] = {}
        self._rotate_at = clock() + self.horizon_s / 2
        self.n_forgotten = 0
        self.n_rotations = 0

    def __len__(self) -> int:
        return len(self._cur) + len(self._old)

    @property
    def next_id(self) -> int:
        return self._next_id

    def intern(self, hashes: Sequence) -> list[int]:
        """Ids of ``hashes`` in order, assigning new ids to unseen ones."""
        cur, old = self._cur, self._old
        out: list[int] = []
        append = out.append
        for h in hashes:
            i = cur.get(h)
            if i is None:
                i = old.pop(h, None)
                if i is None:
                    i = self._next_id
                    self._next_id = i + 1
                cur[h] = i
            append(i)
        return out

    def maybe_rotate(self, now: float | None = None) -> int:
        """Rotate the generations if half a horizon has passed; the number of ids forgotten."""
        now = self._clock() if now is None else now
        if now < self._rotate_at:
            return 0
        return self.rotate(now)

    def rotate(self, now: float | None = None) -> int:
        now = self._clock() if now is None else now
        held = self._is_held
        keep = {}
        keys = self.keys
        for h, i in self._old.items():
            if held(i):
                keep[h] = i
            elif keys:
                keys.pop(i, None)
        forgotten = len(self._old) - len(keep)
        # NOTE: carried-over entries join the *new* old generation, so they are re-checked at the
        # next rotation and forgotten once no cache holds them.
        keep.update(self._cur)
        self._old = keep
        self._cur = {}
        self._rotate_at = now + self.horizon_s / 2
        self.n_forgotten += forgotten
        self.n_rotations += 1
        return forgotten

    def clear(self) -> None:
        """Forget everything (ids keep growing, so old recordings stay consistent)."""
        self._cur.clear()
        self._old.clear()
        self.keys.clear()
