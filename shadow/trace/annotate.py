"""A whole trace in memory as flat arrays, and the converter's annotation pass.

:class:`TraceArrays` is what the JSONL reader builds and what joined lcp segments become; the
converter then calls :func:`annotate`, which establishes the lcp invariants:

* records are stably sorted by ``complete_time_us`` (SORTED),
* block ids, user ids and type ids are dense from 1 in first-appearance order (file order),
* ``next_access`` holds each entry's absolute next-access vtime (HAS_NEXT_ACCESS), computed in one
  backward pass with one int64 per block id,
* sessions where the trace has none (from ``parent_chat_id`` chains, or inferred from prefix
  continuation: :mod:`shadow.trace.sessions`), and ``session_next_req``, the 1-based index of
  the session's next request (HAS_SESSION_NEXT).

Memory: the ids (8 B per access), a gather copy while reordering (8 B), ``next_access`` (8 B), and
one int64 per unique id at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from shadow.trace import _lcp
from shadow.trace.batch import Batch
from shadow.trace.format import empty_records
from shadow.trace.sessions import (DEFAULT_SESSION_WINDOW, derive_chains, infer_sessions as
                                   infer_from_prefixes, link_session_next)


@dataclass
class TraceArrays:
    """A whole trace as arrays: the :class:`Batch` layout plus the header's type table."""

    records: np.ndarray
    offsets: np.ndarray
    block_ids: np.ndarray
    next_access: np.ndarray | None = None
    type_names: list[str] = field(default_factory=list)
    block_size_tokens: int = 0
    annotated: bool = False
    #: the replicas ``records["replica_id"]`` names (lcp v2; empty: none)
    replica_names: list[str] = field(default_factory=list)
    #: each entry's block key (lcp v2 BLOCK_KEYS), or None
    block_keys: np.ndarray | None = None

    @property
    def needs_v2(self) -> bool:
        """Whether the trace holds what only lcp v2 can: replicas or arrival times."""
        return bool(self.replica_names) or bool(
            self.n_requests and (self.records["arrival_time_us"] != -1).any())

    @property
    def n_requests(self) -> int:
        return int(self.records.shape[0])

    @property
    def n_entries(self) -> int:
        return int(self.block_ids.shape[0])

    def batches(self, batch_entries: int = 1 << 20) -> Iterator[Batch]:
        """Slice into batches of whole requests, about ``batch_entries`` entries each (views)."""
        n = self.n_requests
        nxt = self.next_access
        if nxt is None:
            nxt = np.full(self.n_entries, -1, dtype=np.int64)
        i = 0
        while i < n:
            j = int(np.searchsorted(self.offsets, self.offsets[i] + batch_entries, side="right")) - 1
            j = min(max(j, i + 1), n)
            lo, hi = int(self.offsets[i]), int(self.offsets[j])
            yield Batch(self.records[i:j], self.offsets[i:j + 1] - lo, self.block_ids[lo:hi],
                        nxt[lo:hi], first_request=i, first_vtime=lo + 1)
            i = j


def _dense_first_appearance(values: np.ndarray, none_value: int) -> tuple[np.ndarray, np.ndarray]:
    """Map values (``none_value`` kept as 0) to dense ids 1..k in first-appearance order.

    Returns ``(dense, uniques_in_order)``.
    """
    dense = np.zeros(values.shape[0], dtype=np.int64)
    mask = values != none_value
    if not mask.any():
        return dense, values[:0]
    v = values[mask]
    uniq, first, inverse = np.unique(v, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(1, order.shape[0] + 1)
    dense[mask] = rank[inverse]
    return dense, uniq[order]


def annotate(trace: TraceArrays, *, infer_sessions: bool = False,
             session_window: int = DEFAULT_SESSION_WINDOW, name: str = "trace") -> TraceArrays:
    """Sort, renumber and annotate ``trace`` in place (see the module docstring); returns it.

    Sessions (:mod:`shadow.trace.sessions`): a trace without ``session_id`` gets them from its
    ``parent_chat_id`` chains; with ``infer_sessions`` (a trace without sessions or parents)
    from prefix continuation over the sorted file order, remembering ``session_window`` ends.
    """
    rec = trace.records
    n = trace.n_requests
    # 1. stable sort by completion time (a later turn follows the request it extends)
    ct = rec["complete_time_us"]
    if n > 1 and bool(np.any(ct[1:] < ct[:-1])):
        order = np.argsort(ct, kind="stable").astype(np.int64)
        new_ids = np.empty_like(trace.block_ids)
        new_offsets = np.empty_like(trace.offsets)
        _lcp.gather_requests(trace.block_ids, trace.offsets, order, new_ids, new_offsets)
        if trace.block_keys is not None:
            new_keys = np.empty_like(trace.block_keys)
            _lcp.gather_requests(trace.block_keys, trace.offsets, order, new_keys, new_offsets)
            trace.block_keys = new_keys
        trace.block_ids = new_ids  # NOTE: drop the old ids before allocating next_access
        trace.offsets = new_offsets
        rec = trace.records = rec[order]
    rec["n_blocks"] = np.diff(trace.offsets)
    ids = trace.block_ids
    # 2. dense block ids in first-appearance order of the sorted trace
    max_id = int(ids.max()) if ids.shape[0] else 0
    n_unique = 0
    if ids.shape[0]:
        if int(ids.min()) < 1:
            raise ValueError("block ids must be >= 1")
        n_unique, _ = _lcp.renumber_first_appearance(ids, max_id)
    # 3. next access, one backward pass
    nxt = np.empty(ids.shape[0], dtype=np.int64)
    _lcp.annotate_next_access(ids, nxt, n_unique)
    trace.next_access = nxt
    # 4. user and type ids dense in first-appearance order
    dense_users, _ = _dense_first_appearance(rec["user_id"].astype(np.int64), 0)
    rec["user_id"] = dense_users
    dense_types, uniq_types = _dense_first_appearance(rec["type_id"].astype(np.int64), 0)
    rec["type_id"] = dense_types
    if uniq_types.shape[0]:
        trace.type_names = [trace.type_names[int(t) - 1] for t in uniq_types]
    else:
        trace.type_names = []
    # 5. sessions where the trace has none, then session next: for consecutive requests of a
    # session (file order), link forward
    if infer_sessions:
        infer_from_prefixes(rec, trace.offsets, ids, window=session_window,
                            block_size_tokens=trace.block_size_tokens, name=name)
    else:
        derive_chains(rec)
    link_session_next(rec)
    trace.annotated = True
    return trace


def concat(traces: list[TraceArrays]) -> TraceArrays:
    """Join traces (segments of one recording: one id space, one type table) end to end."""
    if len(traces) == 1:
        return traces[0]
    records = np.concatenate([t.records for t in traces]) if traces else empty_records(0)
    lengths = np.concatenate([np.diff(t.offsets) for t in traces])
    offsets = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([t.block_ids for t in traces])
    names: list[str] = []
    for t in traces:
        if len(t.type_names) > len(names):
            names = list(t.type_names)
    bs = next((t.block_size_tokens for t in traces if t.block_size_tokens), 0)
    keys = (np.concatenate([t.block_keys for t in traces])
            if all(t.block_keys is not None for t in traces) else None)
    return TraceArrays(records, offsets, ids, None, names, bs, block_keys=keys)
