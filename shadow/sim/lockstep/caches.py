"""Live shadow caches behind one interface: one engine's request events in, counters out.

A live cache *kind* (:class:`LiveCache`) holds some shadow caches, each a row of counters, and
follows one engine's requests as the engine's scheduler made them: :meth:`~LiveCache.admit`,
:meth:`~LiveCache.grow` (a prefill chunk or decode step), then :meth:`~LiveCache.release` (finished
or aborted) or :meth:`~LiveCache.preempt`; :meth:`~LiveCache.flush` serves what a kind queued and
returns each admission's hits; :meth:`~LiveCache.counters` writes its rows; ``reset`` starts it
afresh.  The kinds:

* :class:`PoolCaches`: vLLM's physical block pool per capacity
  (:class:`shadow.sim.engine.pool.VllmBlockPool`), every event applied at once; one pool at the
  engine's capacity (:attr:`PoolCaches.engine`) also tells where a step's preemptions fall;
* :class:`SimCaches`: every other policy, one :class:`shadow.sim.core.simulator.Simulator`
  serving a :class:`shadow.sim.live.batch.LiveBatch` per flush (one call per cache for the whole
  batch, the GIL released);
* :class:`TieredCaches`: offload tiers (:class:`shadow.sim.tiers.loop.ChunkTier`) behind some
  caches of another kind, each admission served through them with its first-miss hit.

A driver (the connector's worker) hands each event to every kind and, after each batch of
events, flushes them all: its loop does not know the kinds.  A consumer of the same events (a
sampled miss-ratio curve, a cost model's savings) is one more kind; a counter is a column of
:data:`COUNTERS` written by :func:`counter_row`.

NOTE: defined in ``shadow/sim``, not in ``shadow.connector``: every kind is made of simulator
parts and the events are plain values (a request id, block ids, token counts), so nothing here
needs vLLM, the connector's queue or its events; the worker interns hashes, keeps the in-flight
table and the recording, and stays a thin shim over this module.  In a wing of its own, not in
``live/``: the kinds compose core (the Simulator), engine (the pool), live (the batch) and tiers,
while ``live/`` is the protocol below the serve loop and imports nothing of ``shadow/sim``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from shadow.sim.engine.rules import blocks_held, full_blocks
from shadow.sim.live.batch import Admission, LiveBatch
from shadow.sim.live.wire import OUT_HITS, OUT_PREFIX_HITS, OUT_RC

#: A live cache's counter row, in order (``shadow.connector.schema`` names each column's series).
COUNTERS = ("requests", "skipped_requests", "block_lookups", "block_hits", "block_prefix_hits",
            "cost_lookup", "cost_saved", "cost_prefix_saved", "query_tokens",
            "prefix_hit_tokens", "evictions", "self_evictions")
#: The columns a kind counts itself, from its admissions' hits (tokens, not blocks): a reset leaves
#: them running, while the caches' own counters restart and go on from a base.
TOKEN_COLUMNS = (COUNTERS.index("query_tokens"), COUNTERS.index("prefix_hit_tokens"))
#: An offload tier's counter row, in order.
TIER_COUNTERS = ("hit_tokens", "loaded_bytes", "stored_bytes", "evictions", "store_failures")
#: What :meth:`LiveCache.counters` writes, one list each, indexed by cache row (``caches``: a
#: COUNTERS row, ``stopped``: 1 while the cache is stopped) or by tier row (``tiers``: a
#: TIER_COUNTERS row, ``tier_occupancy`` / ``tier_capacity``: bytes held / bytes), or the
#: sampled miss-ratio curve's values (``mrc_capacity`` per target share, ``mrc_ratio`` per
#: capacity fraction: shadow.sim.lockstep.curve).
PARTS = ("caches", "stopped", "tiers", "tier_occupancy", "tier_capacity", "mrc_capacity",
         "mrc_ratio")

#: One admission's outcome in one cache: (cache row, first-miss hit blocks, gap-spanning hit
#: blocks, served).  A cache that skipped the request (too big) counted it unserved.
Hit = tuple[int, int, int, bool]
#: What :meth:`LiveCache.flush` returns per admission: the request and its hits in the kind.
Served = tuple["LiveRequest", list[Hit]]


class LiveRequest:
    """One request in flight, as every kind sees it (the driver owns it).

    ``prompt``: the admitted block ids (never changed); ``ids``: those, then the blocks the
    request grew into (the driver extends it as blocks fill); ``end``: tokens allocated so far
    (the driver moves it after every kind grew); ``n_match``: the leading blocks looked up for
    the statistics; ``count``: False for a re-admission after a preemption, which vLLM's
    prefix-cache statistics leave out (the token counters and the ``vllm`` pools' counters)."""

    __slots__ = ("req_id", "prompt", "ids", "num_tokens", "n_match", "count", "t_start_s", "end")

    def __init__(self, req_id: str, prompt: list[int], num_tokens: int, n_match: int,
                 count: bool, t_start_s: float, end: int) -> None:
        self.req_id = req_id
        self.prompt = prompt
        self.ids = list(prompt)
        self.num_tokens = num_tokens
        self.n_match = n_match
        self.count = count
        self.t_start_s = t_start_s
        self.end = end


class LiveCache:
    """Some live shadow caches of one kind (the module docstring).

    Invariants:

    * events come in the engine's order; per request one :meth:`admit`, any :meth:`grow`, then
      one :meth:`release` or :meth:`preempt` (a re-admission after it is a new admission); a
      kind sees every event, a request one of its caches skipped included;
    * :meth:`flush` serves what is queued and returns every admission since the last flush,
      in order, with the :data:`Hit` of each cache that counted it (a stopped cache counts
      nothing);
    * :meth:`counters` writes cumulative values: across a :meth:`reset` the caches' counters
      go on from what they had, the token counters never restart;
    * :meth:`holds` is True while any cache (or tier) of the kind keeps the block id.
    """

    #: the cache rows this kind writes
    rows: tuple[int, ...] = ()

    def admit(self, req: LiveRequest) -> None:
        raise NotImplementedError

    def grow(self, req: LiveRequest, end: int) -> None:
        """``req`` is scheduled up to ``end`` tokens (> ``req.end``; ``req.ids`` holds the
        blocks full by then).  Only vLLM's pools allocate per step."""

    def release(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int,
                end: int) -> None:
        """``req`` finished (or was aborted) having computed ``end`` tokens: its generated full
        blocks ``decode_ids`` go in while it holds ``n_anon_final`` partial blocks, then its
        blocks are freed tail first."""
        raise NotImplementedError

    def preempt(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int) -> None:
        """``req`` was preempted: freed as a finished request is (without growing first)."""
        raise NotImplementedError

    def flush(self) -> list[Served]:
        raise NotImplementedError

    def counters(self, out: dict[str, list]) -> None:
        raise NotImplementedError

    def holds(self, block_id: int) -> bool:
        raise NotImplementedError

    def reset(self) -> None:
        """Every cache empty (vLLM's prefix-cache reset); counters go on."""
        raise NotImplementedError

    def cache(self, row: int) -> Any:
        """The live object behind cache ``row``, for reading its state (tests, checks); KeyError
        for a row of another kind."""
        raise KeyError(row)


def _position(rows: tuple[int, ...], row: int) -> int:
    try:
        return rows.index(row)
    except ValueError:
        raise KeyError(row) from None


def counter_row(r: Any, tok: list[float], base: Sequence[float] | None) -> tuple[float, ...]:
    """One cache's COUNTERS row: ``r``'s counters (a serve-loop ``CacheRun`` or a
    ``VllmBlockPool``: the same attributes) plus ``base`` (what it had before the resets), the
    token columns from ``tok``."""
    row = (r.n_req, r.n_req_skipped, r.n_blocks, r.n_hits, r.n_prefix_hits, r.total_cost,
           r.saved_cost, r.prefix_saved_cost, tok[0], tok[1], r.n_eviction, r.n_self_eviction)
    if base is None:
        return row
    return tuple(v if j in TOKEN_COLUMNS else v + base[j] for j, v in enumerate(row))


class _Rows:
    """The counter rows of a kind's caches: token counters and the base carried over resets."""

    __slots__ = ("rows", "tok", "base")

    def __init__(self, rows: Sequence[int]) -> None:
        self.rows = tuple(rows)
        self.tok = [[0.0, 0.0] for _ in self.rows]
        self.base: list[list[float]] | None = None

    def write(self, out: dict[str, list], runs: Sequence[Any]) -> None:
        rows, stopped, base = out["caches"], out["stopped"], self.base
        for k, (i, r, tk) in enumerate(zip(self.rows, runs, self.tok)):
            rows[i] = counter_row(r, tk, None if base is None else base[k])
            stopped[i] = 1 if r.failed else 0

    def carry(self, runs: Sequence[Any]) -> None:
        """Before a reset: add each cache's counters (tokens aside) to its base."""
        if self.base is None:
            self.base = [[0.0] * len(COUNTERS) for _ in self.rows]
        for b, r in zip(self.base, runs):
            for j, v in enumerate(counter_row(r, [0.0, 0.0], None)):
                b[j] += v


class PoolCaches(LiveCache):
    """The ``vllm`` caches: vLLM's block pool at each capacity, every event applied at once.

    ``engine`` is the pool at the engine's own capacity that places each step's preemptions
    (:meth:`shadow.sim.engine.pool.VllmBlockPool.blocks_needed`, ``num_free``); when no reported
    row has that capacity one is kept unreported (it follows every event all the same)."""

    def __init__(self, rows: Sequence[int], capacities: Sequence[int], block_size: int,
                 cost: Callable[[int], float] | None, engine_capacity: int) -> None:
        self._rows = _Rows(rows)
        self.rows = self._rows.rows
        self._caps = tuple(capacities)
        self.block_size = block_size
        self._cost = cost
        self._engine_capacity = engine_capacity
        self._pending: list[Served] = []
        self._build()

    def _build(self, prev: Sequence[Any] = ()) -> None:
        """New pools; after a reset each starts from the free-queue order of the one it replaces
        (``prev``: the old ``every``, the same capacities in order)."""
        from shadow.sim.engine.pool import VllmBlockPool

        self.pools = [VllmBlockPool(c, self.block_size, self._cost) for c in self._caps]
        engine = [p for p in self.pools if p.capacity == self._engine_capacity]
        self.engine = engine[0] if engine else VllmBlockPool(self._engine_capacity,
                                                             self.block_size)
        #: every pool that follows the events: the reported ones, then the engine's if kept apart
        self.every = self.pools if engine else [*self.pools, self.engine]
        self._apart = None if engine else self.engine
        for new, old in zip(self.every, prev):
            new.keep_free_order(old)
        self._reported = list(zip(self.rows, self.pools, self._rows.tok))

    def admit(self, req: LiveRequest) -> None:
        rid, ids, nt, end, count = req.req_id, req.ids, req.num_tokens, req.end, req.count
        b = self.block_size
        hits: list[Hit] = []
        for i, pool, tk in self._reported:
            res = pool.admit(rid, ids, nt, end, count=count)
            if res is None:
                hits.append((i, 0, 0, False))
                ph = 0
            else:
                ph = res[2]
                hits.append((i, ph, res[1], True))
            if count:
                # NOTE: like vLLM's prefix-cache stats, re-admissions after a preemption are
                # left out of the token counters (the engine's side excludes them too)
                tk[0] += nt
                tk[1] += ph * b
        if self._apart is not None:
            self._apart.admit(rid, ids, nt, end, count=count)
        self._pending.append((req, hits))

    def grow(self, req: LiveRequest, end: int) -> None:
        rid = req.req_id
        for pool in self.every:
            pool.grow(rid, end)

    def release(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int,
                end: int) -> None:
        # NOTE: the request ends holding ceil(end / B) blocks, its full ones cached; a pool that
        # followed its steps has them already (growing is idempotent)
        rid = req.req_id
        grow = end > req.end
        for pool in self.every:
            if grow:
                pool.grow(rid, end)
            pool.free(rid)

    def preempt(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int) -> None:
        rid = req.req_id
        for pool in self.every:
            pool.free(rid)

    def flush(self) -> list[Served]:
        out, self._pending = self._pending, []
        return out

    def counters(self, out: dict[str, list]) -> None:
        self._rows.write(out, self.pools)

    def holds(self, block_id: int) -> bool:
        return any(p.holds(block_id) for p in self.every)

    def reset(self) -> None:
        self._rows.carry(self.pools)
        self._pending = []
        self._build(prev=self.every)

    def cache(self, row: int) -> Any:
        return self.pools[_position(self.rows, row)]


class SimCaches(LiveCache):
    """Every other policy's caches: one :class:`~shadow.sim.core.simulator.Simulator` serving,
    per flush, a :class:`~shadow.sim.live.batch.LiveBatch` of the admissions and releases queued
    since.

    Serving a batch gives exactly what ``Simulator.admit`` / ``release`` one event at a time
    would (LiveBatch's invariant).  A request's partial tail block is held from its admission
    as an anonymous slot; its generated blocks go in at its release."""

    def __init__(self, rows: Sequence[int], specs: Sequence[Any], block_size: int,
                 **simulator: Any) -> None:
        self._rows = _Rows(rows)
        self.rows = self._rows.rows
        self._specs = list(specs)
        self._kw = simulator
        self.block_size = block_size
        self._build()

    def _build(self) -> None:
        from shadow.sim.core.simulator import Simulator

        self.sim = Simulator(self._specs, verify=False, **self._kw)
        self._batch = LiveBatch()
        self._adm: dict[str, Admission] = {}
        self._pending: list[tuple[LiveRequest, Admission]] = []

    def admit(self, req: LiveRequest) -> None:
        nt, b = req.num_tokens, self.block_size
        # NOTE: the partial tail block: held, never reusable
        adm = self._batch.admit(req.prompt, req.n_match, blocks_held(nt, b) - full_blocks(nt, b),
                                req.t_start_s)
        self._adm[req.req_id] = adm
        self._pending.append((req, adm))

    def release(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int,
                end: int) -> None:
        adm = self._adm.pop(req.req_id, None)
        if adm is not None:
            self._batch.release(adm, decode_ids, n_anon_final)

    def preempt(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int) -> None:
        # NOTE: a preempted request goes out as a finished one does; its re-admission is new
        self.release(req, decode_ids, n_anon_final, req.end)

    def flush(self) -> list[Served]:
        batch, pending = self._batch, self._pending
        if not len(batch):
            return []
        self._batch, self._pending = LiveBatch(), []
        runs = self.sim.runs
        counted0 = [r.n_req + r.n_req_skipped for r in runs]
        out_i, _f = self.sim.serve_live(batch)
        if not pending:
            return []
        n, rows, tok = len(pending), self.rows, self._rows.tok
        # per admission (rows) and cache (columns): (rc, hits, prefix hits) (livewire.pxd)
        res = out_i[[e for e, _adm in batch.admissions]]
        ph = res[:, :, OUT_PREFIX_HITS]
        # NOTE: a cache counts the batch's admissions in order until it stops (then none); its
        # token counters follow its block counters, so they freeze with them.  Re-admissions
        # after a preemption are left out of the token counters (vLLM's stats leave them out).
        left = [r.n_req + r.n_req_skipped - c for r, c in zip(runs, counted0)]
        take = [k for k, (req, _adm) in enumerate(pending) if req.count]
        if all(x == n for x in left):   # NOTE: nearly always: no cache stopped
            q = sum(pending[k][0].num_tokens for k in take)
            for tk, h in zip(tok, (ph[take].sum(axis=0) * self.block_size).tolist()):
                tk[0] += q
                tk[1] += h
            # NOTE: one flat conversion per column and one zip: the fewest objects per batch
            K = len(rows)
            flat = list(zip(rows * n, ph.ravel().tolist(), res[:, :, OUT_HITS].ravel().tolist(),
                            (res[:, :, OUT_RC] == 0).ravel().tolist()))
            return [(req, flat[k * K:(k + 1) * K]) for k, (req, _adm) in enumerate(pending)]
        mask = np.zeros(ph.shape, dtype=bool)
        for j, x in enumerate(left):
            mask[:x, j] = True
        m = mask[take]
        nt = np.array([pending[k][0].num_tokens for k in take], dtype=np.int64)
        for tk, q, h in zip(tok, (m * nt[:, None]).sum(axis=0).tolist(),
                            ((m * ph[take]).sum(axis=0) * self.block_size).tolist()):
            tk[0] += q
            tk[1] += h
        return [(req, [(i, pj, hj, oj == 0) for i, pj, hj, oj, c in zip(rows, p, h, ok, mk) if c])
                for (req, _adm), p, h, ok, mk in zip(
                    pending, ph.tolist(), res[:, :, OUT_HITS].tolist(),
                    res[:, :, OUT_RC].tolist(), mask.tolist())]

    def counters(self, out: dict[str, list]) -> None:
        self._rows.write(out, self.sim.runs)

    def holds(self, block_id: int) -> bool:
        return any(r.holds(block_id) for r in self.sim.runs)

    def reset(self) -> None:
        self._rows.carry(self.sim.runs)
        self._build()

    def cache(self, row: int) -> Any:
        return self.sim.runs[_position(self.rows, row)]


class TierSpecRow:
    """One offload tier behind one cache: its tier row, the cache row it sits behind, its
    ChunkTier parameters and the bytes of one chunk (0 when the bytes of a block are unknown:
    the byte counters then stay 0)."""

    __slots__ = ("row", "cache", "n_chunks", "policy", "store_threshold", "max_tracker_size",
                 "blocks_per_chunk", "chunk_bytes")

    def __init__(self, row: int, cache: int, n_chunks: int, policy: str, store_threshold: int,
                 max_tracker_size: int, blocks_per_chunk: int, chunk_bytes: int) -> None:
        self.row, self.cache, self.n_chunks, self.policy = row, cache, n_chunks, policy
        self.store_threshold, self.max_tracker_size = store_threshold, max_tracker_size
        self.blocks_per_chunk, self.chunk_bytes = blocks_per_chunk, chunk_bytes


class _Tier:
    """A :class:`TierSpecRow`'s ChunkTier and its counters (shadow.sim.tiers.loop's compiled
    form of shadow.sim.tiers.model)."""

    __slots__ = ("spec", "tier", "hit_tokens", "loaded_chunks", "stored_chunks")

    def __init__(self, spec: TierSpecRow) -> None:
        from shadow.sim.tiers.loop import ChunkTier

        self.spec = spec
        self.tier = ChunkTier(spec.n_chunks, spec.policy, spec.store_threshold,
                              spec.max_tracker_size)
        self.hit_tokens = self.loaded_chunks = self.stored_chunks = 0

    def serve(self, ids: Sequence[int], num_tokens: int, hit_blocks: int,
              block_size: int) -> None:
        hit, loaded, stored = self.tier.serve(ids, num_tokens, hit_blocks, block_size,
                                              self.spec.blocks_per_chunk)
        self.hit_tokens += hit
        self.loaded_chunks += loaded
        self.stored_chunks += stored

    def row(self) -> tuple[float, ...]:
        """The TIER_COUNTERS row."""
        cb = self.spec.chunk_bytes
        t = self.tier
        return (self.hit_tokens, self.loaded_chunks * cb, self.stored_chunks * cb,
                t.n_evicted, t.n_store_failed)


class TieredCaches(LiveCache):
    """Offload tiers behind some caches of ``inner`` (any kind): events go to ``inner``; at each
    flush every admission a cache served goes through that cache's tiers, in the engine's
    order, with the tokens it was admitted with and the cache's first-miss hit (lookup, load,
    store and finish at once: shadow.sim.tiers.model).

    NOTE: every admission, re-admissions after a preemption included: a recording keeps each as
    a record of its own, so offline ``simulate --timing recorded --tier`` serves the same
    sequence.  A tier never changes a cache's figures; a stopped cache's tiers stop with it; a
    reset empties the tiers and their counters go on.  An exception in one tier is handed to
    ``on_error`` and the others go on."""

    def __init__(self, inner: LiveCache, tiers: Sequence[TierSpecRow], block_size: int,
                 on_error: Callable[[str, BaseException], None]) -> None:
        self.inner = inner
        self.rows = inner.rows
        self.block_size = block_size
        self._specs = list(tiers)
        self._on_error = on_error
        self._base: list[list[float]] | None = None
        self._build()

    def _build(self) -> None:
        self.tiers = [_Tier(s) for s in self._specs]
        self._of: dict[int, list[_Tier]] = {}
        for t in self.tiers:
            self._of.setdefault(t.spec.cache, []).append(t)

    def admit(self, req: LiveRequest) -> None:
        self.inner.admit(req)

    def grow(self, req: LiveRequest, end: int) -> None:
        self.inner.grow(req, end)

    def release(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int,
                end: int) -> None:
        self.inner.release(req, decode_ids, n_anon_final, end)

    def preempt(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int) -> None:
        self.inner.preempt(req, decode_ids, n_anon_final)

    def flush(self) -> list[Served]:
        out = self.inner.flush()
        of, b = self._of, self.block_size
        for req, hits in out:
            for i, ph, _h, served in hits:
                if served and i in of:
                    for t in of[i]:
                        try:
                            t.serve(req.prompt, req.num_tokens, ph, b)
                        except Exception as exc:  # noqa: BLE001 - a tier must not stop the rest
                            self._on_error("tier", exc)
        return out

    def counters(self, out: dict[str, list]) -> None:
        self.inner.counters(out)
        rows, occ, cap, base = out["tiers"], out["tier_occupancy"], out["tier_capacity"], \
            self._base
        for k, t in enumerate(self.tiers):
            j, cb = t.spec.row, t.spec.chunk_bytes
            r = t.row()
            rows[j] = r if base is None else tuple(v + x for v, x in zip(r, base[k]))
            occ[j] = len(t.tier) * cb
            cap[j] = t.tier.n_chunks * cb

    def holds(self, block_id: int) -> bool:
        return self.inner.holds(block_id) or any(t.tier.holds(block_id) for t in self.tiers)

    def reset(self) -> None:
        self.inner.reset()
        if self._base is None:
            self._base = [[0.0] * len(TIER_COUNTERS) for _ in self.tiers]
        for b, t in zip(self._base, self.tiers):
            for j, v in enumerate(t.row()):
                b[j] += v
        self._build()

    def cache(self, row: int) -> Any:
        return self.inner.cache(row)
