"""Request categories: the trace's ``type`` and ``turn`` folded into the int64 a policy compares.

A policy that sets ``wants_request_ctx`` gets each request's category in ``set_request_ctx``
(core/policy.pxd ``ArrivalCtx.category``), before the request's match and allocation.  Policies compare
categories for equality only; **0 is one undifferentiated class** (PrefixSim's convention: a
trace with neither field is one class).  The folds (``--category``, the connector's ``category``
key), over the lcp record's ``type_id`` (0 untyped, docs/lcp.md) and ``turn`` (0 unknown, the
first turn 1):

=================== ==========================================================================
``none``            0 for every request
``type``            ``type_id``
``turn``            ``turn``
``type+turn``       ``type_id * 65536 + turn`` (each pair its own class)
``type+first-turn`` ``type_id * 4 + t``, ``t`` 0 turn unknown, 1 first turn (``turn == 1``),
                    2 a later turn (``turn >= 2``): arXiv 2506.02634's request categories (API vs
                    chat, first turn vs later turns); the default
=================== ==========================================================================

Each fold is 0 exactly when both fields it reads are 0, and one-to-one on what it keeps (both
fields are 16 bits).  PrefixSim's own formula is not public; any one-to-one fold gives the same
classes, which is all a policy sees.
"""

from __future__ import annotations

import numpy as np

from shadow.errors import ShadowError

#: ``--category`` values, in --help order.
CATEGORY_MODES = ("none", "type", "turn", "type+turn", "type+first-turn")

#: The default fold (arXiv 2506.02634: request type x first or later turn).
DEFAULT_CATEGORY = "type+first-turn"


def check_category(mode: str, where: str = "--category") -> str:
    """``mode`` if it is a fold this module knows; ShadowError (one line) otherwise."""
    if mode not in CATEGORY_MODES:
        raise ShadowError(f"{where}: unknown category fold {mode!r} "
                          f"(one of {', '.join(CATEGORY_MODES)})")
    return mode


def fold(type_id: np.ndarray | int, turn: np.ndarray | int, mode: str) -> np.ndarray:
    """The categories of requests with these ``type_id`` and ``turn`` values (int64)."""
    check_category(mode)
    t = np.asarray(type_id, dtype=np.int64)
    u = np.asarray(turn, dtype=np.int64)
    shape = np.broadcast(t, u).shape
    if mode == "none":
        return np.zeros(shape, dtype=np.int64)
    if mode == "type":
        return np.broadcast_to(t, shape).astype(np.int64)
    if mode == "turn":
        return np.broadcast_to(u, shape).astype(np.int64)
    if mode == "type+turn":
        return t * 65536 + u
    return t * 4 + np.where(u == 0, 0, np.where(u == 1, 1, 2))


def request_info(records: np.ndarray, mode: str) -> np.ndarray:
    """Each request's info row (live/wire.pxd: category, session id, next request of its session),
    ``(n, INFO_WIDTH)`` int64, from lcp records (``RECORD_DTYPE``) or a mapping of their
    ``type_id``, ``turn``, ``session_id`` and ``session_next_req`` columns."""
    from shadow.sim.live.wire import INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT, INFO_WIDTH

    n = int(np.shape(records["type_id"])[0])
    info = np.empty((n, INFO_WIDTH), dtype=np.int64)
    info[:, INFO_CATEGORY] = fold(records["type_id"], records["turn"], mode)
    info[:, INFO_SESSION] = records["session_id"]
    info[:, INFO_SESSION_NEXT] = records["session_next_req"]
    return info
