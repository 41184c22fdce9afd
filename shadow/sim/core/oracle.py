"""Next-access times for the oracles when the serve loop skips requests.

The oracles (``belady``, ``belady_compute``: policies with ``NEEDS_NEXT_ACCESS``) read each
entry's next-access vtime from the trace.  The trace's values count every request of the file, but
a cache smaller than a request's distinct block count skips that request (it touches nothing).
Two things then go wrong with the trace's values:

* an access inside a skipped request is not an access at all, yet it is some earlier entry's "next
  access": that block looks needed soon when it is not (a stale, too-early value), and belady keeps
  the wrong block;
* the loop's ``vtime`` does not advance over a skipped request (``core/loop.pyx`` returns before its
  access phase, and so does ``reference/loop.py``), while the trace's positions do, so
  ``belady_compute``'s ``next - now`` distances drift by the skipped requests' lengths.

:func:`recompute_next_access` makes, per capacity, the next-access values of the trace *without*
the requests that capacity skips, counted in the loop's own vtime: the 1-based position among the
entries of served requests only (forward-flattened, file order).  Entries of skipped requests get
-1 (the loop never reads them).  Invariant: for a served entry at served position ``v``, the value
is -1 or the served position ``w > v`` of the next entry of a served request with the same id.

Which requests a cache skips depends only on its capacity (offline there are no reserved slots):
``distinct(request) > capacity``.  So one pass serves every cache of one capacity, and caches are
grouped by capacity.  Nothing is done when the header says no request is longer than the smallest
oracle capacity (distinct <= length): the rare case is a cache smaller than the largest request.

Memory: the pass streams the trace batch by batch.  Its state is one int64 per block id (the last
served entry of each id) and the output, one int64 per entry per capacity; both live in unlinked
temporary files mapped into memory (``np.memmap``), so they take page cache, not resident heap.
"""

from __future__ import annotations

import logging
import tempfile
from typing import Iterable, Sequence

import numpy as np

from shadow.errors import ShadowError
from shadow.trace.batch import Batch

log = logging.getLogger(__name__)


#: The most entries an array is given up front from a header's counts (128 MiB of int64).
PRESIZE_MAX = 1 << 24


class _FileArray:
    """A growable int64 array in an unlinked temporary file, mapped with ``np.memmap``."""

    def __init__(self, size: int, fill: int, directory: str | None = None) -> None:
        self._f = tempfile.TemporaryFile(prefix="shadow-oracle-", dir=directory)
        self._fill = fill
        self.size = 0
        self.a: np.ndarray = np.empty(0, dtype=np.int64)
        self.ensure(max(int(size), 1))

    def ensure(self, n: int) -> None:
        """Make the array hold at least ``n`` items (new items set to the fill value)."""
        if n <= self.size:
            return
        new = max(int(n), 2 * self.size)
        if self.size:
            self.a.flush()
        del self.a
        self._f.truncate(new * 8)
        self.a = np.memmap(self._f, dtype=np.int64, mode="r+", shape=(new,))
        if self._fill:                     # NOTE: a grown file reads as zeros already
            self.a[self.size:] = self._fill
        self.size = new

    def close(self) -> None:
        self.a = np.empty(0, dtype=np.int64)
        self._f.close()


def distinct_counts(batch: Batch, longer_than: int) -> np.ndarray:
    """Distinct block count of each request of ``batch``; exact only where the length exceeds
    ``longer_than`` (elsewhere the length, an upper bound that cannot make it skip)."""
    lens = np.diff(np.asarray(batch.offsets, dtype=np.int64))
    out = lens.copy()
    for r in np.flatnonzero(lens > longer_than):
        a, b = int(batch.offsets[r]), int(batch.offsets[r + 1])
        ids = batch.block_ids[a:b]
        # NOTE: prefix-interned ids are strictly increasing within a request (no duplicates).
        if not bool(np.all(ids[1:] > ids[:-1])):
            out[r] = np.unique(ids).shape[0]
    return out


class _Group:
    """The state of one capacity during the pass."""

    def __init__(self, capacity: int, n_entries: int, n_ids: int, directory: str | None) -> None:
        self.capacity = capacity
        self.out = _FileArray(n_entries, -1, directory)
        self.last = _FileArray(n_ids + 1, 0, directory)   # id -> 1 + global index of last served entry
        self.served = 0          # served entries so far (the loop's vtime between requests)
        self.n_skipped = 0


class RecomputedNextAccess:
    """Per-capacity next-access arrays made by :func:`recompute_next_access`.

    ``for_batch(capacity, batch, default)`` returns the slice of the recomputed values covering
    ``batch`` (located by ``batch.first_vtime`` and its length), or ``default`` for a capacity that
    skips nothing.
    """

    def __init__(self, groups: dict[int, _Group], n_entries: int) -> None:
        self._groups = groups
        self.n_entries = n_entries

    @property
    def capacities(self) -> list[int]:
        """The capacities whose values differ from the trace's (they skip some request)."""
        return sorted(self._groups)

    def n_skipped(self, capacity: int) -> int:
        g = self._groups.get(capacity)
        return g.n_skipped if g is not None else 0

    def for_batch(self, capacity: int, batch: Batch, default: np.ndarray) -> np.ndarray:
        g = self._groups.get(capacity)
        if g is None:
            return default
        lo = int(batch.first_vtime) - 1
        hi = lo + int(batch.n_blocks)
        if lo < 0 or hi > self.n_entries:
            raise ShadowError(f"recomputed next access covers {self.n_entries} entries; the batch "
                              f"at request {batch.first_request} spans entries {lo}..{hi}")
        return np.asarray(g.out.a[lo:hi])

    def array(self, capacity: int) -> np.ndarray | None:
        """All recomputed values of ``capacity`` (a copy), None if it skips nothing."""
        g = self._groups.get(capacity)
        return None if g is None else np.array(g.out.a[:self.n_entries])

    def close(self) -> None:
        for g in self._groups.values():
            g.out.close()
        self._groups = {}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:     # NOTE: interpreter shutdown; the temporary files are unlinked anyway
            pass


def _step(g: _Group, batch: Batch, distinct: np.ndarray, order: np.ndarray) -> None:
    """Advance one capacity's pass over one batch.  ``order`` is a stable argsort of the ids."""
    offsets = np.asarray(batch.offsets, dtype=np.int64)
    lens = np.diff(offsets)
    base = int(batch.first_vtime) - 1              # global index of the batch's first entry
    m = int(batch.n_blocks)
    skip = distinct > g.capacity
    g.n_skipped += int(np.count_nonzero(skip))
    g.out.ensure(base + m)
    if skip.any():
        served = np.repeat(~skip, lens)
        vt = np.cumsum(served, dtype=np.int64)      # 1-based served position within the batch
        sel = order[served[order]]                   # served entries, sorted by id, stable
    else:
        vt = np.arange(1, m + 1, dtype=np.int64)
        sel = order
    if sel.shape[0] == 0:
        return
    sid = np.asarray(batch.block_ids, dtype=np.int64)[sel]
    spos = vt[sel] + g.served                        # served position (the loop's vtime)
    sg = sel + base                                  # global entry index
    same = sid[1:] == sid[:-1]
    out = g.out.a
    # within the batch: each entry's next access is the next entry of the same id (sorted, stable)
    out[sg[:-1][same]] = spos[1:][same]
    # across batches: the first entry of each id is the next access of its last served entry
    first = np.ones(sid.shape[0], dtype=bool)
    first[1:] = ~same
    fid = sid[first]
    g.last.ensure(int(fid.max()) + 1)
    prev = g.last.a[fid]
    has = prev > 0
    out[prev[has] - 1] = spos[first][has]
    lastm = np.ones(sid.shape[0], dtype=bool)
    lastm[:-1] = ~same
    g.last.a[sid[lastm]] = sg[lastm] + 1
    g.served += int(vt[-1]) if m else 0


def recompute_next_access(batches: Iterable[Batch], capacities: Sequence[int], *,
                          n_entries: int = 0, n_ids: int = 0,
                          directory: str | None = None) -> RecomputedNextAccess:
    """One pass over ``batches`` (a whole trace, file order): next-access values per capacity,
    computed without the requests that capacity skips (see the module docstring).

    ``n_entries``/``n_ids`` size the temporary arrays up front (the header's counts); they grow if
    short.  Capacities that skip nothing are dropped from the result.
    """
    caps = sorted({int(c) for c in capacities})
    if not caps:
        return RecomputedNextAccess({}, 0)
    # NOTE: a header's counts are only claims (a damaged file may say 2**40 accesses): presize up
    # to PRESIZE_MAX entries and let the arrays grow with what the batches really hold.
    n_entries = max(0, min(int(n_entries), PRESIZE_MAX))
    n_ids = max(0, min(int(n_ids), PRESIZE_MAX))
    groups = {c: _Group(c, n_entries, n_ids, directory) for c in caps}
    total = 0
    try:
        for batch in batches:
            if int(batch.first_vtime) - 1 != total:
                raise ShadowError(f"trace batches are not contiguous: batch at request "
                                  f"{batch.first_request} starts at vtime {batch.first_vtime}, "
                                  f"expected {total + 1}")
            m = int(batch.n_blocks)
            if m == 0:
                continue
            distinct = distinct_counts(batch, caps[0])
            order = np.argsort(np.asarray(batch.block_ids, dtype=np.int64), kind="stable")
            for g in groups.values():
                _step(g, batch, distinct, order)
            total += m
    except BaseException:
        for g in groups.values():
            g.out.close()
            g.last.close()
        raise
    for g in groups.values():
        g.last.close()                       # NOTE: only the pass needs it
        g.out.ensure(total)
    keep = {c: g for c, g in groups.items() if g.n_skipped}
    for g in groups.values():
        if not g.n_skipped:
            g.out.close()
    return RecomputedNextAccess(keep, total)


def oracle_capacities(sim) -> list[int]:
    """Capacities of the simulator's caches whose policy reads next-access times."""
    return sorted({s.capacity for s, needs in zip(sim.specs, sim._needs_next) if needs})


def attach_next_access(sim, trace, *, directory: str | None = None) -> RecomputedNextAccess | None:
    """Give ``sim``'s oracle caches next-access values without skipped requests, if any is skipped.

    ``trace`` is an open trace (``shadow.trace.open_trace``); it is iterated once more here when
    some request may be longer than an oracle cache (its header's ``max_blocks_per_request``, or
    always when the header has no valid counts), then the caller feeds it as usual.
    """
    caps = oracle_capacities(sim)
    if not caps:
        return None
    h = trace.header
    if h.counts_valid:
        caps = [c for c in caps if c < h.max_blocks_per_request]
        if not caps:
            return None
        n_entries, n_ids = int(h.n_block_accesses), int(h.n_unique_blocks)
    else:
        n_entries = n_ids = 0
    src = recompute_next_access(iter(trace), caps, n_entries=n_entries, n_ids=n_ids,
                                directory=directory)
    if not src.capacities:
        src.close()
        return None
    for c in src.capacities:
        log.info("oracle cache %d: next access recomputed without the %d requests it skips",
                 c, src.n_skipped(c))
    sim.next_access_source = src
    return src
