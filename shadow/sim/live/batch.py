"""The live protocol: requests admitted and released one at a time, served in batches.

:class:`Admission` is one live request; :class:`LiveBatch` queues admissions and releases in
order for :meth:`shadow.sim.core.simulator.Simulator.serve_live` (the connector's worker, the replay
predictor).  See docs/sim.md "Live API".
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.live.wire import (OUT_COST, OUT_HITS, OUT_PREFIX_HITS, OUT_PREFIX_SAVED, OUT_RC,
                                 OUT_SAVED, admit_row, release_row)


class Admission:
    """A live request admitted into every cache; release it with :meth:`Simulator.release` or
    :meth:`LiveBatch.release`.

    Its per-cache results (``served``, ``hits``: gap-spanning, ``prefix_hits``: up to the first
    miss, ``cost``, ``saved``, ``prefix_saved``; lists in the simulator's cache order) exist once
    the batch that admits it has been served; before that reading them raises ShadowError.
    """

    __slots__ = ("ids", "n_anonymous", "released", "_i", "_f")

    def __init__(self, ids: list[int], n_anonymous: int) -> None:
        #: the admitted block ids (a list; the release inserts and unpins these)
        self.ids = ids
        self.n_anonymous = n_anonymous
        self.released = False
        self._i: np.ndarray | None = None   # (caches, OUT_WIDTH): OUT_RC, OUT_HITS, OUT_PREFIX_HITS
        self._f: np.ndarray | None = None   # (caches, OUT_WIDTH): OUT_COST, OUT_SAVED, ...

    def _col(self, a: np.ndarray | None, j: int) -> list:
        if a is None:
            raise ShadowError("admission not served yet (serve its LiveBatch first)")
        return a[:, j].tolist()

    @property
    def block_ids(self) -> np.ndarray:
        return np.array(self.ids, dtype=np.int64)

    @property
    def served(self) -> list[bool]:
        return [rc == 0 for rc in self._col(self._i, OUT_RC)]

    @property
    def hits(self) -> list[int]:
        return self._col(self._i, OUT_HITS)

    @property
    def prefix_hits(self) -> list[int]:
        return self._col(self._i, OUT_PREFIX_HITS)

    @property
    def cost(self) -> list[float]:
        return self._col(self._f, OUT_COST)

    @property
    def saved(self) -> list[float]:
        return self._col(self._f, OUT_SAVED)

    @property
    def prefix_saved(self) -> list[float]:
        return self._col(self._f, OUT_PREFIX_SAVED)


class LiveBatch:
    """Live admissions and releases, queued in order and served by :meth:`Simulator.serve_live`.

    Invariant: serving a batch is the same as calling :meth:`Simulator.admit` /
    :meth:`Simulator.release` for its events one by one, in order (each cache is independent),
    but it costs one call per cache for the whole batch instead of one per request per cache,
    and each cache serves every event while its tables are in the CPU cache.
    """

    __slots__ = ("ev", "flat", "offsets", "ts", "nxt", "admissions", "outside", "max_len",
                 "_rows")

    def __init__(self) -> None:
        self.ev: list[tuple[int, ...]] = []                  # rows of live/wire.pxd
        self.flat: list[int] = []
        self.offsets: list[int] = [0]
        self.ts: list[float] = []
        self.nxt: list[tuple[int, list[int]]] = []           # (entry offset, next-access values)
        self.admissions: list[tuple[int, Admission]] = []    # (event, admission)
        self.outside: list[tuple[int, Admission]] = []       # releases of earlier batches' admissions
        self.max_len = 0
        self._rows: dict[int, int] = {}                        # id(admission) -> its event here

    def __len__(self) -> int:
        return len(self.ev)

    def admit(self, block_ids: Iterable[int], n_match: int | None = None, n_anonymous: int = 0,
              timestamp_s: float = -1.0, next_access: Iterable[int] | None = None,
              category: int = 0, session_id: int = -1,
              session_next_req: int = -1) -> Admission:
        """Queue an admission (see :meth:`Simulator.admit`); its results appear once served."""
        ids = block_ids if type(block_ids) is list else [int(x) for x in block_ids]
        if ids and min(ids) < 1:
            # NOTE: ids start at 1: 0 is the empty mark, the bottom of int64 marks free slots
            raise ShadowError(f"block id {min(ids)} in an admission (block ids start at 1)")
        B = len(ids)
        nm = B if n_match is None else max(0, min(int(n_match), B))
        n_anon = max(0, int(n_anonymous))
        adm = Admission(ids, n_anon)
        e = len(self.ev)
        start = self.offsets[-1]
        if next_access is not None:
            nx = [int(x) for x in next_access]
            if len(nx) != B:
                raise ShadowError(f"next_access has {len(nx)} values for {B} blocks")
            self.nxt.append((start, nx))
        self.ev.append(admit_row(B, nm, n_anon, category, session_id, session_next_req))
        self.flat.extend(ids)
        self.offsets.append(start + B)
        self.ts.append(float(timestamp_s))
        self.admissions.append((e, adm))
        self._rows[id(adm)] = e
        if B + n_anon > self.max_len:
            self.max_len = B + n_anon
        return adm

    def release(self, adm: Admission, extra_block_ids: Iterable[int] = (),
                n_anonymous_final: int = 0) -> None:
        """Queue a release (see :meth:`Simulator.release`)."""
        if adm.released:
            raise ShadowError("request released twice")
        link = self._rows.get(id(adm), -1)
        if link < 0 and adm._i is None:
            raise ShadowError("release of an admission that was never served")
        adm.released = True
        extra = (extra_block_ids if type(extra_block_ids) is list
                 else [int(x) for x in extra_block_ids])
        e = len(self.ev)
        B = len(adm.ids)
        n_final = max(0, int(n_anonymous_final))
        self.ev.append(release_row(B, adm.n_anonymous, n_final, link))
        self.flat.extend(adm.ids)
        self.flat.extend(extra)
        L = B + len(extra)
        self.offsets.append(self.offsets[-1] + L)
        self.ts.append(-1.0)
        if link < 0:
            self.outside.append((e, adm))
        if L + n_final > self.max_len:
            self.max_len = L + n_final
