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
