"""The live recording's segment format: file names, their order, runs, stream locks and sealing.

The connector's recorder (:mod:`shadow.connector.recorder`) writes a recording directory as a
series of zstd lcp segments; the readers (``replay``, ``shadow convert``/``stat``/``simulate``
through :mod:`shadow.trace.recording`) find and order them through this module, so neither side
imports the other.

A segment's name says which engine and data-parallel rank wrote it and when it was opened::

    shadow-e<engine_id>-dp<rank>-<UTC yyyymmddThhmmssZ>-<seq:06d>.lcp.zst[.partial]

* **Stream**: the segments of one ``shadow-e<engine>-dp<rank>`` prefix.  One process at a time
  writes a stream: it holds the stream's lock (:class:`StreamLock`, ``flock`` of the hidden file
  ``.shadow-e<engine>-dp<rank>.lock`` in the directory) for as long as it records; the kernel
  drops the lock when the process ends, however it ends.
* **Run**: the segments one recorder wrote, ``seq`` 0, 1, 2, ... in one id space (block ids
  and chat ids count on from segment to segment).  A restarted writer starts a new run at
  ``seq`` 0 whose timestamp is later than every earlier segment of its stream, so the names
  never clash and sort in time order (:func:`segment_sort_key`).
* A segment being written carries :data:`PARTIAL_SUFFIX`; it is renamed to its final name
  (atomic within the directory) once finished, so a finished segment is never half-written.  A
  ``.partial`` whose stream lock is free is an **orphan** (its writer was killed):
  :func:`seal_orphans` rewrites its complete prefix under the final name.
"""

from __future__ import annotations

import calendar
import contextlib
import errno
import fcntl
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

logger = logging.getLogger(__name__)

#: The final segment's extension (a zstd-compressed lcp file).
SEGMENT_SUFFIX = ".lcp.zst"
#: Appended to the name of the segment being written; removed by an atomic rename when finished.
PARTIAL_SUFFIX = ".partial"
#: The recording's request type of an admission that ended in a preemption (type_id 1): the
#: request was admitted again later, which is a record of its own (type_id 0).
PREEMPTED_TYPE = "preempted"
#: The segments' request type table (``type_names[k - 1]`` names ``type_id`` k).
TYPE_NAMES = (PREEMPTED_TYPE,)
#: A segment file name; groups ``engine``, ``rank``, ``ts``, ``seq`` and ``partial``.
SEGMENT_NAME_RE = re.compile(
    r"^shadow-e(?P<engine>[A-Za-z0-9_.-]+?)-dp(?P<rank>\d+)-(?P<ts>\d{8}T\d{6}Z)-"
    r"(?P<seq>\d{6})\.lcp\.zst(?P<partial>\.partial)?$")
_TS_FORMAT = "%Y%m%dT%H%M%SZ"
#: Appended to a sealed segment's producer (where the 256-byte field has room): the segment was
#: finished by :func:`seal_segment`, not by its writer.
SEALED_MARK = "; sealed"


def segment_prefix(engine_id: str, dp_rank: int) -> str:
    """The name prefix of one engine's (DP rank's) segments: ``shadow-e<engine>-dp<rank>``."""
    engine = re.sub(r"[^A-Za-z0-9_.]", "_", str(engine_id)) or "0"
    return f"shadow-e{engine}-dp{int(dp_rank)}"


def segment_name(prefix: str, opened_at_s: float, seq: int) -> str:
    """The final name of a segment opened at ``opened_at_s`` (Unix seconds), number ``seq``."""
    ts = time.strftime(_TS_FORMAT, time.gmtime(opened_at_s))
    return f"{prefix}-{ts}-{int(seq):06d}{SEGMENT_SUFFIX}"


@dataclass(frozen=True)
class Segment:
    """One segment file of a recording directory, its name parsed."""

    path: str
    engine: str
    rank: int
    ts: str
    seq: int
    partial: bool

    @property
    def prefix(self) -> str:
        """Its stream's name prefix (``shadow-e<engine>-dp<rank>``)."""
        return f"shadow-e{self.engine}-dp{self.rank}"

    @property
    def opened_at_s(self) -> int:
        """The second its name says it was opened (Unix time)."""
        return calendar.timegm(time.strptime(self.ts, _TS_FORMAT))

    @property
    def sort_key(self) -> tuple:
        """:func:`segment_sort_key` of its name."""
        return (self.engine, self.rank, self.ts, self.seq, self.path)

    @property
    def final_path(self) -> str:
        """The path it has (or will have) once finished."""
        return self.path[:-len(PARTIAL_SUFFIX)] if self.partial else self.path


def parse_segment(path: str) -> Segment | None:
    """The :class:`Segment` that ``path`` names, or None when it is no segment name."""
    m = SEGMENT_NAME_RE.match(os.path.basename(path))
    if not m:
        return None
    return Segment(str(path), m["engine"], int(m["rank"]), m["ts"], int(m["seq"]),
                   bool(m["partial"]))


def segment_sort_key(name: str) -> tuple:
    """Order segment file names by engine, rank, start time and sequence number."""
    seg = parse_segment(name)
    return ("", 0, "", 0, name) if seg is None else seg.sort_key


def scan_segments(directory: str, *, include_partial: bool = True,
                  prefix: str | None = None) -> list[Segment]:
    """The segments in ``directory`` (of one stream's ``prefix`` if given), in
    :func:`segment_sort_key` order."""
    out = []
    for n in os.listdir(directory):
        s = parse_segment(os.path.join(directory, n))
        if s is not None and (include_partial or not s.partial) and (
                prefix is None or s.prefix == prefix):
            out.append(s)
    return sorted(out, key=lambda s: s.sort_key)


def list_segments(directory: str, *, include_partial: bool = True) -> list[str]:
    """The recording's segment paths in ``directory``, in time order per engine."""
    return [s.path for s in scan_segments(directory, include_partial=include_partial)]


def split_runs(segments: list[Segment]) -> list[list[Segment]]:
    """Group sorted segments into runs: a run starts at each stream's first segment and at every
    ``seq`` 0 (a restarted writer); each run is one id space."""
    runs: list[list[Segment]] = []
    for s in segments:
        if not runs or s.seq == 0 or runs[-1][-1].prefix != s.prefix:
            runs.append([s])
        else:
            runs[-1].append(s)
    return runs


# -- stream locks -----------------------------------------------------------------------------
def lock_path(directory: str, prefix: str) -> str:
    """The hidden lock file of stream ``prefix`` in ``directory``."""
    return os.path.join(directory, f".{prefix}.lock")


class StreamLock:
    """``flock`` of a stream's lock file: held by the one process writing the stream.

    NOTE: the lock file is never removed (removing it while another process waits on it would
    let two holders in); it is empty and hidden.  ``flock`` works on local file systems; on a
    network file system that does not support it, every lock reads as free.
    """

    def __init__(self, directory: str, prefix: str) -> None:
        self.path = lock_path(directory, prefix)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, create: bool = True) -> bool:
        """Take the lock without waiting; False when another process holds it.  Without
        ``create`` a missing lock file counts as free (nobody ever wrote the stream) and is not
        made (for readers)."""
        if self._fd is not None:
            return True
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC if create else os.O_RDONLY | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            if create:
                raise
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                return True   # NOTE: no locks on this file system: nothing to coordinate with
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)   # NOTE: closing the descriptor drops the flock


def stream_is_live(directory: str, prefix: str) -> bool:
    """Whether another process holds ``prefix``'s stream lock (its writer is running)."""
    lock = StreamLock(directory, prefix)
    try:
        free = lock.acquire(create=False)
    except OSError:
        return False
    lock.release()
    return not free


# -- sealing ----------------------------------------------------------------------------------
class _QuietTruncation(logging.Filter):
    """Drops the reader's "truncated ...; reading the complete prefix" warning where the caller
    expects a torn tail and reports it itself (sealing an orphan, reading the open segment)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "reading the complete prefix" not in record.getMessage()


@contextlib.contextmanager
def quiet_truncation() -> Iterator[None]:
    """Within the block, the reader does not warn about a truncated tail (the caller expects it
    and reports it)."""
    log = logging.getLogger("shadow.trace.reader")
    f = _QuietTruncation()
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)


def _discard_stale_temporaries(final: str) -> None:
    """Remove the temporaries an earlier seal of ``final`` left when it was killed (the caller
    holds the stream's lock, so no seal of it is running)."""
    from shadow.atomic import TMP_PREFIX, discard, temp_name_prefix

    directory, name = os.path.split(final)
    stem = temp_name_prefix(name, TMP_PREFIX)
    for n in os.listdir(directory or "."):
        if n.startswith(stem):
            discard(os.path.join(directory, n))


def seal_segment(path: str) -> tuple[int, bool]:
    """Rewrite orphaned ``<name>.partial`` as ``<name>`` (its complete requests, counts valid,
    :data:`SEALED_MARK` after the producer), then remove it; ``(requests kept, whether a torn
    tail was dropped)``.

    The caller holds the stream's lock.  The new file goes through a temporary and a rename, so
    a kill while sealing leaves the ``.partial`` as it was; when ``<name>`` exists already (a
    seal killed after its rename) the ``.partial`` is only removed.  An orphan without a
    complete request is removed.
    """
    from shadow.atomic import create_temp, discard
    from shadow.trace.format import PRODUCER_SIZE
    from shadow.trace.reader import LcpReader
    from shadow.trace.writer import LcpWriter

    seg = parse_segment(path)
    final = seg.final_path if seg is not None else path[:-len(PARTIAL_SUFFIX)]
    _discard_stale_temporaries(final)
    if os.path.exists(final):
        os.unlink(path)
        return 0, False
    with quiet_truncation(), LcpReader(path, allow_truncated=True, decode_threads=0) as r:
        h = r.header
        producer = h.producer
        if not producer.endswith(SEALED_MARK) and len(
                (producer + SEALED_MARK).encode()) <= PRODUCER_SIZE:
            producer += SEALED_MARK
        tmp = create_temp(final)
        try:
            # NOTE: the writer takes the orphan's header fields (tests/connector/
            # test_recorder.py checks that every field but the counts comes through)
            w = LcpWriter(final, block_size_tokens=h.block_size_tokens, producer=producer,
                          type_names=h.type_names, compress=True, temp_path=str(tmp),
                          replica_names=h.replica_names, block_keys=h.has_block_keys,
                          version=h.version)
        except BaseException:
            discard(tmp)
            raise
        try:
            for b in r:
                w.write_batch(b)
            n = w.n_requests
            if n:
                w.close()
            else:
                w.abort()
        except BaseException:
            w.abort()
            raise
        torn = r.truncated
    if n:
        # NOTE: the sealed segment keeps the time its writer last wrote (retention ages by it)
        st = os.stat(path)
        os.utime(final, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.unlink(path)
    return n, torn


def seal_orphans(directory: str, *, own_prefix: str | None = None,
                 keep: str | None = None) -> list[tuple[str, int, bool]]:
    """Seal orphaned ``.partial`` segments in ``directory``; ``[(final path, requests kept, torn
    tail dropped)]``, one log line each.

    With ``own_prefix`` (a recorder, which holds that stream's lock): that stream's, except
    ``keep``, its own open segment.  Without: every stream whose lock this process can take now;
    a stream another process writes is left alone.
    """
    out = []
    segs = [s for s in scan_segments(directory, prefix=own_prefix)
            if s.partial and s.path != keep]
    for pfx in sorted({s.prefix for s in segs}):
        lock = StreamLock(directory, pfx)
        if own_prefix is None and not lock.acquire():
            continue
        try:
            for s in (s for s in segs if s.prefix == pfx):
                try:
                    n, torn = seal_segment(s.path)
                except Exception as exc:  # noqa: BLE001 - one bad orphan must not stop the rest
                    logger.error("shadow recording: cannot seal %s: %s", s.path, exc)
                    continue
                out.append((s.final_path, n, torn))
                logger.info("shadow recording: sealed %s (%d complete requests%s)",
                            s.final_path if n else s.path, n,
                            ", torn tail dropped" if torn else "")
        finally:
            lock.release()
    return out


#: Seconds between :func:`seal_when_gone`'s looks at the stream locks.
SEAL_POLL_S = 0.5


def open_streams(directory: str) -> set[str]:
    """The streams that have a ``.partial`` segment in ``directory`` now (one directory read)."""
    out = set()
    with os.scandir(directory) as it:
        for e in it:
            if e.name.endswith(PARTIAL_SUFFIX):
                seg = parse_segment(e.path)
                if seg is not None:
                    out.add(seg.prefix)
    return out


def seal_when_gone(directory: str, stop: threading.Event, *, poll_s: float = SEAL_POLL_S,
                   seal: Callable[[], object] | None = None) -> None:
    """Until ``stop`` is set, seal a stream's open segment as soon as its writer is gone: a
    stream with a ``.partial`` whose lock this loop saw held by another process, and then free
    (``seal``: :func:`seal_orphans` of ``directory`` by default).  A stream never seen held is
    left alone: on a file system without ``flock`` every lock reads as free, and a live writer's
    segment must not be rewritten under it."""
    seal = seal or (lambda: seal_orphans(directory))
    seen_live: set[str] = set()
    while not stop.wait(poll_s):
        try:
            gone = False
            for prefix in open_streams(directory):
                if stream_is_live(directory, prefix):
                    seen_live.add(prefix)
                elif prefix in seen_live:
                    gone = True
            if gone:
                seal()
        except OSError:
            continue   # NOTE: the directory missing or unreadable for now: look again later
