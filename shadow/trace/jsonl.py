"""JSONL traces (one request per line) in and out.

Input shapes (fields read when present; ``hash_ids`` is required):

* Mooncake: ``timestamp`` (integer ms), ``input_length``, ``output_length``, ``hash_ids``.
* Qwen (Bailian): ``chat_id``, ``parent_chat_id`` (-1 for a root), ``timestamp`` (seconds,
  fractional), ``input_length``, ``output_length``, ``type``, ``turn``, ``hash_ids``.
* PrefixSim's other fields: ``timestamp_arrival``, ``session_id``, ``user_id``.

``timestamp`` is the completion time (when the request's blocks become reusable);
``timestamp_arrival`` the arrival time.  Time unit (``time_unit="auto"``, see docs/trace.md):
seconds if any timestamp is written as a JSON float (``12.5``, ``3.0``); otherwise (all JSON
integers) milliseconds, unless the lines carry ``chat_id`` (Qwen shape) and every timestamp is
below 100000, which reads as seconds.

Block ids: ``block_id="prefix"`` interns (parent id, raw id) pairs exactly (parent 0 for a
request's root block); ``"raw"`` interns the raw ids alone and counts the raw ids seen under more
than one parent (the trace's ids were then not prefix-unique, and raw mode merges paths).

Memory: the raw ids are parsed a chunk of lines at a time into int64 arrays and interned in place,
so the whole trace costs 8 bytes per block access plus the intern table (32-48 bytes per unique
block, 64 while it grows) and the per-request fields.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, Callable, Iterable

import numpy as np
import orjson

from shadow.errors import ShadowError
from shadow.trace import _lcp
from shadow.trace.annotate import TraceArrays
from shadow.trace.batch import Batch
from shadow.trace.format import MAX_TYPES, RECORD_DTYPE
from shadow.trace.header import LcpHeader

logger = logging.getLogger(__name__)

CHUNK_LINES = 1 << 15
TIME_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}
_INT_FIELDS = ("chat_id", "parent_chat_id", "session_id", "input_length", "output_length", "turn")
_INT_DEFAULT = {"chat_id": -1, "parent_chat_id": -1, "session_id": -1, "input_length": 0,
                "output_length": 0, "turn": 0}
_INT_RANGE = {"chat_id": (-(1 << 63), (1 << 63) - 1), "parent_chat_id": (-(1 << 63), (1 << 63) - 1),
              "session_id": (-(1 << 63), (1 << 63) - 1), "input_length": (0, (1 << 32) - 1),
              "output_length": (0, (1 << 32) - 1), "turn": (0, (1 << 16) - 1)}
_BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


class _Chunk:
    """Per-request fields of up to CHUNK_LINES lines, as Python lists."""

    def __init__(self, first_line: int) -> None:
        self.first_line = first_line
        self.lines: list[int] = []
        self.ids: list[Any] = []
        self.nb: list[int] = []
        self.ts: list[Any] = []
        self.ts_arr: list[Any] = []
        self.ints: dict[str, list[Any]] = {k: [] for k in _INT_FIELDS}
        self.users: list[int] = []
        self.types: list[int] = []


def _bad(path: str, line: int, what: str) -> ShadowError:
    return ShadowError(f"{path}:{line}: {what}")


def _locate_bad_ids(path: str, chunk: _Chunk) -> ShadowError:
    k = 0
    for line, nb in zip(chunk.lines, chunk.nb):
        for v in chunk.ids[k:k + nb]:
            if type(v) is not int:
                return _bad(path, line, f"hash_ids holds {v!r} ({type(v).__name__}); expected"
                                        " integers")
            if not -(1 << 63) <= v < (1 << 64):
                return _bad(path, line, f"hash_ids value {v} does not fit 64 bits")
        k += nb
    return _bad(path, chunk.lines[0], "hash_ids mixes negative values and values >= 2**63")


def _int_array(path: str, chunk: _Chunk, name: str, values: list[Any]) -> np.ndarray:
    arr = np.asarray(values)
    lo, hi = _INT_RANGE[name]
    if arr.dtype.kind in "iu" and arr.ndim == 1:
        if arr.shape[0] and (int(arr.min()) < lo or int(arr.max()) > hi):
            pass  # fall through to the per-line check for the message
        else:
            return arr.astype(np.int64)
    for line, v in zip(chunk.lines, values):
        if type(v) is not int:
            raise _bad(path, line, f"{name} is {v!r}; expected an integer")
        if not lo <= v <= hi:
            raise _bad(path, line, f"{name} {v} out of range [{lo}, {hi}]")
    raise _bad(path, chunk.lines[0], f"bad {name} values")  # pragma: no cover


def _time_array(path: str, chunk: _Chunk, name: str, values: list[Any]) -> tuple[np.ndarray, bool]:
    """Timestamps as float64 (NaN = missing) plus whether every one was a JSON integer."""
    arr = np.asarray(values)
    if arr.ndim == 1 and arr.dtype.kind in "iu":
        return arr.astype(np.float64), True
    if arr.ndim == 1 and arr.dtype.kind == "f" and not np.isinf(arr).any():
        return arr, False
    out = np.empty(len(values), dtype=np.float64)
    all_int = True
    for i, (line, v) in enumerate(zip(chunk.lines, values)):
        if v is None:
            out[i] = math.nan
        elif type(v) is int:
            out[i] = v
        elif type(v) is float and math.isfinite(v):
            out[i] = v
            all_int = False
        else:
            raise _bad(path, line, f"{name} is {v!r}; expected a number")
    return out, all_int


class JsonlReader:
    """Parse a JSONL trace into :class:`TraceArrays` (ids interned, not yet sorted/annotated)."""

    def __init__(self, path: str, *, block_id: str = "prefix", time_unit: str = "auto",
                 block_size_tokens: int | None = None,
                 progress: Callable[[int], None] | None = None) -> None:
        if block_id not in ("prefix", "raw"):
            raise ShadowError(f"bad block id mode {block_id!r}: expected prefix or raw")
        if time_unit != "auto" and time_unit not in TIME_UNITS:
            raise ShadowError(f"bad time unit {time_unit!r}: expected s, ms, us or auto")
        self.path = str(path)
        self.block_id = block_id
        self.time_unit = time_unit
        self.block_size_tokens = block_size_tokens
        self.progress = progress
        self.n_multi_parent = 0
        self.resolved_time_unit = time_unit

    def read(self) -> TraceArrays:
        path = self.path
        table = _lcp.InternTable(1 << 16, self.block_id == "raw")
        id_chunks: list[np.ndarray] = []
        len_chunks: list[np.ndarray] = []
        ts_chunks: list[np.ndarray] = []
        tsa_chunks: list[np.ndarray] = []
        int_chunks: dict[str, list[np.ndarray]] = {k: [] for k in _INT_FIELDS}
        user_chunks: list[np.ndarray] = []
        type_chunks: list[np.ndarray] = []
        users: dict[Any, int] = {}
        types: dict[str, int] = {}
        all_int = True
        has_chat = False
        ts_max = -math.inf

        def flush(ch: _Chunk) -> None:
            nonlocal all_int, ts_max
            if not ch.lines:
                return
            try:
                ids = np.asarray(ch.ids)
            except (ValueError, OverflowError, TypeError):
                raise _locate_bad_ids(path, ch) from None
            if ids.shape[0] == 0:
                ids = np.zeros(0, dtype=np.int64)
            if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.dtype.itemsize != 8:
                if ids.ndim == 1 and ids.dtype.kind in "iu":
                    ids = ids.astype(np.int64)
                else:
                    raise _locate_bad_ids(path, ch)
            ids = ids.view(np.int64)
            lengths = np.asarray(ch.nb, dtype=np.int64)
            offs = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
            np.cumsum(lengths, out=offs[1:])
            try:
                table.intern_requests(ids.view(np.uint64), offs, ids, self.block_id == "prefix")
            except MemoryError:
                raise ShadowError(f"{path}: out of memory interning block ids") from None
            id_chunks.append(ids)
            len_chunks.append(lengths)
            ts, ints_only = _time_array(path, ch, "timestamp", ch.ts)
            all_int = all_int and ints_only
            if ts.shape[0] and not np.isnan(ts).all():
                ts_max = max(ts_max, float(np.nanmax(ts)))
            ts_chunks.append(ts)
            tsa, ints_only = _time_array(path, ch, "timestamp_arrival", ch.ts_arr)
            tsa_chunks.append(tsa)
            for k in _INT_FIELDS:
                int_chunks[k].append(_int_array(path, ch, k, ch.ints[k]))
            user_chunks.append(np.asarray(ch.users, dtype=np.int64))
            type_chunks.append(np.asarray(ch.types, dtype=np.int64))

        loads = orjson.loads
        ch = _Chunk(1)
        with open(path, "rb") as f:
            lineno = 0
            for raw in f:
                lineno += 1
                try:
                    d = loads(raw)
                except orjson.JSONDecodeError as exc:
                    if not raw.strip():
                        continue
                    raise _bad(path, lineno, f"invalid JSON ({exc})") from None
                if type(d) is not dict:
                    raise _bad(path, lineno, f"expected a JSON object, got {type(d).__name__}")
                h = d.get("hash_ids")
                if type(h) is not list:
                    raise _bad(path, lineno, "missing hash_ids" if h is None else
                               f"hash_ids is {type(h).__name__}; expected a list of integers")
                ch.lines.append(lineno)
                ch.ids += h
                ch.nb.append(len(h))
                ch.ts.append(d.get("timestamp"))
                ch.ts_arr.append(d.get("timestamp_arrival"))
                ints = ch.ints
                for k in _INT_FIELDS:
                    v = d.get(k)
                    ints[k].append(_INT_DEFAULT[k] if v is None else v)
                if "chat_id" in d:
                    has_chat = True
                u = d.get("user_id")
                if u is None:
                    ch.users.append(0)
                else:
                    if type(u) not in (int, str):
                        raise _bad(path, lineno, f"user_id is {u!r}; expected an integer or string")
                    uid = users.get(u)
                    if uid is None:
                        uid = users[u] = len(users) + 1
                    ch.users.append(uid)
                t = d.get("type")
                if t is None:
                    ch.types.append(0)
                else:
                    if type(t) not in (int, str):
                        raise _bad(path, lineno, f"type is {t!r}; expected a string")
                    name = str(t)
                    tid = types.get(name)
                    if tid is None:
                        if len(types) >= MAX_TYPES:
                            raise _bad(path, lineno, f"more than {MAX_TYPES} request types")
                        if len(name.encode("utf-8")) > 32:
                            raise _bad(path, lineno, f"type name {name!r} is longer than 32"
                                                     " bytes")
                        tid = types[name] = len(types) + 1
                    ch.types.append(tid)
                if len(ch.lines) >= CHUNK_LINES:
                    flush(ch)
                    if self.progress:
                        self.progress(f.tell())
                    ch = _Chunk(lineno + 1)
            flush(ch)
        if not id_chunks:
            raise ShadowError(f"{path}: no requests (empty JSONL trace)")
        self.n_multi_parent = table.n_multi_parent
        table.release()
        del table

        ids = np.concatenate(id_chunks) if len(id_chunks) > 1 else id_chunks[0]
        id_chunks.clear()
        lengths = np.concatenate(len_chunks)
        n = lengths.shape[0]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rec = np.zeros(n, dtype=RECORD_DTYPE)
        rec["n_blocks"] = lengths
        for k in _INT_FIELDS:
            rec[k] = np.concatenate(int_chunks[k])
        rec["user_id"] = np.concatenate(user_chunks)
        rec["type_id"] = np.concatenate(type_chunks)
        unit = self.time_unit
        if unit == "auto":
            if not all_int:
                unit = "s"
            elif has_chat and ts_max < 100_000:
                unit = "s"
            else:
                unit = "ms"
            logger.info("%s: timestamps read as %s (--time-unit auto)", path, unit)
        self.resolved_time_unit = unit
        mult = TIME_UNITS[unit]
        for name, chunks in (("complete_time_us", ts_chunks), ("start_time_us", tsa_chunks)):
            t = np.concatenate(chunks)
            us = np.full(n, -1, dtype=np.int64)
            ok = ~np.isnan(t)
            us[ok] = np.rint(t[ok] * mult).astype(np.int64)
            rec[name] = us
        rec["session_next_req"] = -1
        bs = self.block_size_tokens
        if bs is None:
            bs = infer_block_size(rec["input_length"], lengths)
        if self.block_id == "raw" and self.n_multi_parent:
            logger.warning("%s: --block-id raw: %d raw ids appear under more than one parent;"
                           " raw mode merges those prefixes (use --block-id prefix)",
                           path, self.n_multi_parent)
        names = [None] * len(types)
        for name, tid in types.items():
            names[tid - 1] = name
        return TraceArrays(rec, offsets, ids, None, names, int(bs))


def infer_block_size(input_length: np.ndarray, n_blocks: np.ndarray) -> int:
    """The block size B (a power of two, 16..4096) with ``n_blocks == ceil(input_length / B)``
    on every request that has an input length; 0 when none fits."""
    il = input_length.astype(np.int64)
    nb = n_blocks.astype(np.int64)
    mask = il > 0
    if not mask.any():
        return 0
    il, nb = il[mask], nb[mask]
    for b in _BLOCK_SIZES:
        if np.array_equal((il + b - 1) // b, nb):
            return b
    for b in _BLOCK_SIZES:  # traces that store only whole blocks (floor)
        if np.array_equal(il // b, nb):
            return b
    return 0


def read_jsonl(path: str, **kwargs) -> TraceArrays:
    return JsonlReader(path, **kwargs).read()


def _fmt_time(us: int) -> float:
    return us / 1_000_000


def write_jsonl(batches: Iterable[Batch], header: LcpHeader, path: str) -> int:
    """Write requests as JSONL (dense block ids; timestamps in seconds, as JSON floats).

    Fields that are unknown in the record (-1 / 0) are left out.  Writes to ``<path>.partial``
    and renames on success.  Returns the number of requests written.
    """
    tmp = str(path) + ".partial"
    n = 0
    dumps = orjson.dumps
    try:
        with open(tmp, "wb") as f:
            for b in batches:
                recs = b.records.tolist()  # tuples in RECORD_DTYPE field order
                ids = b.block_ids
                offs = b.offsets
                lines = []
                for i, r in enumerate(recs):
                    (start, comp, chat, parent, sess, _snext, user, _nb, il, ol, turn, tid) = r
                    d: dict[str, Any] = {}
                    if comp >= 0:
                        d["timestamp"] = _fmt_time(comp)
                    if start >= 0:
                        d["timestamp_arrival"] = _fmt_time(start)
                    if chat != -1:
                        d["chat_id"] = chat
                    if parent != -1:
                        d["parent_chat_id"] = parent
                    if sess >= 0:
                        d["session_id"] = sess
                    if user:
                        d["user_id"] = user
                    d["input_length"] = il
                    d["output_length"] = ol
                    if turn:
                        d["turn"] = turn
                    if tid:
                        d["type"] = header.type_name(tid)
                    d["hash_ids"] = ids[offs[i]:offs[i + 1]].tolist()
                    lines.append(dumps(d))
                lines.append(b"")
                f.write(b"\n".join(lines))
                n += len(recs)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return n
