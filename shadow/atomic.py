"""Atomic file output: every output file of shadow is written here or through these functions.

A new content goes to a temporary file beside the target (same directory, so the rename stays on
one file system), is fsynced, gets its permission bits, and is renamed over the target; then the
directory is fsynced.

Invariants:

* The target holds its previous content or the complete new content, never a part of it.
* On any failure (an exception, Ctrl-C, SIGTERM: see :mod:`shadow.signals`) the temporary is
  removed again; only SIGKILL or a power loss can leave one, and its name starts with
  :data:`TMP_PREFIX` (``.tmp-<target name>.<random>``).
* A target that exists keeps its permission bits (and owner, where this process may set it);
  a new one gets ``0666`` less the umask, as :func:`open` would give it.
* An OSError on the output (ENOENT, ENOTDIR, EACCES, EROFS, ENOSPC, EFBIG, EDQUOT) is raised as
  :class:`shadow.errors.OutputError`: one line naming the target's path and the reason.

The lcp writer keeps its own temporary (``<name>.partial`` for the connector's recorder, which must
stay readable after a crash) and commits it with :func:`commit`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from shadow.errors import OutputError
from shadow.signals import deferred

log = logging.getLogger(__name__)

#: Prefix of every temporary name this module makes (a resumable writer may sweep these away).
TMP_PREFIX = ".tmp-"

#: Errors that only writing produces: an OSError with one of these and no other file's name,
#: raised while an output is open, is that output's (see :func:`atomic_path`).
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EFBIG: "file too large (past the file-size limit, `ulimit -f`)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EISDIR: "is a directory",
    errno.ENAMETOOLONG: "file name too long",
}

_NAME_ROOM = 160   # characters of the target's name kept in a temporary's name (NAME_MAX 255)


def output_error(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    """``exc`` (raised while writing ``path``) as one line: ``PATH: cannot write: REASON``."""
    if isinstance(exc, OutputError):
        return exc
    target = Path(path)
    code = exc.errno
    reason: str | None = None
    # NOTE: os.path's tests, not Path's: they never raise (Path.exists raises on EACCES)
    if code == errno.ENOENT and not os.path.isdir(target.parent):
        reason = f"directory {target.parent} does not exist"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in (target.parent, *target.parent.parents)
                        if os.path.exists(p) and not os.path.isdir(p)), None)
        reason = f"{blocker} is not a directory" if blocker is not None else None
    if reason is None:
        reason = _REASONS.get(code) or (exc.strerror or str(exc)).lower()
    return OutputError(f"{target}: cannot write: {reason}", errno=code, reason=reason,
                       path=str(target))


def is_output_error(exc: BaseException, tmp: str | os.PathLike[str] | None = None) -> bool:
    """True when ``exc`` is an OSError about the output being written to ``tmp``: it names
    ``tmp`` or no file, and it is one that only writing produces (or it names ``tmp``)."""
    if not isinstance(exc, OSError) or isinstance(exc, OutputError):
        return False
    if tmp is not None and exc.filename is not None and os.fspath(exc.filename) == os.fspath(tmp):
        return True
    return exc.filename is None and exc.errno in WRITE_ERRNOS


def _umask() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # NOTE: the only portable read of the umask sets it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _resolve(path: str | os.PathLike[str]) -> Path:
    """The file a commit replaces: a symbolic link's target (the link stays a link); an
    existing target that is not a regular file (a device such as /dev/null, a FIFO, a directory)
    cannot be replaced by a rename and is refused."""
    target = Path(path)
    if os.path.islink(target):
        target = Path(os.path.realpath(target))
    try:
        st = os.stat(target)
    except OSError:
        return target
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise OutputError(f"{path}: cannot write: {kind} (an output is renamed into place)",
                          errno=errno.EINVAL, reason=kind, path=os.fspath(path))
    return target


def temp_name_prefix(name: str, prefix: str = TMP_PREFIX) -> str:
    """How the names of :func:`create_temp`'s temporaries for a target called ``name`` begin."""
    return f"{prefix}{name[:_NAME_ROOM]}."


def create_temp(path: str | os.PathLike[str], *, suffix: str = "",
                prefix: str = TMP_PREFIX) -> Path:
    """Create a new, empty temporary file beside ``path`` (exclusive, mode 0600 until
    :func:`commit`) and return its path.  Raises :class:`OutputError` naming ``path``."""
    target = _resolve(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_name_prefix(target.name, prefix), suffix=suffix,
                                   dir=target.parent)
    except OSError as exc:
        raise output_error(path, exc) from None
    os.close(fd)
    return Path(tmp)


def discard(tmp: str | os.PathLike[str] | None) -> None:
    """Remove a temporary (gone already is fine; a failure is logged, never raised)."""
    if tmp is None:
        return
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove the temporary %s: %s", tmp, exc.strerror)


def _sync_dir(directory: Path) -> None:
    # NOTE: makes the rename durable; some file systems cannot fsync a directory (EINVAL), and
    # the rename is done by then: a failure here is not the output's.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _set_mode(tmp: Path, target: Path) -> None:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        os.chmod(tmp, 0o666 & ~_umask())
        return
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    own = os.stat(tmp)
    if (own.st_uid, own.st_gid) != (st.st_uid, st.st_gid):
        with contextlib.suppress(PermissionError):
            os.chown(tmp, st.st_uid, st.st_gid)


def commit(tmp: str | os.PathLike[str], path: str | os.PathLike[str], *,
           sync: bool = True) -> None:
    """Make the complete temporary ``tmp`` the content of ``path``: fsync it (unless the writer
    did, ``sync=False``), give it ``path``'s mode, rename it, fsync the directory.  On failure
    ``tmp`` is removed and :class:`OutputError` names ``path``."""
    tmp = Path(tmp)
    try:
        target = _resolve(path)
    except OutputError:
        discard(tmp)
        raise
    try:
        with deferred():
            if sync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            _set_mode(tmp, target)
            os.replace(tmp, target)
    except OSError as exc:
        discard(tmp)
        raise output_error(path, exc) from None
    except BaseException:
        discard(tmp)
        raise
    _sync_dir(target.parent)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Fail now, before a long run, if ``path`` could not be written (its directory is missing,
    not a directory, read-only): create and remove a temporary beside it.  A full disk shows
    only when the output is written."""
    discard(create_temp(path))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, suffix: str = "", prefix: str = TMP_PREFIX,
                parents: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; commit it to ``path`` when the block ends.

    ``suffix`` keeps a file type visible to writers that go by the extension (matplotlib).
    ``parents``: create missing parent directories first (``False``: a missing directory is an
    :class:`OutputError`).  An OSError from the block that is about the output (see
    :func:`is_output_error`) is raised as :class:`OutputError` naming ``path``.
    """
    target = Path(path)
    if parents:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise output_error(target, exc) from None
    tmp: Path | None = None
    try:
        with deferred():
            tmp = create_temp(target, suffix=suffix, prefix=prefix)
        yield tmp
    except BaseException as exc:
        # NOTE: BaseException so that Ctrl-C or SIGTERM in the middle of a write leaves no file.
        discard(tmp)
        if is_output_error(exc, tmp):
            raise output_error(target, exc) from None
        raise
    commit(tmp, target)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", *, append: bool = False,
                parents: bool = True, **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary beside ``path`` for writing (``mode`` "w" or "wb"; ``kwargs`` go to
    :func:`open`); commit it to ``path`` when the block ends.

    ``append``: the temporary starts as a copy of ``path``'s current content (when it exists), so
    the block appends (in text mode a last line without its newline gets one); the target still
    changes only as a whole.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode {mode!r} (w or wb)")
    with atomic_path(path, parents=parents) as tmp:
        with open(tmp, mode, **kwargs) as f:
            if append:
                _copy_for_append(path, f.buffer if mode == "w" else f, text=mode == "w")
            yield f


def _copy_for_append(path: str | os.PathLike[str], out: IO[bytes], *, text: bool) -> None:
    try:
        with open(path, "rb") as old:
            data = old.read()
    except FileNotFoundError:
        return
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise OutputError(f"{path}: cannot read it to append to it: {reason}", errno=exc.errno,
                          reason=reason, path=os.fspath(path)) from None
    out.write(data)
    if text and data and not data.endswith(b"\n"):
        out.write(b"\n")


def atomic_write_text(path: str | os.PathLike[str], text: str, *, prefix: str = TMP_PREFIX,
                      parents: bool = True) -> None:
    """Write ``text`` (UTF-8, newlines untranslated) to ``path`` atomically."""
    with atomic_path(path, prefix=prefix, parents=parents) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
