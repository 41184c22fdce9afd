"""Streaming lcp reader: a file (plain or zstd) in, :class:`Batch` objects of whole requests out.

Memory is constant in the trace length: one batch of arrays (about ``batch_entries`` block
entries), a few decompressed chunks in flight, and zstd's window.  A background thread reads and
decompresses the next chunks while the caller works on the current batch (zstd and file reads
release the GIL, and so does the Cython parser).

A ``.lcp.zst`` written with a frame index (this writer's layout, docs/lcp.md "Frame index") is
decoded frame by frame on a small thread pool, a few frames ahead, and parsed in order; anything
else (a file written before the index, another writer's file, the open last frame of a crashed
writer, a damaged or cut frame) is read by the streaming decoder from that point on, so the
output, the errors and their byte offsets are the same either way.

Byte offsets in error messages count bytes of the *decompressed* stream (for a plain file, the
file itself), header included.
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import zstandard

from shadow.errors import ShadowError, TraceFormatError
from shadow.trace import _lcp, zstd_direct
from shadow.trace.batch import Batch
from shadow.trace.format import (
    FRAME_INDEX_MAGIC,
    FRAME_INDEX_SIZE,
    HEADER_FRAME_PREFIX,
    HEADER_FRAME_SIZE,
    HEADER_SIZE,
    MAX_PLAUSIBLE_BLOCKS,
    RECORD_DTYPE,
    RECORD_SIZE,
    ZSTD_MAGIC,
)
from shadow.trace.frames import FrameEntry, FrameIndexError, parse_entry
from shadow.trace.header import LcpHeader, parse_header

logger = logging.getLogger(__name__)

DEFAULT_BATCH_ENTRIES = 1 << 18
#: An indexed frame that says it holds more than this many bytes is read by the streaming decoder
#: (bounded memory) instead of into a buffer of the size the index entry claims.
MAX_INDEXED_FRAME = 1 << 26
# NOTE: small input pieces and an output buffer larger than what one piece decodes to (lcp
# bodies compress ~9:1): each decompress() call then fills one buffer, copied once into the
# bytes it returns, instead of joining 128 KiB pieces.  Decoding alone this is as fast as
# decoding into a reused buffer and faster than 256 KiB pieces (docs/performance.md, "Measured
# choices"); inside the reader the difference is lost in the noise of a loaded machine.
_INPUT_PIECE = 1 << 15     # compressed bytes fed to zstd at a time
_OUTPUT_SIZE = 1 << 20     # zstd output buffer per decompress() call
_PLAIN_CHUNK = 1 << 22     # bytes read at a time from a plain file
_EOF = object()
_U32 = (1 << 32) - 1
_I64 = (1 << 63) - 1
#: Environment override of the number of frame-decoding threads (0: streaming decoder only).
DECODE_THREADS_ENV = "SHADOW_DECODE_THREADS"
# NOTE: more threads than cores only add memory (a frame of a few MiB each in flight).
_MAX_DECODE_THREADS = 8


def default_decode_threads(prefer: int | None = None) -> int:
    """Frame-decoding threads: ``$SHADOW_DECODE_THREADS`` if set, else ``prefer`` if given, else
    the usable cores (max 8)."""
    env = os.environ.get(DECODE_THREADS_ENV, "").strip()
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise ShadowError(f"{DECODE_THREADS_ENV}={env!r}: not an integer") from None
    if prefer is not None:
        return max(0, min(int(prefer), _MAX_DECODE_THREADS))
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # NOTE: not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, _MAX_DECODE_THREADS))


class _ZstdError(Exception):
    def __init__(self, message: str, produced: int) -> None:
        super().__init__(message)
        self.produced = produced


class _IndexDamaged(Exception):
    def __init__(self, message: str, produced: int) -> None:
        super().__init__(message)
        self.produced = produced


class _Truncated(Exception):
    def __init__(self, produced: int) -> None:
        super().__init__("truncated zstd stream")
        self.produced = produced


def _decompressed_chunks(f, compressed: bool, produced: int = 0) -> Iterator[bytes]:
    """Yield the decompressed stream in chunks from the file's current position; raise
    _ZstdError / _Truncated at the end (``produced``: stream bytes decoded before, for them)."""
    if not compressed:
        while True:
            data = f.read(_PLAIN_CHUNK)
            if not data:
                return
            yield data
    dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
    dobj = dctx.decompressobj(write_size=_OUTPUT_SIZE)
    in_frame = False
    pending = b""
    while True:
        data = pending or f.read(_INPUT_PIECE)
        pending = b""
        if not data:
            if in_frame:
                raise _Truncated(produced)
            return
        try:
            out = dobj.decompress(data)
        except zstandard.ZstdError as exc:
            raise _ZstdError(str(exc), produced) from None
        in_frame = True
        if out:
            produced += len(out)
            yield out
        if dobj.eof:
            # NOTE: a file is several frames (the fixed-size header frame, then the body, and
            # segments may be concatenated), so start a fresh decoder on what is left.
            pending = dobj.unused_data
            dobj = dctx.decompressobj(write_size=_OUTPUT_SIZE)
            in_frame = False


class _Prefetcher:
    """Run a chunk iterator in a background thread, a few chunks ahead of the consumer."""

    def __init__(self, it: Iterator[bytes], depth: int = 4) -> None:
        self._it = it
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lcp-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for chunk in self._it:
                while not self._stop.is_set():
                    try:
                        self._q.put(chunk, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._q.put(_EOF)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            self._q.put(exc)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            item = self._q.get()
            if item is _EOF:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._q.get(timeout=0.05)
            except queue.Empty:
                pass
        self._thread.join()


def has_frame_index(f) -> bool:
    """True when the open file is this writer's indexed layout: the raw header frame, then an
    index entry (checked further, entry by entry, while reading)."""
    head = os.pread(f.fileno(), HEADER_FRAME_SIZE + 4, 0)
    return (head.startswith(HEADER_FRAME_PREFIX)
            and head[HEADER_FRAME_SIZE:HEADER_FRAME_SIZE + 4] == FRAME_INDEX_MAGIC)


class _FrameDecoder:
    """Decode the indexed frames of a ``.lcp.zst`` on a thread pool and hand them out in order.

    Invariant: at most ``depth`` frames are read or decoded ahead of the consumer, so memory is
    a few frames whatever the file size; a chunk handed out stays valid until the consumer asks
    for the next one (its buffer is reused after that).  The index is walked entry by entry (a
    56-byte read and a hop over the frame); at the first place it cannot vouch for (an open or
    cut frame, no entry where one should be, a frame that does not decode) the rest of the file
    goes through :func:`_decompressed_chunks`, which yields and fails exactly as for a file
    without index.
    """

    def __init__(self, f, threads: int, direct: bool | None = None,
                 record_size: int = RECORD_SIZE) -> None:
        self._f = f
        self._record_size = record_size
        self._fd = f.fileno()
        self._size = os.fstat(self._fd).st_size
        self._depth = 2 * threads
        self._local = threading.local()
        self._direct = zstd_direct.available() if direct is None else direct
        self._free: list[list[bytearray]] = []
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="lcp-decode")
        self.n_frames = 0   # frames decoded through the index

    def _buffers(self, e: FrameEntry) -> list[bytearray] | None:
        """A reused [decompressed, compressed] buffer pair that fits frame ``e`` (direct only)."""
        if not self._direct:
            return None
        bufs = self._free.pop() if self._free else [bytearray(0), bytearray(0)]
        for k, need in enumerate((e.decompressed_size + 1, e.compressed_size)):
            if len(bufs[k]) < need:
                bufs[k] = bytearray(max(need, len(bufs[k]) + len(bufs[k]) // 4))
        return bufs

    def _decode(self, offset: int, e: FrameEntry, bufs: list[bytearray] | None):
        """Decode the frame at file ``offset``: (chunk, its size); the size may exceed
        ``decompressed_size`` by one, which tells that the index understates the frame."""
        # NOTE: one decompression context per thread (neither kind is safe for concurrent
        # use); both release the GIL while zstd runs, so the threads decode in parallel.
        if bufs is not None:
            dec = getattr(self._local, "direct", None)
            if dec is None:
                dec = self._local.direct = zstd_direct.FrameDecoder()
            out, src = bufs
            if os.preadv(self._fd, [memoryview(src)[:e.compressed_size]], offset) \
                    != e.compressed_size:
                raise zstd_direct.DirectError("short read")   # the file shrank: stream it
            # NOTE: room for one byte more than the index says, so a longer frame shows
            n = dec.decode(src, e.compressed_size, out, e.decompressed_size + 1)
            return memoryview(out)[:n], n
        dctx = getattr(self._local, "dctx", None)
        if dctx is None:
            dctx = self._local.dctx = zstandard.ZstdDecompressor(max_window_size=1 << 31)
        data = dctx.decompress(os.pread(self._fd, e.compressed_size, offset),
                               max_output_size=e.decompressed_size + 1)
        return data, len(data)

    def _scan(self, pos: int, pending: deque) -> int | None:
        """Queue frames from the entry at file offset ``pos`` until ``depth`` are in flight;
        return where to look next (None once a non-frame item ends the queue)."""
        while len(pending) < self._depth:
            if pos >= self._size:
                return None
            try:
                e = parse_entry(os.pread(self._fd, FRAME_INDEX_SIZE, pos), self._record_size)
            except FrameIndexError as exc:
                pending.append(("damaged", pos, f"corrupt lcp frame index at file byte {pos}"
                                                f" ({exc})", None, None))
                return None
            end = pos + FRAME_INDEX_SIZE + (e.compressed_size if e else 0)
            if (e is None or e.compressed_size == 0 or end > self._size
                    or e.decompressed_size > MAX_INDEXED_FRAME):
                # NOTE: another frame, garbage, the frame a crashed writer left open, a cut
                # file, or an entry claiming a frame larger than any buffer this reader makes
                # (a hostile size would be allocated up front): the streaming decoder reads (or
                # rejects) it as it would without index.
                pending.append(("stream", pos, None, None, None))
                return None
            bufs = self._buffers(e)
            fut = self._pool.submit(self._decode, pos + FRAME_INDEX_SIZE, e, bufs)
            pending.append(("frame", pos, e, fut, bufs))
            pos = end
        return pos

    def chunks(self) -> Iterator:
        """The decompressed stream: the header, then one chunk per frame."""
        yield os.pread(self._fd, HEADER_SIZE, HEADER_FRAME_SIZE - HEADER_SIZE)
        produced = HEADER_SIZE
        pending: deque = deque()
        pos: int | None = HEADER_FRAME_SIZE
        try:
            while True:
                if pos is not None:
                    pos = self._scan(pos, pending)
                if not pending:
                    return
                kind, at, e, fut, bufs = pending.popleft()
                if kind == "frame":
                    try:
                        chunk, n = fut.result()
                    except (zstandard.ZstdError, zstd_direct.DirectError):
                        kind = "stream"   # the streaming decoder words the error
                    else:
                        if n != e.decompressed_size:
                            got = f"{n}" if n <= e.decompressed_size else "more"
                            raise _IndexDamaged(f"corrupt lcp frame index at file byte {at}"
                                                f" (frame decodes to {got} bytes, index says"
                                                f" {e.decompressed_size})", produced)
                        produced += n
                        self.n_frames += 1
                        yield chunk
                        del chunk
                        if bufs is not None:
                            self._free.append(bufs)   # the consumer is done with it
                        continue
                if kind == "damaged":
                    raise _IndexDamaged(e, produced)
                for item in pending:
                    if item[3] is not None:
                        item[3].cancel()
                pending.clear()
                self._f.seek(at)
                yield from _decompressed_chunks(self._f, True, produced)
                return
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _open_stream(path: str):
    f = open(path, "rb")
    head = f.read(4)
    f.seek(0)
    return f, head == ZSTD_MAGIC


def read_header(path: str) -> LcpHeader:
    """Read and validate the header of an lcp or lcp.zst file."""
    f, compressed = _open_stream(path)
    with f:
        buf = b""
        try:
            for chunk in _decompressed_chunks(f, compressed):
                buf += chunk
                if len(buf) >= HEADER_SIZE:
                    break
        except _ZstdError as exc:
            raise TraceFormatError(f"{path}: corrupt zstd data in the lcp header ({exc})",
                                   byte_offset=exc.produced, n_complete_requests=0) from None
        except _Truncated:
            pass
    return parse_header(buf[:HEADER_SIZE], path)


class LcpReader:
    """Iterate an lcp file as :class:`Batch` objects of whole requests.

    ``allow_truncated=True`` turns a truncated or damaged tail into a warning (logged once) and
    yields every complete request before it.  ``batch_entries`` bounds the block entries of a
    batch (a single larger request gets a batch of its own).  After iteration, ``n_requests``
    and ``n_entries`` count what was read and ``truncated`` tells whether the tail was dropped.

    A ``.lcp.zst`` with a frame index is decoded on ``decode_threads`` threads (None: see
    :func:`default_decode_threads`; 0: the streaming decoder in one prefetch thread);
    ``prefetch=False`` decodes in the caller's thread, streaming.  ``n_frames_parallel`` counts
    the frames decoded through the index.  The batches are the same either way.
    """

    def __init__(self, path: str, *, allow_truncated: bool = False,
                 batch_entries: int = DEFAULT_BATCH_ENTRIES, batch_requests: int | None = None,
                 prefetch: bool = True, decode_threads: int | None = None) -> None:
        self.path = str(path)
        self.allow_truncated = allow_truncated
        self.batch_entries = max(1, int(batch_entries))
        self.batch_requests = int(batch_requests or max(1024, self.batch_entries // 16))
        self.prefetch = prefetch
        self.decode_threads = (default_decode_threads() if decode_threads is None
                               else max(0, int(decode_threads)))
        self.n_frames_parallel = 0
        self.header = read_header(self.path)
        self._rec_size = self.header.record_size
        self._keys_on = self.header.has_block_keys
        self.n_requests = 0
        self.n_entries = 0
        self.truncated = False
        self._closers: list = []
        self._pool: list[tuple[np.ndarray, ...]] = []
        self._checker: _lcp.RequestParser | None = None

    def __enter__(self) -> "LcpReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for c in self._closers:
            c()
        self._closers.clear()

    # -- batch arrays -------------------------------------------------------------------------
    def _alloc(self, n_entries: int) -> None:
        # NOTE: fresh arrays cost a page fault per 4 KiB on first touch, which is slower than
        # parsing itself; so reuse an earlier set once no batch (view) refers to it any more.
        # A set is free when the pool's tuple is the only holder of each array.
        arrays = None
        for cand in self._pool:
            if cand[2].shape[0] >= n_entries and all(sys.getrefcount(a) == 3 for a in cand):
                arrays = cand
                break
        if arrays is None:
            rec = np.empty(self.batch_requests, dtype=RECORD_DTYPE)
            arrays = (rec, np.empty(self.batch_requests + 1, dtype=np.int64),
                      np.empty(n_entries, dtype=np.int64), np.empty(n_entries, dtype=np.int64),
                      np.empty(n_entries if self._keys_on else 0, dtype=np.int64))
            if n_entries <= self.batch_entries:
                self._pool.append(arrays)
                if len(self._pool) > 3:
                    self._pool.pop(0)
        self._records, self._offsets, self._ids, self._nxt, self._keys = arrays
        self._rec_u8 = self._records.view(np.uint8)
        self._offsets[0] = 0
        self._n_req = 0
        self._n_ent = 0

    def _take(self) -> Batch:
        n, m = self._n_req, self._n_ent
        batch = Batch(self._records[:n], self._offsets[:n + 1], self._ids[:m], self._nxt[:m],
                      first_request=self.n_requests, first_vtime=self.n_entries + 1,
                      block_keys=self._keys[:m] if self._keys_on else None)
        self.n_requests += n
        self.n_entries += m
        self._records = self._offsets = self._ids = self._nxt = self._rec_u8 = None
        self._keys = None
        self._alloc(self.batch_entries)
        return batch

    def _fail(self, what: str, offset: int) -> TraceFormatError:
        n_done = self.n_requests + self._n_req
        return TraceFormatError(f"{self.path}: byte offset {offset}: {what}; {n_done} complete"
                                " requests read", byte_offset=offset, n_complete_requests=n_done)

    def _parser(self) -> _lcp.RequestParser:
        """A parser that checks every request against this file's header (counts when valid)."""
        h = self.header
        valid = h.counts_valid
        return _lcp.RequestParser(
            has_next=h.has_next_access, max_id=min(h.n_unique_blocks, _I64) if valid else 0,
            max_blocks=_max_blocks(h),
            n_types=h.n_types, max_user=min(h.n_users, _U32) if valid else _U32,
            sorted=h.is_sorted, check_times=valid, t_first=h.first_complete_time_us,
            t_last=h.last_complete_time_us, has_session_next=h.has_session_next,
            max_vtime=min(h.n_block_accesses, _I64) if valid else _I64,
            max_requests=min(h.n_requests, _I64) if valid else _I64,
            record_size=self._rec_size, n_replicas=h.n_replicas, block_keys=h.has_block_keys)

    def _corrupt(self, p: _lcp.RequestParser, offset: int) -> TraceFormatError:
        """The error for the request at stream ``offset`` that ``p`` refused: what is wrong,
        the request's index in the file and, for an entry, its index and byte offset."""
        h = self.header
        index = self.n_requests + self._n_req
        v = p.value
        where = f"request index {index}"
        if p.entry >= 0:
            where += f", entry {p.entry} (byte offset {offset + self._rec_size + 16 * p.entry})"
        f = p.fault
        if f == _lcp.FAULT_N_BLOCKS:
            if v > h.max_blocks_per_request and h.counts_valid:
                what = f"request of {v} blocks (header max {h.max_blocks_per_request})"
            else:
                what = (f"request of {v} blocks (more than {MAX_PLAUSIBLE_BLOCKS}, which no real"
                        " request has)")
        elif f == _lcp.FAULT_TYPE_ID:
            what = f"type id {v} beyond the header's {h.n_types} request types"
        elif f == _lcp.FAULT_USER_ID:
            what = f"user id {v} above the header's {h.n_users} users"
        elif f in (_lcp.FAULT_START_TIME, _lcp.FAULT_COMPLETE_TIME, _lcp.FAULT_ARRIVAL_TIME):
            name = {_lcp.FAULT_START_TIME: "start_time_us",
                    _lcp.FAULT_COMPLETE_TIME: "complete_time_us"}.get(f, "arrival_time_us")
            what = f"{name} {v} is below -1 (times are >= 0, or -1 unknown)"
        elif f == _lcp.FAULT_REPLICA_ID:
            what = f"replica id {v} beyond the header's {h.n_replicas} replicas"
        elif f == _lcp.FAULT_BLOCK_KEY:
            what = f"block key {v} out of range 1..{_I64}"
        elif f == _lcp.FAULT_TIME_RANGE:
            what = (f"complete_time_us {v} outside the header's {h.first_complete_time_us}.."
                    f"{h.last_complete_time_us}")
        elif f == _lcp.FAULT_UNSORTED:
            what = (f"complete_time_us {v} before the previous request's {p.previous} in a"
                    " file flagged SORTED")
        elif f == _lcp.FAULT_SESSION_NEXT:
            what = (f"session_next_req {v} is not a later request than this one"
                    f" ({index + 1}, 1-based)")
        elif f == _lcp.FAULT_BLOCK_ID:
            top = h.n_unique_blocks if h.counts_valid else _I64
            what = f"block id {v} out of range 1..{top}"
        elif f == _lcp.FAULT_NEXT_ACCESS:
            vt = self.n_entries + self._n_ent + p.entry + 1
            top = h.n_block_accesses if h.counts_valid else _I64
            what = f"next access {v} of vtime {vt} (expected -1 or {vt + 1}..{top})"
        else:
            what = f"next-access delta {v} in a file without HAS_NEXT_ACCESS (deltas are 0)"
        return self._fail(f"corrupt lcp data in {where}: {what}", offset)

    def _feed(self, buf, pos: int, end: int, base: int):
        """Parse whole requests from buf[pos:end] (stream offset of buf[0] is ``base``); yield
        full batches; return the position of the first byte not consumed."""
        p = self._checker
        while True:
            self._n_req, self._n_ent, pos, st, detail = p.parse(
                buf, pos, end, self._rec_u8, self._offsets, self._ids, self._nxt,
                self._n_req, self._n_ent, self.n_requests, self.n_entries + 1,
                self._keys if self._keys_on else None)
            if st == _lcp.PARSE_NEED_INPUT:
                return pos
            if st == _lcp.PARSE_BATCH_FULL:
                yield self._take()
            elif st == _lcp.PARSE_TOO_BIG:
                self._alloc(max(self.batch_entries, int(detail)))
            else:
                raise self._corrupt(p, base + pos)

    def __iter__(self) -> Iterator[Batch]:
        f, compressed = _open_stream(self.path)
        fd: _FrameDecoder | None = None
        if compressed and self.prefetch and self.decode_threads and has_frame_index(f):
            fd = _FrameDecoder(f, min(self.decode_threads, _MAX_DECODE_THREADS),
                               record_size=self._rec_size)
            chunks_it = fd.chunks()
            pf = None
        else:
            chunks_it = _decompressed_chunks(f, compressed)
            pf = _Prefetcher(chunks_it) if self.prefetch else None
        chunks = iter(pf) if pf else chunks_it

        def _close() -> None:
            if pf:
                pf.close()
            if fd is not None:
                chunks_it.close()  # NOTE: joins the decode threads before the file is closed
                self.n_frames_parallel = fd.n_frames
            f.close()

        self._closers.append(_close)
        self.n_requests = self.n_entries = 0
        self.n_frames_parallel = 0
        self.truncated = False
        self._alloc(self.batch_entries)
        self._checker = self._parser()
        try:
            yield from self._iterate(chunks)
        finally:
            _close()
            if _close in self._closers:
                self._closers.remove(_close)

    def _iterate(self, chunks: Iterator[bytes]) -> Iterator[Batch]:
        base = 0            # stream offset of the first byte of `tail`
        tail = bytearray()  # bytes not yet consumed (header first, then a straddling request)
        header_done = False
        error: TraceFormatError | None = None
        try:
            for chunk in chunks:
                if not header_done:
                    tail += chunk
                    if len(tail) < HEADER_SIZE:
                        continue
                    chunk = bytes(tail[HEADER_SIZE:])
                    tail = bytearray()
                    base = HEADER_SIZE
                    header_done = True
                cpos = 0
                rsize = self._rec_size
                # finish the request that straddles the previous chunk boundary
                while tail:
                    if len(tail) < rsize:
                        need = rsize
                    else:
                        nb = int.from_bytes(tail[52:56], "little")
                        need = rsize + 16 * nb
                    take = need - len(tail)
                    if take > len(chunk) - cpos:
                        tail += chunk[cpos:]
                        cpos = len(chunk)
                        break
                    piece = bytes(tail) + chunk[cpos:cpos + take]
                    cpos += take
                    if need == rsize and nb_unknown(piece):
                        tail = bytearray(piece)
                        continue
                    used = yield from self._feed(piece, 0, len(piece), base)
                    if used != len(piece):  # cannot happen: piece is one whole request
                        raise self._fail("internal error: straddling request not parsed", base)
                    base += len(piece)
                    tail = bytearray()
                if cpos >= len(chunk):
                    continue
                pos = yield from self._feed(chunk, cpos, len(chunk), base - cpos)
                base = base - cpos + pos
                tail = bytearray(chunk[pos:])
        except _Truncated:
            error = self._fail("truncated zstd stream (the compressed file ends inside a frame)",
                               base)
        except _ZstdError as exc:
            error = self._fail(f"corrupt zstd data ({exc}) at decompressed byte offset"
                               f" {exc.produced}", base)
        except _IndexDamaged as exc:
            error = self._fail(str(exc), base)
        except TraceFormatError as exc:
            if not self.allow_truncated:
                raise
            error = exc
        if error is None:
            if not header_done:
                raise self._fail("truncated lcp header", len(tail))
            if tail:
                error = self._fail(f"truncated lcp trace ({len(tail)} bytes of an incomplete"
                                   " request at the end)", base)
            elif self.header.counts_valid:
                n_done = self.n_requests + self._n_req
                if n_done < self.header.n_requests:
                    error = self._fail(f"truncated lcp trace (header says"
                                       f" {self.header.n_requests} requests)", base)
                elif n_done > self.header.n_requests:
                    error = self._fail(f"corrupt lcp trace: more requests than the header's"
                                       f" {self.header.n_requests}", base)
                elif self.n_entries + self._n_ent != self.header.n_block_accesses:
                    error = self._fail(f"corrupt lcp trace: {self.n_entries + self._n_ent}"
                                       f" block accesses, the header says"
                                       f" {self.header.n_block_accesses}", base)
                else:
                    wrong = _counts_disagree(self.header, self._checker, n_done)
                    if wrong:
                        error = self._fail(f"corrupt lcp trace: {wrong}", base)
        if error is not None:
            if not self.allow_truncated:
                raise error
            self.truncated = True
            logger.warning("%s; reading the complete prefix (--allow-truncated)", error)
        if self._n_req:
            yield self._take()


def _counts_disagree(h: LcpHeader, p: _lcp.RequestParser, n_requests: int) -> str | None:
    """How the valid counts of a file read to its end disagree with its requests, or None.

    ``n_unique_blocks``, ``n_users`` and ``max_blocks_per_request`` are the largest block id,
    user id and block count; the first and last complete times the smallest and largest.  NOTE:
    the first time is compared only when no request has -1 (unknown): a writer may leave the
    unknown times out of the smallest.
    """
    for key, seen in (("n_unique_blocks", p.max_id_seen), ("n_users", p.max_user_seen),
                      ("max_blocks_per_request", p.max_blocks_seen)):
        if getattr(h, key) != seen:
            return f"the header's {key} is {getattr(h, key)}, the requests say {seen}"
    if n_requests:
        if h.last_complete_time_us != p.max_time_seen:
            return (f"the header's last_complete_time_us is {h.last_complete_time_us}, the"
                    f" largest complete time is {p.max_time_seen}")
        if p.min_time_seen >= 0 and h.first_complete_time_us != p.min_time_seen:
            return (f"the header's first_complete_time_us is {h.first_complete_time_us}, the"
                    f" smallest complete time is {p.min_time_seen}")
    return None


def _max_blocks(h: LcpHeader) -> int:
    """The most blocks a request of this file may have: the header's max with valid counts,
    never more than :data:`MAX_PLAUSIBLE_BLOCKS` (a damaged or hostile header must not make the
    reader allocate arrays for billions of entries)."""
    if h.counts_valid:
        return min(h.max_blocks_per_request, MAX_PLAUSIBLE_BLOCKS)
    return MAX_PLAUSIBLE_BLOCKS


def nb_unknown(piece: bytes) -> bool:
    """True when a record-sized piece is a record whose entries still have to be collected."""
    return int.from_bytes(piece[52:56], "little") > 0
