"""The live recording: rotating zstd lcp segments written by the worker thread.

A segment is written through :class:`shadow.trace.LcpWriter` under ``<name>.partial`` and renamed
to ``<name>`` when it is finished (rotation by size or age, or a clean shutdown), so a finished
segment is never half-written.  After every request (or at most every ``flush_ms``, and whenever
the worker goes idle) the zstd stream is flushed, so a kill -9 leaves the ``.partial`` segment
readable up to its last flushed complete request (``shadow convert`` reads it as truncated).

Segment names sort in time order and say which engine wrote them (the format and its listing:
:mod:`shadow.trace.segments`).

Neither tokens nor vLLM's hashes are written: only dense block ids (see :mod:`.interner`) with
each block's key (lcp v2 BLOCK_KEYS: a keyed digest of what vLLM's hash covers, the same on every
replica under one fleet key; :mod:`.blockkey`), the replica's name, times (arrival, admission,
release) and lengths, and the sessions, turns and parents inferred from prefix continuation
(:class:`shadow.trace.sessions.SessionInferrer`, over the recording's request order, across
segments; ``chat_id`` is the request's 1-based position in the recording, so ``shadow convert
--infer-sessions`` of the same requests without them gives the same fields).  Any OSError
(disk full, directory unwritable) turns recording off for the rest of the process, with one log
line and ``shadow_recording_enabled`` at 0; the simulation goes on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from shadow.connector.blockkey import private_keys, random_key
from shadow.trace.segments import TYPE_NAMES, segment_name, segment_prefix
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW, INFERRED_FIELDS, SessionInferrer

logger = logging.getLogger(__name__)


class Recorder:
    """Rotating lcp segments of one engine (DP rank).  Used by the worker thread only."""

    def __init__(self, directory: str, *, block_size: int, engine_id: str = "0",
                 dp_rank: int = 0, max_bytes: int = 256 << 20, max_seconds: float = 3600.0,
                 flush_ms: float = 20.0, producer: str = "shadow connector",
                 clock: Callable[[], float] = time.time,
                 session_window: int = DEFAULT_SESSION_WINDOW, replica: str = "0") -> None:
        self.directory = directory
        self.block_size = int(block_size)
        #: the segments' replica table: this engine's name, ``replica_id`` 1 of every record
        self.replica = replica
        # NOTE: keys for blocks written without one (no request to read tokens from): private
        # to this recorder, equal to no other recording's
        self._own_key, self._own_salt = random_key(), os.urandom(16)
        self.prefix = segment_prefix(engine_id, dp_rank)
        self.max_bytes = int(max_bytes)
        self.max_seconds = float(max_seconds)
        self.flush_s = float(flush_ms) / 1000.0
        self.producer = producer
        self._clock = clock
        self.enabled = True
        self.disabled_reason: str | None = None
        self._w = None
        self._seq = 0
        self._opened_at = 0.0
        self._last_flush = 0.0
        self._dirty = False
        self._bytes_reported = 0  # bytes of the current segment already counted
        self.bytes_total = 0      # compressed bytes written, all segments (shadow_recorded_bytes)
        self.n_recorded = 0       # requests written (shadow_recorded_requests)
        self.finished: list[str] = []
        # NOTE: one inferrer for the whole recording (segments continue each other); 0 = off
        self.sessions = (SessionInferrer(session_window, self.block_size)
                         if session_window > 0 else None)
        # NOTE: imported now, at start-up: a first import on the worker thread holds the GIL for
        # about a second (numpy, zstandard), stalling the scheduler thread mid-request.
        try:
            from shadow.trace import LcpWriter
        except ImportError:  # NOTE: the trace package's __init__ may not export it yet
            from shadow.trace.writer import LcpWriter
        self._writer_cls = LcpWriter
        try:
            os.makedirs(directory, exist_ok=True)
            if not os.access(directory, os.W_OK | os.X_OK):
                raise PermissionError(13, "directory is not writable", directory)
        except OSError as exc:
            self._disable(exc)

    # -- writing ------------------------------------------------------------------------------
    def write(self, t_start_s: float, t_done_s: float, input_length: int, output_length: int,
              block_ids: list[int], type_id: int = 0, *, arrival_s: float = -1.0,
              block_keys: list[int] | None = None) -> int | None:
        """Record one finished request (``type_id`` 1: an admission that ended in a preemption,
        :data:`shadow.trace.segments.PREEMPTED_TYPE`) admitted at ``t_start_s``, released at
        ``t_done_s``, arrived at ``arrival_s`` (-1 unknown), with its blocks' keys (None: keys
        private to this recorder); the compressed bytes it added (None when off)."""
        if not self.enabled:
            return None
        try:
            now = self._clock()
            if self._w is not None and (now - self._opened_at >= self.max_seconds
                                        or self._bytes_reported >= self.max_bytes):
                self._finish()
            if self._w is None:
                self._open(now)
            # NOTE: round, not truncate: the connector's stamps are whole microseconds and
            # us / 1e6 * 1e6 can fall just below them
            rec = {"start_time_us": round(t_start_s * 1e6),
                   "complete_time_us": round(t_done_s * 1e6),
                   "arrival_time_us": round(arrival_s * 1e6) if arrival_s >= 0 else -1,
                   "replica_id": 1,
                   "n_blocks": len(block_ids), "input_length": int(input_length),
                   "output_length": int(output_length), "type_id": int(type_id)}
            if self.sessions is not None:
                rec.update(zip(INFERRED_FIELDS, self.sessions.infer(
                    block_ids, int(input_length), int(output_length))))
            if block_keys is None:
                block_keys = private_keys(self._own_key, self._own_salt, block_ids)
            self._w.write_request(rec, block_ids, block_keys=block_keys)
            self.n_recorded += 1
            self._dirty = True
            if now - self._last_flush >= self.flush_s:
                self._flush(now)
            return self._count_bytes()
        except OSError as exc:
            self._disable(exc)
            return None

    def idle(self) -> None:
        """Called when the worker has nothing queued: flush pending requests, rotate by age."""
        if not self.enabled or self._w is None:
            return
        try:
            now = self._clock()
            if self._dirty:
                self._flush(now)
            if now - self._opened_at >= self.max_seconds:
                self._finish()
        except OSError as exc:
            self._disable(exc)

    def close(self) -> None:
        """Flush and finish the current segment (clean shutdown)."""
        if self._w is None:
            return
        try:
            self._finish()
        except OSError as exc:
            self._disable(exc)

    # -- internals ----------------------------------------------------------------------------
    def _open(self, now: float) -> None:
        name = segment_name(self.prefix, now, self._seq)
        self._seq += 1
        path = os.path.join(self.directory, name)
        self._w = self._writer_cls(path, block_size_tokens=self.block_size, producer=self.producer,
                                   type_names=TYPE_NAMES, compress=True,
                                   replica_names=[self.replica], block_keys=True)
        self._opened_at = now
        self._last_flush = now
        self._bytes_reported = 0
        self._dirty = False

    def _flush(self, now: float) -> None:
        self._w.flush()
        self._last_flush = now
        self._dirty = False

    def _count_bytes(self) -> int:
        size = os.path.getsize(self._w.temp_path)
        added = max(size - self._bytes_reported, 0)
        self._bytes_reported += added
        self.bytes_total += added
        return added

    def _finish(self) -> None:
        w, self._w = self._w, None
        if w is None:
            return
        if w.n_requests == 0:
            w.abort()
            return
        w.close()  # renames <name>.partial -> <name> atomically
        self.bytes_total += max(os.path.getsize(w.path) - self._bytes_reported, 0)
        self._bytes_reported = 0
        self.finished.append(w.path)

    def _disable(self, exc: OSError) -> None:
        self.enabled = False
        self.disabled_reason = f"{exc.strerror or exc}" + (f": {exc.filename}"
                                                           if exc.filename else "")
        logger.error("shadow connector: recording to %s turned off (%s); the shadow "
                     "simulation goes on", self.directory, self.disabled_reason)
        w, self._w = self._w, None
        if w is not None:
            try:
                w.abort()
            except OSError:
                pass
