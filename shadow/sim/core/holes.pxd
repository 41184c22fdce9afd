"""PrefixSim's per-request hole lines (``--dump-holes``), written from the serve loop.

A *hole* is a run of consecutive missing blocks in a request's looked-up prefix.  One line per
served request: ``Request <index>: (idx: <start>, len: <length>) ...`` (PrefixSim's format).
"""

from libc.stdint cimport int64_t
from libc.stdio cimport FILE

cdef FILE* holes_open(str path) except NULL
cdef int holes_close(FILE* f, str path) except -1
cdef void holes_dump(FILE* f, int64_t req_index, const int64_t* slots, int64_t n) noexcept nogil
