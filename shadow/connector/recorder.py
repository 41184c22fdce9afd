"""The live recording: rotating zstd lcp segments written by the worker thread.

A segment is written through :class:`shadow.trace.LcpWriter` under ``<name>.partial`` and renamed
to ``<name>`` when it is finished (rotation by size or age, or a clean shutdown), so a finished
segment is never half-written.  After every request (or at most every ``flush_ms``, and whenever
the worker goes idle) the zstd stream is flushed, so a kill -9 leaves the ``.partial`` segment
readable up to its last flushed complete request (``shadow convert`` reads it as truncated).

Segment names, streams, runs, stream locks and sealing are the format's
(:mod:`shadow.trace.segments`).  A recorder is one run: it takes its stream's lock when it
starts (another live process on the same engine and rank makes it write as ``<engine>_2``, ...,
with one warning), seals the orphaned ``.partial`` segments a killed predecessor left in its
stream, and names its segments after every earlier one of the stream, so a restart appends.

Retention (``keep_bytes``, ``keep_seconds``; 0 = unbounded): the stream's finished segments are
deleted oldest first while the stream's bytes on disk (the open segment included) exceed
``keep_bytes``, or while the oldest finished segment was last written more than
``keep_seconds`` ago; the open segment never is.  Checked when a segment is finished and
whenever the worker is idle.

Neither tokens nor vLLM's hashes are written: only dense block ids (see :mod:`.interner`) with
each block's key (lcp v2 BLOCK_KEYS: a keyed digest of what vLLM's hash covers, the same on every
replica under one fleet key; :mod:`.blockkey`), the replica's name, times (arrival, admission,
release) and lengths, and the sessions, turns and parents inferred from prefix continuation
(:class:`shadow.trace.sessions.SessionInferrer`, over the recording's request order, across
segments; ``chat_id`` is the request's 1-based position in the run, so ``shadow convert
--infer-sessions`` of the same requests without them gives the same fields).  Any OSError
(disk full, directory unwritable) turns recording off for the rest of the process, with one log
line and ``shadow_recording_enabled`` at 0; the simulation goes on.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable

from shadow.connector.blockkey import private_keys, random_key
from shadow.trace.segments import (TYPE_NAMES, StreamLock, scan_segments, seal_orphans,
                                   segment_name, segment_prefix)
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW, INFERRED_FIELDS, SessionInferrer

logger = logging.getLogger(__name__)

#: Default rotation: a segment is finished at this many compressed bytes ...
#: NOTE: 64 MiB: an orphaned segment is sealed (rewritten) when a server stops, at about
#: 10 MiB/s on two loaded cores (docs/connector.md "Running for weeks"), within the seconds a
#: stop allows; retention deletes whole segments, so smaller ones also bound it more finely
SEGMENT_MAX_BYTES = 64 << 20
#: ... or this many seconds after it was opened.
SEGMENT_MAX_SECONDS = 3600.0
#: Stream names tried when the configured one is being written by another live process.
MAX_STREAM_CLAIMS = 64
#: Seconds to wait for a stream lock held by another process (a sealer finishing) before
#: taking the next stream name.
CLAIM_WAIT_S = 2.0
#: Finished segment paths kept in :attr:`Recorder.finished` (the newest).
FINISHED_KEPT = 4096
#: Seconds between two samples of the directory's free space (statvfs).
DISK_SAMPLE_S = 1.0


class Recorder:
    """Rotating lcp segments of one engine (DP rank): one run of its stream.  Used by the worker
    thread only (the constructor runs at start-up, before the worker)."""

    def __init__(self, directory: str, *, block_size: int, engine_id: str = "0",
                 dp_rank: int = 0, max_bytes: int = SEGMENT_MAX_BYTES,
                 max_seconds: float = SEGMENT_MAX_SECONDS,
                 flush_ms: float = 20.0, producer: str = "shadow connector",
                 clock: Callable[[], float] = time.time,
                 session_window: int = DEFAULT_SESSION_WINDOW, replica: str = "0",
                 keep_bytes: int = 0, keep_seconds: float = 0.0) -> None:
        self.directory = directory
        self.block_size = int(block_size)
        self.engine_id = str(engine_id)
        self.dp_rank = int(dp_rank)
        #: the segments' replica table: this engine's name, ``replica_id`` 1 of every record
        self.replica = replica
        # NOTE: keys for blocks written without one (no request to read tokens from): private
        # to this recorder, equal to no other recording's
        self._own_key, self._own_salt = random_key(), os.urandom(16)
        self.prefix = segment_prefix(engine_id, dp_rank)
        self.max_bytes = int(max_bytes)
        self.max_seconds = float(max_seconds)
        self.keep_bytes = int(keep_bytes)
        self.keep_seconds = float(keep_seconds)
        self.flush_s = float(flush_ms) / 1000.0
        self.producer = producer
        self._clock = clock
        self.enabled = True
        self.disabled_reason: str | None = None
        self._w = None
        self._seq = 0
        self._opened_at = 0.0
        self._next_ts = 0.0       # a segment's name time: never before an earlier segment's
        self._last_flush = 0.0
        self._dirty = False
        self._bytes_reported = 0  # bytes of the current segment already counted
        self.bytes_total = 0      # compressed bytes written, all segments (shadow_recorded_bytes)
        self.n_recorded = 0       # requests written (shadow_recorded_requests)
        self.finished: list[str] = []
        # the stream's finished segments on disk, oldest first: path -> (bytes, last written)
        self._disk: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._disk_bytes = 0
        self.segments_deleted = 0  # by retention (shadow_recording_segments_deleted)
        self.disk_free_bytes = 0   # on the directory's file system (sampled, DISK_SAMPLE_S)
        self._disk_sampled = float("-inf")
        self.sealed: list[tuple[str, int, bool]] = []
        self._lock: StreamLock | None = None
        # NOTE: one inferrer for the whole run (segments continue each other); 0 = off
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
            self._claim()
            self._recover()
        except OSError as exc:
            self._disable(exc)

    @property
    def bytes_on_disk(self) -> int:
        """Bytes of this stream's segments on disk: the finished ones and the open one."""
        return self._disk_bytes + (self._bytes_reported if self._w is not None else 0)

    # -- start-up -----------------------------------------------------------------------------
    def _claim(self) -> None:
        """Take the stream's lock (module docstring); the first free name from ``<engine>``,
        ``<engine>_2``, ... when another live process writes it."""
        for k in range(MAX_STREAM_CLAIMS):
            engine = self.engine_id if k == 0 else f"{self.engine_id}_{k + 1}"
            prefix = segment_prefix(engine, self.dp_rank)
            lock = StreamLock(self.directory, prefix)
            deadline = time.monotonic() + (CLAIM_WAIT_S if k == 0 else 0.0)
            while not lock.acquire():
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            if lock.held:
                if k:
                    logger.warning("shadow connector: another live process records engine %s "
                                   "DP rank %d into %s; this one records as %s (give each "
                                   "server its own engine_id and replica)", self.engine_id, self.dp_rank,
                                   self.directory, prefix)
                self.prefix, self._lock = prefix, lock
                return
        raise OSError(errno.EBUSY, f"{MAX_STREAM_CLAIMS} stream names are being written by "
                                   f"other processes", self.directory)

    def _recover(self) -> None:
        """Seal the orphans a killed predecessor left in this stream, take stock of the
        stream's finished segments, apply retention, and start this run's names after theirs."""
        self.sealed = seal_orphans(self.directory, own_prefix=self.prefix)
        for s in scan_segments(self.directory, prefix=self.prefix):
            self._next_ts = max(self._next_ts, s.opened_at_s + 1.0)
            if not s.partial:
                st = os.stat(s.path)
                self._track(s.path, st.st_size, st.st_mtime)
        self._retain(self._clock())

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
            if self._w is not None and now - self._opened_at >= self.max_seconds:
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
            added = self._count_bytes()
            # NOTE: rotated after the request is written and flushed, not before the next one:
            # finishing a segment fsyncs it, and a request must not wait behind that unflushed
            if self._bytes_reported >= self.max_bytes:
                self._finish()
            return added
        except OSError as exc:
            self._disable(exc)
            return None

    def idle(self) -> None:
        """Called when the worker has nothing queued: flush pending requests, rotate by age,
        apply retention."""
        if not self.enabled:
            return
        try:
            now = self._clock()
            if self._w is None:
                self._retain(now)   # NOTE: arithmetic only unless a segment is due
                return
            if self._dirty:
                self._flush(now)
            if now - self._opened_at >= self.max_seconds:
                self._finish()
            self._retain(now)
        except OSError as exc:
            self._disable(exc)

    def close(self) -> None:
        """Flush and finish the current segment, release the stream (clean shutdown;
        idempotent)."""
        try:
            if self._w is not None:
                self._finish()
        except OSError as exc:
            self._disable(exc)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- internals ----------------------------------------------------------------------------
    def _open(self, now: float) -> None:
        # NOTE: never named before an earlier segment of the stream (a restart within the same
        # second, a clock stepped back): names sort in the order the segments were written
        self._next_ts = max(self._next_ts, now)
        name = segment_name(self.prefix, self._next_ts, self._seq)
        self._seq += 1
        path = os.path.join(self.directory, name)
        self._w = self._writer_cls(path, block_size_tokens=self.block_size, producer=self.producer,
                                   type_names=TYPE_NAMES, compress=True,
                                   replica_names=[self.replica], block_keys=True)
        self._opened_at = now
        self._last_flush = now - self.flush_s   # NOTE: a new segment's first request is flushed
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
        size = os.path.getsize(w.path)
        self.bytes_total += max(size - self._bytes_reported, 0)
        self._bytes_reported = 0
        self.finished.append(w.path)
        if len(self.finished) > 2 * FINISHED_KEPT:
            del self.finished[:-FINISHED_KEPT]
        # NOTE: the segment's time is the recorder's clock (retention ages by it)
        now = self._clock()
        os.utime(w.path, (now, now))
        self._track(w.path, size, now)
        self._retain(now)

    def _track(self, path: str, size: int, mtime: float) -> None:
        self._disk[path] = (size, mtime)
        self._disk_bytes += size

    def _sample_disk(self, now: float) -> None:
        if now - self._disk_sampled >= DISK_SAMPLE_S or now < self._disk_sampled:
            st = os.statvfs(self.directory)
            self.disk_free_bytes = st.f_bavail * st.f_frsize
            self._disk_sampled = now

    def _retain(self, now: float) -> None:
        """Delete the stream's oldest finished segments past ``keep_bytes`` or ``keep_seconds``
        (module docstring); never the open one.  Samples the free space too."""
        self._sample_disk(now)
        if not (self.keep_bytes or self.keep_seconds):
            return
        disk = self._disk
        while disk:
            path, (size, mtime) = next(iter(disk.items()))
            if not ((self.keep_bytes and self.bytes_on_disk > self.keep_bytes)
                    or (self.keep_seconds and now - mtime > self.keep_seconds)):
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass   # NOTE: removed by hand: it is gone either way
            del disk[path]
            self._disk_bytes -= size
            self.segments_deleted += 1

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
        if self._lock is not None:
            self._lock.release()
            self._lock = None
