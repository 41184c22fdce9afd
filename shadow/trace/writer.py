"""Streaming lcp writer: plain or zstd, written to a temporary name and renamed on close.

An OSError on the output (a missing or read-only directory, a full disk) is raised as
:class:`shadow.errors.OutputError` naming the final path (an OSError too, so callers that catch
OSError still do); the final path then never appears.

The header is written first with COUNTS_VALID clear, so a file that is still being written (or
whose writer crashed) is a valid, readable stream of every request flushed so far.  On
:meth:`LcpWriter.close` the header is rewritten in place with the counts and COUNTS_VALID.

NOTE: in a zstd file the header is its own frame, stored as one *raw* (uncompressed) zstd block of
fixed size (8202 bytes), so close() can seek back and rewrite it without touching the body.  The
body is cut into independent frames of about ``frame_bytes`` decompressed bytes, at request
boundaries, each preceded by a skippable frame index entry (:mod:`shadow.trace.frames`) that is
written with compressed_size 0 when the frame opens and rewritten in place when it ends, so
readers can decode frames in parallel.  Any zstd decoder reads the concatenated frames as one
stream (skippable frames produce no output).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Sequence

import numpy as np
import zstandard

from shadow.atomic import commit, discard, output_error
from shadow.trace import _lcp
from shadow.trace.batch import Batch
from shadow.trace.format import (
    FLAG_BLOCK_KEYS,
    FLAG_COUNTS_VALID,
    FLAG_HAS_NEXT_ACCESS,
    FLAG_HAS_SESSION_NEXT,
    FLAG_SORTED,
    FRAME_INDEX_SIZE,
    HEADER_FRAME_PREFIX,
    RECORD_DTYPE,
    RECORD_SIZE,
    VERSION_1,
    VERSION_2,
    empty_records,
)
from shadow.trace.frames import FrameEntry, pack_entry
from shadow.trace.header import LcpHeader

# NOTE: level 1 with long-distance matching: on lcp bodies it is a little larger than level 3 for
# half the CPU time (docs/performance.md, "Trace layer"); decoding is as fast.
DEFAULT_LEVEL = 1
WINDOW_LOG = 27
# NOTE: decompressed payload per body frame: large enough that cutting the stream costs little
# compression (long-distance matches do not cross frames; docs/performance.md), small enough that
# a 2-core reader has several frames to decode at once with a few MiB each in flight.
DEFAULT_FRAME_BYTES = 4 << 20


def _wants_zstd(path: str, compress: bool | None) -> bool:
    if compress is not None:
        return bool(compress)
    return str(path).endswith(".zst")


class LcpWriter:
    """Write requests to an lcp file.

    ``compress=None`` picks zstd when the path ends in ``.zst``.  ``has_next_access`` /
    ``has_session_next`` / ``sorted`` set the header flags (the caller vouches for them);
    without ``has_next_access`` every delta is written as 0.  The temporary name is
    ``<path>.partial`` (readable while it grows: the connector's recorder relies on it) unless
    ``temp_path`` says otherwise (``shadow convert`` gives a :func:`shadow.atomic.create_temp`
    name).  A zstd body is cut into frames of
    about ``frame_bytes`` decompressed bytes (whole requests; a frame ends with the first request
    that reaches the size), each behind a frame index entry; ``frame_bytes=0`` writes the body
    as one frame without index (the layout of files written before the index existed).

    The file is lcp v1 unless it needs v2 (docs/lcp.md "lcp v2"): ``replica_names`` (the
    replicas ``replica_id`` names), ``block_keys`` (every entry carries its block key instead
    of a next-access delta; exclusive with ``has_next_access``) or ``version=2`` (records with
    ``arrival_time_us`` and ``replica_id``).
    """

    def __init__(self, path: str, *, block_size_tokens: int = 0, producer: str = "shadow",
                 type_names: Sequence[str] = (), compress: bool | None = None,
                 level: int = DEFAULT_LEVEL, has_next_access: bool = False,
                 has_session_next: bool = False, sorted: bool = False,
                 temp_path: str | None = None, threads: int = 0,
                 frame_bytes: int = DEFAULT_FRAME_BYTES, replica_names: Sequence[str] = (),
                 block_keys: bool = False, version: int | None = None) -> None:
        self.path = str(path)
        self.temp_path = temp_path or self.path + ".partial"
        self.compress = _wants_zstd(self.path, compress)
        flags = 0
        if has_next_access:
            flags |= FLAG_HAS_NEXT_ACCESS
        if has_session_next:
            flags |= FLAG_HAS_SESSION_NEXT
        if sorted:
            flags |= FLAG_SORTED
        if block_keys:
            flags |= FLAG_BLOCK_KEYS
        if version is None:
            version = VERSION_2 if (replica_names or block_keys) else VERSION_1
        self.header = LcpHeader(block_size_tokens=int(block_size_tokens), flags=flags,
                                type_names=list(type_names), producer=producer,
                                replica_names=list(replica_names), version=int(version))
        self.header.pack()  # validate the tables before creating any file
        self.record_size = self.header.record_size
        self._n_requests = 0
        self._n_entries = 0
        self._max_id = 0
        self._max_blocks = 0
        self._max_user = 0
        self._sessions: set[int] = set()
        self._t_first: int | None = None
        self._t_last: int | None = None
        self._closed = False
        self.frame_bytes = max(0, int(frame_bytes))
        self.n_frames = 0            # body frames finished (indexed layout)
        self._frame_open = False
        self._frame_pos = 0          # file offset of the open frame's index entry
        self._frame_payload = 0
        self._frame_requests = 0
        self._frame_entries = 0
        try:
            self._f = open(self.temp_path, "wb")
        except OSError as exc:
            raise output_error(self.path, exc) from None
        try:
            self._write_header(self.header)
            self._z = None
            if self.compress:
                params = zstandard.ZstdCompressionParameters.from_level(
                    level, window_log=WINDOW_LOG, enable_ldm=True, threads=threads,
                    write_checksum=True)
                cctx = zstandard.ZstdCompressor(compression_params=params)
                self._z = cctx.stream_writer(self._f, closefd=False, write_return_read=True)
        except BaseException as exc:
            self._f.close()
            discard(self.temp_path)
            if isinstance(exc, OSError):
                raise output_error(self.path, exc) from None
            raise

    def _write_header(self, header: LcpHeader) -> None:
        raw = header.pack()
        if self.compress:
            self._f.write(HEADER_FRAME_PREFIX)
        self._f.write(raw)

    def __enter__(self) -> "LcpWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- writing ------------------------------------------------------------------------------
    def write_request(self, record: Any, block_ids, next_access_delta=None,
                      block_keys=None) -> None:
        """Append one request: ``record`` is a RECORD_DTYPE scalar/array of 1 or a dict of
        fields (those not given unset: :func:`shadow.trace.format.empty_records`)."""
        if isinstance(record, dict):
            rec = empty_records(1)
            for k, v in record.items():
                rec[k] = v
        else:
            rec = np.zeros(1, dtype=RECORD_DTYPE)
            rec[0] = record
        ids = np.ascontiguousarray(block_ids, dtype=np.int64).reshape(-1)
        if next_access_delta is None:
            nxt = np.full(ids.shape[0], -1, dtype=np.int64)
        else:
            nxt = np.cumsum(np.asarray(next_access_delta, dtype=np.int64).reshape(-1))
        offsets = np.array([0, ids.shape[0]], dtype=np.int64)
        self.write_arrays(rec, offsets, ids, nxt, block_keys)

    def write_batch(self, batch: Batch) -> None:
        self.write_arrays(batch.records, batch.offsets, batch.block_ids, batch.next_access,
                          batch.block_keys)

    def write_arrays(self, records: np.ndarray, offsets: np.ndarray, block_ids: np.ndarray,
                     next_access: np.ndarray | None = None,
                     block_keys: np.ndarray | None = None) -> None:
        """Append requests given as flat arrays (the :class:`Batch` layout); ``offsets[0]`` may
        be nonzero (a slice of a larger array); ``next_access`` holds absolute vtimes;
        ``block_keys`` each entry's key (required when the file has BLOCK_KEYS, else
        ignored)."""
        try:
            self._write_arrays(records, offsets, block_ids, next_access, block_keys)
        except OSError as exc:
            raise output_error(self.path, exc) from None

    def _write_arrays(self, records: np.ndarray, offsets: np.ndarray, block_ids: np.ndarray,
                      next_access: np.ndarray | None, block_keys: np.ndarray | None) -> None:
        if self._closed:
            raise ValueError("write to a closed LcpWriter")
        records = np.ascontiguousarray(records, dtype=RECORD_DTYPE)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        n = records.shape[0]
        if n == 0:
            return
        lo, hi = int(offsets[0]), int(offsets[-1])
        ids = np.ascontiguousarray(block_ids[lo:hi], dtype=np.int64)
        if next_access is None:
            nxt = ids  # unused: deltas are written as 0 without HAS_NEXT_ACCESS
        else:
            nxt = np.ascontiguousarray(next_access[lo:hi], dtype=np.int64)
        keys = None
        if self.header.has_block_keys:
            if block_keys is None:
                raise ValueError("a writer of block keys needs every entry's key")
            keys = np.ascontiguousarray(block_keys[lo:hi], dtype=np.int64)
            if keys.shape[0] and int(keys.min()) < 1:
                raise ValueError(f"block key {int(keys.min())} in an lcp trace (keys are"
                                 " 1..2**63 - 1)")
        if lo:
            offsets = offsets - lo
        m = hi - lo
        if m:
            mn = int(ids.min())
            if mn < 1:
                raise ValueError(f"block id {mn} in an lcp trace (ids start at 1)")
            self._max_id = max(self._max_id, int(ids.max()))
        lengths = np.diff(offsets)
        self._max_blocks = max(self._max_blocks, int(lengths.max()))
        self._max_user = max(self._max_user, int(records["user_id"].max()))
        s = records["session_id"]
        self._sessions.update(np.unique(s[s >= 0]).tolist())
        if self.record_size != RECORD_SIZE:
            top = int(records["replica_id"].max())
            if top > self.header.n_replicas:
                raise ValueError(f"replica id {top} beyond the {self.header.n_replicas}"
                                 " replica names")
        ct = records["complete_time_us"]
        t0, t1 = int(ct.min()), int(ct.max())
        self._t_first = t0 if self._t_first is None else min(self._t_first, t0)
        self._t_last = t1 if self._t_last is None else max(self._t_last, t1)
        rsize = self.record_size
        out = np.empty(rsize * n + 16 * m, dtype=np.uint8)
        _lcp.pack_requests(records.view(np.uint8), offsets, ids, nxt,
                           self.header.has_next_access and next_access is not None, out,
                           rsize, keys)
        if self._z is None:
            self._f.write(out.data)
        elif not self.frame_bytes:
            self._z.write(out.data)
        else:
            self._write_framed(out, offsets, n)
        self._n_requests += n
        self._n_entries += m

    def _write_framed(self, out: np.ndarray, offsets: np.ndarray, n: int) -> None:
        """Write packed requests (``offsets`` from 0) into frames of about frame_bytes."""
        # end of request k in `out`: its record and entries and all before them
        ends = self.record_size * np.arange(1, n + 1, dtype=np.int64) + 16 * offsets[1:]
        i, start = 0, 0          # first request / byte not yet written
        while i < n:
            if not self._frame_open:
                self._open_frame()
            room = self.frame_bytes - self._frame_payload
            k = int(np.searchsorted(ends, start + room, side="left"))
            j = min(k + 1, n)    # requests i..j-1 go into this frame
            stop = int(ends[j - 1])
            self._z.write(out.data[start:stop])
            self._frame_payload += stop - start
            self._frame_requests += j - i
            self._frame_entries += int(offsets[j] - offsets[i])
            i, start = j, stop
            if self._frame_payload >= self.frame_bytes:
                self._close_frame()

    def _open_frame(self) -> None:
        self._frame_pos = self._f.tell()
        self._frame_payload = self._frame_requests = self._frame_entries = 0
        # NOTE: compressed_size 0 until the frame ends: a crashed writer leaves an open entry,
        # which tells readers to decode the rest of the file as a plain zstd stream.
        self._f.write(pack_entry(FrameEntry(0, 0, 0, 0)))
        self._frame_open = True

    def _close_frame(self) -> None:
        self._z.flush(zstandard.FLUSH_FRAME)
        end = self._f.tell()
        entry = FrameEntry(end - self._frame_pos - FRAME_INDEX_SIZE, self._frame_payload,
                           self._frame_requests, self._frame_entries)
        self._f.seek(self._frame_pos)
        self._f.write(pack_entry(entry))
        self._f.seek(end)
        self._frame_open = False
        self.n_frames += 1

    def flush(self) -> None:
        """Make every request written so far decodable by a streaming reader (zstd FLUSH_BLOCK)."""
        try:
            if self._z is not None and (self._frame_open or not self.frame_bytes):
                self._z.flush(zstandard.FLUSH_BLOCK)
            self._f.flush()
        except OSError as exc:
            raise output_error(self.path, exc) from None

    @property
    def n_requests(self) -> int:
        return self._n_requests

    def final_header(self) -> LcpHeader:
        h = self.header.copy()
        h.flags |= FLAG_COUNTS_VALID
        h.n_requests = self._n_requests
        h.n_block_accesses = self._n_entries
        h.n_unique_blocks = self._max_id
        h.max_blocks_per_request = self._max_blocks
        h.n_sessions = len(self._sessions)
        h.n_users = self._max_user
        h.first_complete_time_us = self._t_first or 0
        h.last_complete_time_us = self._t_last or 0
        return h

    def close(self) -> None:
        """Finish the stream, write the counts into the header, fsync, rename to the final path
        (:func:`shadow.atomic.commit`).  On failure the temporary is removed."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._frame_open:
                self._close_frame()
            elif self._z is not None and not self.frame_bytes:
                self._z.flush(zstandard.FLUSH_FRAME)
            self._f.seek(0)
            self._write_header(self.final_header())
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
        except BaseException as exc:
            with contextlib.suppress(OSError):
                self._f.close()
            discard(self.temp_path)
            if isinstance(exc, OSError):
                raise output_error(self.path, exc) from None
            raise
        commit(self.temp_path, self.path, sync=False)

    def abort(self) -> None:
        """Drop the temporary file; the final path is never created."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._f.close()   # NOTE: a full disk fails the flush of what is being dropped
        discard(self.temp_path)
