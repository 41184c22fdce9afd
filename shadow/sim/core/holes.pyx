# cython: language_level=3
"""See core/holes.pxd: the hole-line writer of ``shadow simulate --dump-holes``."""

import os

from libc.errno cimport errno, EIO
from libc.stdint cimport int64_t
from libc.stdio cimport FILE, fopen, fclose, fflush, fprintf, ferror


cdef FILE* holes_open(str path) except NULL:
    """Open ``path`` for writing hole lines (the caller renames it into place when done)."""
    cdef FILE* f = fopen(os.fsencode(path), b"w")
    if f == NULL:
        raise OSError(errno, os.strerror(errno), path)
    return f


cdef int holes_close(FILE* f, str path) except -1:
    """Close ``f``; OSError if any write or the final flush failed (a full disk).

    NOTE: ``fprintf`` reports nothing per call here (the loop cannot raise).  glibc keeps the
    unwritten buffer after a failed write and tries it again at the flush, whose errno is the
    real reason; an ``errno`` read after ``ferror`` alone would be stale.
    """
    cdef int err = 0
    if fflush(f) != 0:
        err = errno
    elif ferror(f):
        err = EIO            # an earlier write failed and its errno is gone
    if fclose(f) != 0 and err == 0:
        err = errno
    if err:
        raise OSError(err, os.strerror(err), path)
    return 0


cdef void holes_dump(FILE* f, int64_t req_index, const int64_t* slots, int64_t n) noexcept nogil:
    """One request's line: each run of ``slots[i] < 0`` (a miss) in ``slots[0:n]``."""
    cdef int64_t i = 0, start
    fprintf(f, b"Request %lld:", <long long>req_index)
    while i < n:
        if slots[i] < 0:
            start = i
            while i < n and slots[i] < 0:
                i += 1
            fprintf(f, b" (idx: %lld, len: %lld)", <long long>start, <long long>(i - start))
        else:
            i += 1
    fprintf(f, b"\n")
