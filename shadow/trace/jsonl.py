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
below 100000, which reads as seconds.  A timestamp is null (unknown) or a number >= 0 whose
value in microseconds fits lcp's int64; anything else is refused with ``file:line``.

Block ids: ``block_id="prefix"`` interns (parent id, raw id) pairs exactly (parent 0 for a
request's root block); ``"raw"`` interns the raw ids alone and counts the raw ids seen under more
than one parent (the trace's ids were then not prefix-unique, and raw mode merges paths).

Parsing: a Cython scanner (:mod:`shadow.trace._scan`) reads the usual line shapes straight from
the bytes; any line it does not take (unusual shape, or bad input) goes through orjson, which
also words every error as ``file:line: what is wrong``.  Raw ids are 64-bit patterns: a negative
id and the id 2**64 plus it are the same id.

Memory: the raw ids are scanned a chunk at a time and interned (in a worker thread, while the
next chunk is scanned) into exact-size int64 arrays, so the whole trace costs 8 bytes per block
access plus the intern table (26-51 bytes per unique block, 8 more of path hash, 85 for a moment
while it doubles; see :class:`shadow.trace._lcp.InternTable`) and ~100 bytes per request.
"""

from __future__ import annotations

import logging
import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable

import numpy as np
import orjson

from shadow.errors import ShadowError
from shadow.trace import _lcp, _scan
from shadow.trace.annotate import TraceArrays
from shadow.trace.batch import Batch
from shadow.trace.format import MAX_TYPES, empty_records
from shadow.trace.header import LcpHeader

logger = logging.getLogger(__name__)

CHUNK_LINES = 1 << 15       # request rows per flush
CHUNK_IDS = 1 << 20         # raw ids per flush (a longer line grows the array)
READ_BYTES = 1 << 22        # bytes read from the file at a time
TIME_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}
_INT_FIELDS = ("chat_id", "parent_chat_id", "session_id", "input_length", "output_length", "turn")
_INT_COLS = (_scan.COL_CHAT, _scan.COL_PARENT, _scan.COL_SESSION, _scan.COL_INPUT,
             _scan.COL_OUTPUT, _scan.COL_TURN)
_INT_DEFAULT = {"chat_id": -1, "parent_chat_id": -1, "session_id": -1, "input_length": 0,
                "output_length": 0, "turn": 0}
_INT_RANGE = {"chat_id": (-(1 << 63), (1 << 63) - 1), "parent_chat_id": (-(1 << 63), (1 << 63) - 1),
              "session_id": (-(1 << 63), (1 << 63) - 1), "input_length": (0, (1 << 32) - 1),
              "output_length": (0, (1 << 32) - 1), "turn": (0, (1 << 16) - 1)}
_BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_U64 = (1 << 64) - 1


def _bad(path: str, line: int, what: str) -> ShadowError:
    return ShadowError(f"{path}:{line}: {what}")


def _time_value(path: str, line: int, name: str, v: Any) -> tuple[float, bool]:
    """A timestamp as float (NaN = missing) and whether it was a JSON float.

    Invariant: a value returned is NaN or in ``[0, 2**63)`` (the scanner's range too); negative
    times and times past 2**63 (which no unit fits into lcp's int64 microseconds) raise.
    NOTE: orjson reads an integer past 64 bits as a float, so without the range check here it
    would also count as a float timestamp and turn the whole file's unit into seconds.
    """
    if v is None:
        return math.nan, False
    if type(v) is int or (type(v) is float and math.isfinite(v)):
        if v < 0:
            raise _bad(path, line, f"{name} {v!r} is negative; expected a time >= 0 (null:"
                                   " unknown)")
        if v >= _scan.MAX_TIMESTAMP:
            raise _bad(path, line, f"{name} {v!r} is too large: lcp holds times up to"
                                   " 2**63 - 1 microseconds")
        return float(v), type(v) is float
    raise _bad(path, line, f"{name} is {v!r}; expected a number")


def _slow_line(path: str, raw: bytes, line: int, users: dict, types: dict
               ) -> tuple[list[int], list[int], tuple[float, float], bool, bool] | None:
    """One line the scanner left to orjson: ``(raw ids as int64 patterns, row, (ts, arrival),
    timestamp was a float, has chat_id)``, None for a blank line; bad input raises."""
    try:
        d = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if not raw.strip():
            return None
        raise _bad(path, line, f"invalid JSON ({exc})") from None
    if type(d) is not dict:
        raise _bad(path, line, f"expected a JSON object, got {type(d).__name__}")
    h = d.get("hash_ids")
    if type(h) is not list:
        raise _bad(path, line, "missing hash_ids" if h is None else
                   f"hash_ids is {type(h).__name__}; expected a list of integers")
    ids = []
    for v in h:
        if type(v) is not int:
            raise _bad(path, line, f"hash_ids holds {v!r} ({type(v).__name__}); expected"
                                   " integers")
        if not -(1 << 63) <= v <= _U64:
            raise _bad(path, line, f"hash_ids value {v} does not fit 64 bits")
        ids.append(v - (1 << 64) if v >= (1 << 63) else v)  # the 64-bit pattern as int64
    ts, ts_float = _time_value(path, line, "timestamp", d.get("timestamp"))
    tsa, _ = _time_value(path, line, "timestamp_arrival", d.get("timestamp_arrival"))
    row = [line, len(ids)] + [0] * (_scan.N_COLS - 2)
    for k, col in zip(_INT_FIELDS, _INT_COLS):
        v = d.get(k)
        if v is None:
            v = _INT_DEFAULT[k]
        elif type(v) is not int:
            raise _bad(path, line, f"{k} is {v!r}; expected an integer")
        lo, hi = _INT_RANGE[k]
        if not lo <= v <= hi:
            raise _bad(path, line, f"{k} {v} out of range [{lo}, {hi}]")
        row[col] = v
    u = d.get("user_id")
    if u is not None:
        if type(u) not in (int, str):
            raise _bad(path, line, f"user_id is {u!r}; expected an integer or string")
        uid = users.get(u)
        if uid is None:
            uid = users[u] = len(users) + 1
        row[_scan.COL_USER] = uid
    t = d.get("type")
    if t is not None:
        if type(t) not in (int, str):
            raise _bad(path, line, f"type is {t!r}; expected a string")
        name = str(t)
        tid = types.get(name)
        if tid is None:
            if len(types) >= MAX_TYPES:
                raise _bad(path, line, f"more than {MAX_TYPES} request types")
            if len(name.encode("utf-8")) > 32:
                raise _bad(path, line, f"type name {name!r} is longer than 32 bytes")
            tid = types[name] = len(types) + 1
        row[_scan.COL_TYPE] = tid
    return ids, row, (ts, tsa), ts_float, "chat_id" in d


class JsonlReader:
    """Parse a JSONL trace into :class:`TraceArrays` (ids interned, not yet sorted/annotated).

    Lines go through the Cython scanner (:mod:`shadow.trace._scan`) into fixed-size row and id
    arrays; a line it does not take is parsed by orjson (:func:`_slow_line`), which also words
    every error.  Full arrays are flushed: ids interned into a new exact-size array, rows copied.
    """

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
        self.n_slow_lines = 0

    def read(self) -> TraceArrays:
        path = self.path
        prefix = self.block_id == "prefix"
        # NOTE: sized for one unique block per 32 bytes of JSONL (Mooncake-like traces hold
        # ~11 bytes per access, half of them unique): that saves most doublings, and even a
        # trace with no reuse at 20+ bytes per id stays within 32 bytes per access.
        table = _lcp.InternTable(max(1 << 16, os.path.getsize(path) // 32), not prefix)
        id_chunks: list[np.ndarray] = []
        row_chunks: list[np.ndarray] = []
        time_chunks: list[np.ndarray] = []
        users: dict[Any, int] = {}
        types: dict[str, int] = {}
        rows = np.empty((CHUNK_LINES, _scan.N_COLS), dtype=np.int64)
        times = np.empty((CHUNK_LINES, 2), dtype=np.float64)
        ids = np.empty(CHUNK_IDS, dtype=np.int64)
        n_rows = n_ids = 0
        n_float = 0
        has_chat = False

        spare = np.empty(CHUNK_IDS, dtype=np.int64)
        pending: list[Future] = []

        def intern(raw: np.ndarray, offs: np.ndarray, out: np.ndarray, last_line: int) -> None:
            try:
                table.intern_requests(raw.view(np.uint64), offs, out, prefix)
            except MemoryError:
                raise ShadowError(f"{path}: out of memory interning block ids") from None
            except OverflowError as exc:
                raise ShadowError(f"{path}:{last_line}: {exc} (the most the converter"
                                  " supports)") from None

        def wait() -> None:
            while pending:
                pending.pop().result()

        def flush() -> None:
            # NOTE: the chunk is interned in the worker thread (the table releases the GIL)
            # while this thread scans the next one into the spare id array; one chunk in flight.
            nonlocal n_rows, n_ids, ids, spare
            if not n_rows:
                return
            offs = np.zeros(n_rows + 1, dtype=np.int64)
            np.cumsum(rows[:n_rows, _scan.COL_NB], out=offs[1:])
            out = np.empty(n_ids, dtype=np.int64)
            wait()
            pending.append(pool.submit(intern, ids[:n_ids], offs, out,
                                       int(rows[n_rows - 1, _scan.COL_LINENO])))
            id_chunks.append(out)
            row_chunks.append(rows[:n_rows].copy())
            time_chunks.append(times[:n_rows].copy())
            ids, spare = spare, ids
            n_rows = n_ids = 0

        scan = _scan.scan
        with open(path, "rb") as f, ThreadPoolExecutor(1, "jsonl-intern") as pool:
            buf = b""
            pos = 0
            lineno = 1
            eof = False
            while True:
                st, pos, lineno, n_rows, n_ids, nf, hc = scan(
                    buf, pos, len(buf), eof, lineno, rows, times, n_rows, ids, n_ids, users,
                    types, MAX_TYPES)
                n_float += nf
                has_chat = has_chat or hc
                if st == _scan.SCAN_SLOW:
                    e = buf.find(b"\n", pos)
                    if e >= 0 or eof:
                        e = len(buf) if e < 0 else e
                        got = _slow_line(path, buf[pos:e], lineno, users, types)
                        self.n_slow_lines += 1
                        if got is not None:
                            line_ids, row, tt, ts_float, chat = got
                            if n_rows >= CHUNK_LINES or n_ids + len(line_ids) > ids.shape[0]:
                                flush()
                            if len(line_ids) > ids.shape[0]:
                                ids = np.empty(len(line_ids), dtype=np.int64)
                            rows[n_rows] = row
                            times[n_rows] = tt
                            ids[n_ids:n_ids + len(line_ids)] = line_ids
                            n_rows += 1
                            n_ids += len(line_ids)
                            n_float += ts_float
                            has_chat = has_chat or chat
                        lineno += 1
                        pos = e + 1
                        continue
                    st = _scan.SCAN_NEED_INPUT  # the line goes on past the buffer
                if st == _scan.SCAN_NEED_INPUT:
                    if eof:
                        break
                    data = f.read(READ_BYTES)
                    eof = not data
                    buf = buf[pos:] + data
                    pos = 0
                    if self.progress:
                        self.progress(f.tell())
                elif st == _scan.SCAN_ROWS_FULL:
                    flush()
                elif st == _scan.SCAN_IDS_FULL:
                    if n_ids == 0:  # one line longer than the array: grow it
                        ids = np.empty(2 * ids.shape[0], dtype=np.int64)
                    else:
                        flush()
            flush()
            wait()
        if not id_chunks:
            raise ShadowError(f"{path}: no requests (empty JSONL trace)")
        self.n_multi_parent = table.n_multi_parent
        table.release()
        table = rows = times = None  # NOTE: drop them now (the closures above share the names)
        if self.n_slow_lines:
            logger.debug("%s: %d lines parsed by orjson (not the fast scanner)", path,
                         self.n_slow_lines)

        ids = np.concatenate(id_chunks) if len(id_chunks) > 1 else id_chunks[0]
        id_chunks.clear()
        rows = np.concatenate(row_chunks) if len(row_chunks) > 1 else row_chunks[0]
        row_chunks.clear()
        lengths = rows[:, _scan.COL_NB].copy()
        n = lengths.shape[0]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        rec = empty_records(n)
        rec["n_blocks"] = lengths
        for k, col in zip(_INT_FIELDS, _INT_COLS):
            rec[k] = rows[:, col]
        rec["user_id"] = rows[:, _scan.COL_USER]
        rec["type_id"] = rows[:, _scan.COL_TYPE]
        tt = np.concatenate(time_chunks) if len(time_chunks) > 1 else time_chunks[0]
        time_chunks.clear()
        ts_col = tt[:, _scan.TCOL_TS]
        ts_max = float(np.nanmax(ts_col)) if not np.isnan(ts_col).all() else -math.inf
        unit = self.time_unit
        if unit == "auto":
            if n_float:
                unit = "s"
            elif has_chat and ts_max < 100_000:
                unit = "s"
            else:
                unit = "ms"
            logger.info("%s: timestamps read as %s (--time-unit auto)", path, unit)
        self.resolved_time_unit = unit
        mult = TIME_UNITS[unit]
        for name, col, key in (("complete_time_us", _scan.TCOL_TS, "timestamp"),
                               ("start_time_us", _scan.TCOL_ARRIVAL, "timestamp_arrival")):
            t = tt[:, col]
            us = np.full(n, -1, dtype=np.int64)
            ok = ~np.isnan(t)
            scaled = np.rint(t[ok] * mult)
            # NOTE: every value is below 2**63 here, but times the unit it may not be; a double
            # below 2**63 rounds to one below it, so the cast of what passes is exact.
            over = scaled >= _scan.MAX_TIMESTAMP
            if over.any():
                k = int(np.flatnonzero(ok)[int(np.argmax(over))])
                raise _bad(path, int(rows[k, _scan.COL_LINENO]),
                           f"{key} {float(t[k])!r} read as {_UNIT_WORDS[unit]} is past the"
                           " largest lcp time (2**63 - 1 microseconds); see --time-unit")
            us[ok] = scaled.astype(np.int64)
            rec[name] = us
        del tt
        rows = None  # NOTE: drop it now (the closures above share the name)
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
                    (start, comp, chat, parent, sess, _snext, user, _nb, il, ol, turn, tid,
                     _arrival, replica) = r
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
                    if replica:
                        d["replica"] = header.replica_name(replica)
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
