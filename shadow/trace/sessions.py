"""Sessions, turns and parents where a trace has none: from ``parent_chat_id`` chains, or
inferred from prefix continuation (``shadow convert --infer-sessions``, the live recorder).

**Chains** (:func:`derive_chains`, offline, on by default): a request whose ``parent_chat_id``
names an earlier request's ``chat_id`` (the most recent one with that id, in file order) belongs
to that request's session; a request without a parent, or whose parent is not in the trace,
roots a session whose id is its ``chat_id`` (or, parent missing, that ``parent_chat_id``).  So
``session_id`` is the chain root's chat id.  A ``turn`` of 0 (unknown) becomes the parent's turn
+ 1, 1 at a root.  Applied only to a trace with no ``session_id`` at all.

**Prefix continuation** (:class:`SessionInferrer`, streaming): request R continues request P,
the *parent*, when

* P's whole block sequence (the ids of its prompt and generated blocks, as recorded) is a prefix
  of R's prompt blocks (the first ``input_length // B`` of R's blocks; all of them when the
  block size or the input length is unknown), and
* R's prompt holds at least P's tokens: ``input_length(R) >= input_length(P) +
  output_length(P)`` (checked when R's input length is known).  NOTE: at block granularity a
  repeat of P's prompt whose output stayed inside P's last partial block looks like a prefix;
  the token count tells a continuation from such a repeat.

Among the candidates the parent is the one with the **longest** sequence (its continuation is
the most specific evidence: a shorter candidate is itself a prefix of the longer), and among
equal sequences the most recent.  R then gets ``parent_chat_id`` = P's chat id, P's
``session_id`` and ``turn`` = P's turn + 1 (at most 65535); without a parent R roots a session
(``session_id`` = its own chat id, ``turn`` 1).  A request without a ``chat_id`` gets its 1-based
position in file order (the numbering ``session_next_req`` uses).

Because lcp ids are prefix-interned (an id names a block *and* its whole prefix), "P's sequence
is a prefix of R's" is "R's block at depth ``len(P)`` is P's last block": the inferrer keeps,
per request, only its last block id (its *end*), with P's chat id, session, turn, length and
token count.  **Memory bound**: at most ``window`` ends (an LRU: an end is used when written and
when a later request continues it), about 200 bytes each (13 MB at the default 65,536).  Past
the bound the least recently used end is forgotten: a request continuing it roots a new session
(a conversation idle for more than ``window`` requests is split, never merged with another).
The offline converter runs the same class over the file order, so with the same window it gives
the recorder's result.  Empty requests (no blocks) have no end: they root a session and are
never a parent.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from shadow.errors import ShadowError

#: Request ends the inferrer remembers (``--session-window``, ``record_session_window``).
DEFAULT_SESSION_WINDOW = 65536
MAX_TURN = (1 << 16) - 1
#: The record fields the inference writes (and that must be unset before it runs).
INFERRED_FIELDS = ("chat_id", "parent_chat_id", "session_id", "turn")


class SessionInferrer:
    """Streaming prefix-continuation inference (module docstring): feed requests in file order.

    Invariant: ``len(self) <= window``; the answer for a request depends only on the requests
    before it whose ends are still remembered.
    """

    __slots__ = ("window", "block_size", "n_seen", "_ends")

    def __init__(self, window: int = DEFAULT_SESSION_WINDOW, block_size_tokens: int = 0) -> None:
        if window < 1:
            raise ValueError(f"session window {window}: expected at least 1")
        self.window = int(window)
        self.block_size = int(block_size_tokens)
        self.n_seen = 0
        # end id -> (chat id, session id, turn, n_blocks, tokens); LRU order, oldest first
        self._ends: OrderedDict[int, tuple[int, int, int, int, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ends)

    def n_prompt_blocks(self, n_blocks: int, input_length: int) -> int:
        """R's prompt blocks: ``min(n_blocks, input_length // B)``, all when either is unknown."""
        if self.block_size > 0 and input_length > 0:
            return min(n_blocks, input_length // self.block_size)
        return n_blocks

    def infer(self, block_ids: Sequence[int], input_length: int, output_length: int,
              chat_id: int = -1, candidates: Sequence[int] | None = None
              ) -> tuple[int, int, int, int]:
        """``(chat_id, parent_chat_id, session_id, turn)`` of the next request in file order.

        ``candidates``, when given, are the positions (ascending) of ``block_ids`` whose id ends
        some request anywhere in the trace: only they can match, so the offline converter
        passes them to skip the others (same answer).
        """
        self.n_seen += 1
        if chat_id < 0:
            chat_id = self.n_seen
        ends = self._ends
        n = len(block_ids)
        n_prompt = self.n_prompt_blocks(n, input_length)
        parent = None
        positions = range(n_prompt - 1, -1, -1) if candidates is None else reversed(candidates)
        for k in positions:
            if k >= n_prompt:
                continue
            e = ends.get(int(block_ids[k]))
            if e is not None and e[3] == k + 1 and (input_length <= 0 or input_length >= e[4]):
                parent = e
                ends.move_to_end(int(block_ids[k]))
                break
        if parent is None:
            parent_chat, session, turn = -1, chat_id, 1
        else:
            parent_chat, session, turn = parent[0], parent[1], min(parent[2] + 1, MAX_TURN)
        if n:
            end = int(block_ids[n - 1])
            ends[end] = (chat_id, session, turn, n, int(input_length) + int(output_length))
            ends.move_to_end(end)
            if len(ends) > self.window:
                ends.popitem(last=False)
        return chat_id, parent_chat, session, turn


def has_sessions(rec: np.ndarray) -> bool:
    """Whether any record already carries a session or a parent."""
    return bool(np.any(rec["session_id"] >= 0) or np.any(rec["parent_chat_id"] >= 0))


def infer_sessions(rec: np.ndarray, offsets: np.ndarray, block_ids: np.ndarray, *,
                   window: int = DEFAULT_SESSION_WINDOW, block_size_tokens: int = 0,
                   name: str = "trace") -> int:
    """Fill ``chat_id``, ``parent_chat_id``, ``session_id`` and ``turn`` of every record (file
    order) by prefix continuation, in place; returns the number of requests with a parent.

    Refused (:class:`ShadowError`) for a trace that already has sessions or parents, and for one
    where only some requests have a chat id (numbering the others could collide with them).
    """
    if has_sessions(rec):
        raise ShadowError(f"{name}: the trace already has sessions (session_id or"
                          " parent_chat_id set); --infer-sessions applies only to a trace"
                          " without them")
    chats = rec["chat_id"]
    n = rec.shape[0]
    if n and bool(np.any(chats >= 0)) and not bool(np.all(chats >= 0)):
        raise ShadowError(f"{name}: only some requests have a chat_id; --infer-sessions needs"
                          " all or none")
    inf = SessionInferrer(window, block_size_tokens)
    # NOTE: only an id that ends some request can match; marking those ids skips every other
    # entry (same answer as scanning all, far fewer dictionary lookups).
    ends = block_ids[offsets[1:][np.diff(offsets) > 0] - 1] if n else block_ids[:0]
    is_end = np.zeros(int(block_ids.max()) + 1 if block_ids.shape[0] else 1, dtype=bool)
    is_end[ends] = True
    cand_all = np.flatnonzero(is_end[block_ids])
    cand_split = np.searchsorted(cand_all, offsets)
    out = np.empty((n, 4), dtype=np.int64)
    n_linked = 0
    ids_list = block_ids  # numpy indexing per candidate only
    inputs = rec["input_length"].tolist()
    outputs = rec["output_length"].tolist()
    chat_list = chats.tolist()
    for i in range(n):
        lo = int(offsets[i])
        c = (cand_all[cand_split[i]:cand_split[i + 1]] - lo).tolist()
        row = inf.infer(ids_list[lo:int(offsets[i + 1])], inputs[i], outputs[i], chat_list[i], c)
        out[i] = row
        n_linked += row[1] >= 0
    for j, f in enumerate(INFERRED_FIELDS):
        rec[f] = out[:, j]
    return n_linked


def derive_chains(rec: np.ndarray) -> bool:
    """Sessions and turns from ``parent_chat_id`` chains (module docstring), in place.

    Returns whether anything was derived: a trace that has a ``session_id`` anywhere, or no
    ``parent_chat_id`` at all, is left as it is.
    """
    if bool(np.any(rec["session_id"] >= 0)) or not bool(np.any(rec["parent_chat_id"] >= 0)):
        return False
    chats = rec["chat_id"].tolist()
    parents = rec["parent_chat_id"].tolist()
    turns = rec["turn"].tolist()
    seen: dict[int, int] = {}   # chat id -> index of its most recent request so far
    session = [-1] * len(chats)
    for i, (c, p) in enumerate(zip(chats, parents)):
        j = seen.get(p) if p >= 0 else None
        if j is not None:
            session[i] = session[j]
            if turns[i] == 0:
                turns[i] = min(turns[j] + 1, MAX_TURN)
        else:
            session[i] = p if p >= 0 else c
            if turns[i] == 0 and (p >= 0 or c >= 0):
                turns[i] = 1
        if c >= 0:
            seen[c] = i
    rec["session_id"] = session
    rec["turn"] = turns
    return True


def link_session_next(rec: np.ndarray) -> None:
    """``session_next_req``: the 1-based file index of the session's next request, -1 none."""
    sess = rec["session_id"]
    n = rec.shape[0]
    snext = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(sess >= 0)
    if idx.shape[0] > 1:
        o = idx[np.argsort(sess[idx], kind="stable")]
        same = sess[o[1:]] == sess[o[:-1]]
        snext[o[:-1][same]] = o[1:][same] + 1
    rec["session_next_req"] = snext
