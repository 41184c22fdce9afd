"""Decode one whole zstd frame straight into a caller's buffer, through the system libzstd.

python-zstandard's ``ZstdDecompressor.decompress()`` returns a fresh bytes object per frame.  The
frame decoder's threads then allocate a few MiB per frame from their malloc arenas, which give
the pages back to the kernel when the frame is freed, so every frame faults its pages in again:
about a fifth of the decode CPU time (docs/performance.md, "Trace layer").  This module calls
libzstd's one-shot ``ZSTD_decompressDCtx`` through ctypes (which releases the GIL for the call)
so frames decode into buffers that are reused.

It is optional: :func:`available` is False when no libzstd >= 1.4 can be loaded (or
``$SHADOW_ZSTD_DIRECT=0``), and the reader then uses python-zstandard.  One-shot decoding checks
the frame's content checksum, as python-zstandard does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading

#: Set to 0 to decode with python-zstandard only.
DIRECT_ENV = "SHADOW_ZSTD_DIRECT"
_MIN_VERSION = 10400

_lib = None
_tried = False
_lock = threading.Lock()


class DirectError(Exception):
    """libzstd rejected a frame (corrupt data, checksum mismatch, output too small)."""


def _names():
    # NOTE: the usual soname first: find_library() runs ldconfig (tens of ms)
    yield "libzstd.so.1"
    yield ctypes.util.find_library("zstd")


def _load():
    for name in _names():
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.ZSTD_versionNumber.restype = ctypes.c_uint
            if lib.ZSTD_versionNumber() < _MIN_VERSION:
                continue
            lib.ZSTD_createDCtx.restype = ctypes.c_void_p
            lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
            lib.ZSTD_freeDCtx.restype = ctypes.c_size_t
            lib.ZSTD_decompressDCtx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.c_void_p, ctypes.c_size_t]
            lib.ZSTD_decompressDCtx.restype = ctypes.c_size_t
            lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
            lib.ZSTD_isError.restype = ctypes.c_uint
            lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
            lib.ZSTD_getErrorName.restype = ctypes.c_char_p
            return lib
        except (OSError, AttributeError):
            continue
    return None


def available() -> bool:
    """True when frames can be decoded through libzstd (loaded once, on first use)."""
    global _lib, _tried
    if os.environ.get(DIRECT_ENV, "").strip() == "0":
        return False
    with _lock:
        if not _tried:
            _lib = _load()
            _tried = True
    return _lib is not None


class FrameDecoder:
    """One libzstd decompression context; use it from one thread at a time."""

    def __init__(self) -> None:
        if not available():
            raise RuntimeError("libzstd is not available")
        self._lib = _lib
        self._dctx = self._lib.ZSTD_createDCtx()
        if not self._dctx:
            raise MemoryError("ZSTD_createDCtx failed")

    def __del__(self) -> None:
        if getattr(self, "_dctx", None):
            self._lib.ZSTD_freeDCtx(self._dctx)
            self._dctx = None

    def decode(self, src: bytearray, n_src: int, dst: bytearray, capacity: int) -> int:
        """Decode the frame(s) in ``src[:n_src]`` into ``dst[:capacity]``; return the size."""
        if n_src > len(src) or capacity > len(dst):
            raise ValueError("size larger than the buffer")
        s = (ctypes.c_char * len(src)).from_buffer(src)
        d = (ctypes.c_char * len(dst)).from_buffer(dst)
        try:
            r = self._lib.ZSTD_decompressDCtx(self._dctx, ctypes.addressof(d), capacity,
                                              ctypes.addressof(s), n_src)
        finally:
            del s, d   # NOTE: release the exports, so the buffers may be resized or freed
        if self._lib.ZSTD_isError(r):
            raise DirectError(self._lib.ZSTD_getErrorName(r).decode("ascii", "replace"))
        return int(r)
