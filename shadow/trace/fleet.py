"""Joining lcp inputs: one recording's segments, or the recordings of a fleet's replicas.

Each connector names its replica (``kv_connector_extra_config.replica``) and writes lcp v2
segments whose records carry that name (``replica_id``) and whose entries carry block keys
(keyed 63-bit digests of what vLLM's block hash covers: :mod:`shadow.connector.blockkey`).
:func:`join` puts the inputs end to end for :func:`shadow.trace.annotate.annotate`, which sorts
them by completion time:

* **block sizes** must agree (every input that states one);
* **replicas**: the inputs' name tables are united in input order and every record's
  ``replica_id`` is renumbered into the union.  Inputs of one name are one replica over time
  (its segments, or its restarts); two inputs of one name whose requests overlap in time are
  two engines under one name, refused as a **name clash**;
* **block ids**: when every input has block keys, ids are the keys interned in input order
  (dense from 1; the same key, the same id, whichever replica and process wrote it).  When no
  input has them (lcp v1, or a converted trace), the ids are kept as stored (one id space:
  segments of one recording).  Some with and some without is refused;
* **sessions** of a fleet (more than one replica): each recorder inferred sessions from its own
  requests, numbering them by its own positions, so those fields are cleared and inferred again
  over the joined trace (a conversation whose turns went to several replicas is one session);
* a fleet whose replicas share **no block at all** gets one warning line: with traffic that
  shares prefixes, that is replicas recorded under different fleet keys.

Invariant: the joined trace's ``replica_names[replica_id - 1]`` is the name each request's own
recording gave it; its ids compare across replicas exactly as the inputs' keys do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from shadow.errors import ShadowError
from shadow.trace import _lcp
from shadow.trace.annotate import TraceArrays, concat
from shadow.trace.sessions import INFERRED_FIELDS

logger = logging.getLogger(__name__)


def _check_block_sizes(parts: Sequence[TraceArrays], names: Sequence[str]) -> None:
    first = next(((p, n) for p, n in zip(parts, names) if p.block_size_tokens), None)
    if first is None:
        return
    for p, n in zip(parts, names):
        if p.block_size_tokens and p.block_size_tokens != first[0].block_size_tokens:
            raise ShadowError(f"{n}: block size {p.block_size_tokens} tokens differs from"
                              f" {first[1]}'s {first[0].block_size_tokens}: recordings of"
                              " different block sizes do not merge")


def _check_type_tables(parts: Sequence[TraceArrays], names: Sequence[str]) -> None:
    a = parts[0].type_names
    for p, n in zip(parts[1:], names[1:]):
        b = p.type_names
        if a[:len(b)] != b[:len(a)]:
            raise ShadowError(f"{n}: request type table {b} differs from the first input's {a}")
        if len(b) > len(a):
            a = b


def _replica_table(parts: Sequence[TraceArrays]) -> list[str]:
    """Every input's replica names in input order, each once; renumbers ``replica_id``."""
    table: list[str] = []
    index: dict[str, int] = {}
    for p in parts:
        if not p.replica_names:
            continue
        remap = np.zeros(len(p.replica_names) + 1, dtype=np.uint32)
        for k, name in enumerate(p.replica_names, 1):
            if name not in index:
                table.append(name)
                index[name] = len(table)
            remap[k] = index[name]
        p.records["replica_id"] = remap[p.records["replica_id"]]
    return table


def _check_name_clash(parts: Sequence[TraceArrays], names: Sequence[str],
                      table: Sequence[str]) -> None:
    """Two inputs of one replica name whose requests overlap in time are two engines."""
    spans: dict[int, list[tuple[int, int, str]]] = {}
    for p, n in zip(parts, names):
        rid = p.records["replica_id"]
        ct = p.records["complete_time_us"]
        for r in np.unique(rid):
            if r == 0:
                continue
            t = ct[(rid == r) & (ct >= 0)]
            if t.shape[0]:
                spans.setdefault(int(r), []).append((int(t.min()), int(t.max()), n))
    for r, s in spans.items():
        s.sort()
        for (_a0, a1, an), (b0, _b1, bn) in zip(s, s[1:]):
            if b0 <= a1:
                raise ShadowError(f"replica name clash: {table[r - 1]!r} names the requests of"
                                  f" {an} and of {bn}, which overlap in time (two engines under"
                                  " one name; give each its own kv_connector_extra_config"
                                  ".replica)")


def _ids_from_keys(parts: Sequence[TraceArrays], names: Sequence[str]) -> np.ndarray | None:
    """Dense ids of every input's block keys (first appearance in input order), or None when no
    input has keys."""
    keyed = [p.block_keys is not None for p in parts]
    if not any(keyed):
        return None
    if not all(keyed):
        bad = names[keyed.index(False)]
        good = names[keyed.index(True)]
        raise ShadowError(f"{bad}: has no block keys, {good} has: only connector recordings"
                          " (lcp v2 with block keys) merge by block identity; join the"
                          " replicas' own segments")
    keys = np.concatenate([p.block_keys for p in parts]).view(np.uint64)
    offsets = np.array([0, keys.shape[0]], dtype=np.int64)
    out = np.empty(keys.shape[0], dtype=np.int64)
    table = _lcp.InternTable(max(1 << 16, keys.shape[0] // 4), False)
    table.intern_requests(keys, offsets, out, False)
    table.release()
    return out


def shared_blocks(trace: TraceArrays) -> int:
    """The block ids that requests of more than one replica hold."""
    if not trace.n_entries:
        return 0
    rep = np.repeat(trace.records["replica_id"].astype(np.int64), np.diff(trace.offsets))
    width = int(rep.max()) + 1
    ids = np.unique(trace.block_ids * width + rep) // width   # each (id, replica) once
    dup = ids[1:] == ids[:-1]
    return int(np.unique(ids[1:][dup]).shape[0])


def join(parts: list[TraceArrays], names: Sequence[str]) -> tuple[TraceArrays, bool]:
    """The inputs end to end (see the module docstring); and whether they are a fleet (more than
    one replica: its sessions are to be inferred again over the whole)."""
    _check_block_sizes(parts, names)
    _check_type_tables(parts, names)
    table = _replica_table(parts)
    _check_name_clash(parts, names, table)
    ids = _ids_from_keys(parts, names)
    fleet = len(table) > 1
    trace = concat(parts)
    trace.replica_names = table
    trace.block_keys = None
    if ids is not None:
        trace.block_ids = ids
    if fleet:
        rec = trace.records
        for f in INFERRED_FIELDS:
            rec[f] = 0 if f == "turn" else -1
        rec["session_next_req"] = -1
        if ids is not None and shared_blocks(trace) == 0 and trace.n_entries:
            logger.warning("the %d replicas (%s) share no block: with traffic that shares"
                           " prefixes, they were recorded under different fleet keys"
                           " (kv_connector_extra_config.fleet_key)",
                           len(table), ", ".join(table))
    return trace, fleet
