"""User-facing errors.

A :class:`ShadowError` is bad input or configuration: the CLI prints its message as one line
(``shadow: error: <message>``) and exits with status 2, never with a traceback.  Messages say what
and where: ``file:line: ...`` for text input, ``file: byte offset N: ...`` for binary input.
"""

from __future__ import annotations


class ShadowError(Exception):
    """Bad input or configuration, reported to the user as one line."""


class TraceFormatError(ShadowError):
    """A trace file that is malformed, truncated, or of the wrong format or version."""

    def __init__(self, message: str, *, n_complete_requests: int | None = None,
                 byte_offset: int | None = None) -> None:
        super().__init__(message)
        self.n_complete_requests = n_complete_requests
        self.byte_offset = byte_offset


class OutputError(ShadowError, OSError):
    """An output that cannot be written: a missing, read-only or non-directory parent, a full
    disk, a file-size limit.

    Both a :class:`ShadowError` (the CLI prints it as one line, exit 2) and an :class:`OSError`
    (``errno``, ``strerror`` the system's reason, ``filename`` the output's final path), so code
    that turns any OSError into "recording off" (the connector's recorder) keeps doing so.
    """

    def __init__(self, message: str, *, errno: int | None = None, reason: str | None = None,
                 path: str | None = None) -> None:
        OSError.__init__(self, errno, reason or message)
        self.filename = path
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (_output_error, (self.message, self.errno, self.strerror, self.filename))


def _output_error(message: str, errno: int | None, reason: str | None,
                  path: str | None) -> OutputError:
    return OutputError(message, errno=errno, reason=reason, path=path)
