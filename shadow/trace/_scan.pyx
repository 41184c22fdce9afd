"""Fast path of the JSONL reader: one request per line, scanned from raw bytes into flat arrays.

The scanner accepts only lines it fully validates as JSON objects of the usual trace shape: keys
without escapes, ``hash_ids`` a list of integers, the known scalar fields numbers / null (``type``
and ``user_id`` strings without escapes; timestamps in [0, 2**63)), unknown keys with a scalar
value.  Anything else (a nested unknown value, an escape, a non-ASCII key, a value out of range,
a duplicate known key, bad JSON) stops the scan with :data:`SCAN_SLOW` at that line, and the
caller handles the line with orjson, which either accepts it or produces the exact error message.
So the fast path never decides about an error, and what it accepts it reads exactly as orjson
would.

Invariant: after a call, ``rows[:n_rows]`` / ``times[:n_rows]`` hold one row per request line
scanned and ``ids[:n_ids]`` their raw ids (64-bit patterns) in line order; ``pos`` is the start
of the first line not consumed and ``lineno`` the 1-based number of that line.
"""

from cpython.ref cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint64_t, uint8_t
from libc.string cimport memcmp, memchr
from libc.math cimport NAN, isfinite

cdef extern from "Python.h":
    # NOTE: the exception argument is a raw pointer so NULL can be passed: with NULL an overflow
    # returns +-HUGE_VAL (refused below by isfinite); Cython's ``None`` for an ``object`` argument
    # made CPython raise None itself, a SystemError, on a timestamp such as 1e400.
    double PyOS_string_to_double(const char *s, char **endptr,
                                 PyObject *overflow_exception) except? -1.0

# row columns (int64); the caller reads them by these indices
COL_LINENO = 0
COL_NB = 1
COL_CHAT = 2
COL_PARENT = 3
COL_SESSION = 4
COL_INPUT = 5
COL_OUTPUT = 6
COL_TURN = 7
COL_USER = 8
COL_TYPE = 9
N_COLS = 10
# times columns (float64, NaN = missing)
TCOL_TS = 0
TCOL_ARRIVAL = 1
#: Timestamps are taken in [0, TIME_LIMIT): 2**63, past the int64 microseconds of lcp in every unit.
cdef double TIME_LIMIT = 9223372036854775808.0
MAX_TIMESTAMP = TIME_LIMIT

cdef enum:
    S_NEED_INPUT = 0   # the rest of the buffer is an incomplete line: read more (or EOF)
    S_ROWS_FULL = 1    # rows are full: flush, then call again
    S_IDS_FULL = 2     # the line at pos does not fit the ids left: flush (or grow), call again
    S_SLOW = 3         # the line at pos needs the orjson path
SCAN_NEED_INPUT = S_NEED_INPUT
SCAN_ROWS_FULL = S_ROWS_FULL
SCAN_IDS_FULL = S_IDS_FULL
SCAN_SLOW = S_SLOW

# field codes (bit positions of the seen mask)
cdef enum:
    F_UNKNOWN = -1
    F_HASH = 0
    F_TS = 1
    F_ARRIVAL = 2
    F_CHAT = 3
    F_PARENT = 4
    F_SESSION = 5
    F_INPUT = 6
    F_OUTPUT = 7
    F_TURN = 8
    F_USER = 9
    F_TYPE = 10

# number kinds
cdef enum:
    N_BAD = 0
    N_INT = 1       # fits int64 (value in *iv)
    N_UINT = 2      # 2**63 <= value < 2**64 (bit pattern in *iv)
    N_FLOAT = 3     # has a fraction or exponent
    N_BIG = 4       # an integer beyond 64 bits


cdef inline bint _ws(uint8_t c) noexcept nogil:
    return c == 32 or c == 9 or c == 13


cdef inline int _field(const uint8_t *k, Py_ssize_t n) noexcept nogil:
    # NOTE: compared by length first; the ten names have few equal lengths
    if n == 8:
        if memcmp(k, b"hash_ids", 8) == 0:
            return F_HASH
    elif n == 9:
        if memcmp(k, b"timestamp", 9) == 0:
            return F_TS
    elif n == 17:
        if memcmp(k, b"timestamp_arrival", 17) == 0:
            return F_ARRIVAL
    elif n == 7:
        if memcmp(k, b"chat_id", 7) == 0:
            return F_CHAT
        if memcmp(k, b"user_id", 7) == 0:
            return F_USER
    elif n == 14:
        if memcmp(k, b"parent_chat_id", 14) == 0:
            return F_PARENT
    elif n == 10:
        if memcmp(k, b"session_id", 10) == 0:
            return F_SESSION
    elif n == 12:
        if memcmp(k, b"input_length", 12) == 0:
            return F_INPUT
    elif n == 13:
        if memcmp(k, b"output_length", 13) == 0:
            return F_OUTPUT
    elif n == 4:
        if memcmp(k, b"turn", 4) == 0:
            return F_TURN
        if memcmp(k, b"type", 4) == 0:
            return F_TYPE
    return F_UNKNOWN


cdef inline Py_ssize_t _number(const uint8_t *p, Py_ssize_t i, Py_ssize_t e, int *kind,
                               int64_t *iv) noexcept nogil:
    """Scan a JSON number at p[i]; returns the index after it (kind N_BAD: not a number)."""
    cdef bint neg = False
    cdef uint64_t v = 0
    cdef uint64_t d
    cdef bint big = False
    cdef bint frac = False
    cdef Py_ssize_t s
    kind[0] = N_BAD
    if i < e and p[i] == 45:  # '-'
        neg = True
        i += 1
    if i >= e:
        return i
    if p[i] == 48:  # '0': no leading zeros
        i += 1
    elif 49 <= p[i] <= 57:
        # NOTE: 19 digits cannot overflow 64 bits: no check in the common loop
        s = i + 19 if e - i > 19 else e
        while i < s and 48 <= p[i] <= 57:
            v = v * 10 + (p[i] - 48)
            i += 1
        while i < e and 48 <= p[i] <= 57:
            d = p[i] - 48
            if v > (<uint64_t>0xFFFFFFFFFFFFFFFF - d) // 10:
                big = True
            else:
                v = v * 10 + d
            i += 1
    else:
        return i
    if i < e and p[i] == 46:  # '.'
        i += 1
        s = i
        while i < e and 48 <= p[i] <= 57:
            i += 1
        if i == s:
            return i
        frac = True
    if i < e and (p[i] == 101 or p[i] == 69):  # e E
        i += 1
        if i < e and (p[i] == 43 or p[i] == 45):
            i += 1
        s = i
        while i < e and 48 <= p[i] <= 57:
            i += 1
        if i == s:
            return i
        frac = True
    if frac:
        kind[0] = N_FLOAT
    elif big:
        kind[0] = N_BIG
    elif neg:
        if v > (<uint64_t>1 << 63):
            kind[0] = N_BIG
        else:
            kind[0] = N_INT
            iv[0] = <int64_t>(<uint64_t>0 - v)
    elif v >= (<uint64_t>1 << 63):
        kind[0] = N_UINT
        iv[0] = <int64_t>v
    else:
        kind[0] = N_INT
        iv[0] = <int64_t>v
    return i


cdef inline Py_ssize_t _plain_string(const uint8_t *p, Py_ssize_t i, Py_ssize_t e) noexcept nogil:
    """p[i] is just after an opening quote: index of the closing quote of a string of printable
    ASCII without escapes, or -1 (escape, control or non-ASCII byte, or the end of the line)."""
    cdef uint8_t c
    while i < e:
        c = p[i]
        if c == 34:
            return i
        if c == 92 or c < 32 or c >= 128:
            return -1
        i += 1
    return -1


cdef inline Py_ssize_t _literal(const uint8_t *p, Py_ssize_t i, Py_ssize_t e) noexcept nogil:
    """true / false / null at p[i]: the index after it, or -1."""
    if e - i >= 4 and (memcmp(&p[i], b"true", 4) == 0 or memcmp(&p[i], b"null", 4) == 0):
        return i + 4
    if e - i >= 5 and memcmp(&p[i], b"false", 5) == 0:
        return i + 5
    return -1


def scan(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, bint at_eof, int64_t lineno,
         int64_t[:, ::1] rows, double[:, ::1] times, Py_ssize_t n_rows,
         int64_t[::1] ids, Py_ssize_t n_ids, dict users, dict types, int max_types):
    """Scan lines from ``buf[pos:end]`` into ``rows[n_rows:]``, ``times[n_rows:]`` and
    ``ids[n_ids:]``.

    ``at_eof``: the buffer ends the file (a last line without a newline is complete).
    ``users`` / ``types`` map user ids (int or str) / type names to dense ids 1.. and are
    extended here (a new type beyond ``max_types`` or longer than 32 bytes goes the slow way).

    Returns ``(status, pos, lineno, n_rows, n_ids, n_float_ts, has_chat)``: a ``SCAN_*``
    status, the fill levels, how many ``timestamp`` values were JSON floats, whether a line had
    a ``chat_id`` key.
    """
    cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
    cdef Py_ssize_t cap_rows = rows.shape[0]
    cdef Py_ssize_t cap_ids = ids.shape[0]
    cdef Py_ssize_t i, e, ks, ke, n0
    cdef const uint8_t *nl
    cdef int f, kind, status = S_NEED_INPUT
    cdef int64_t iv = 0
    cdef int64_t n_float = 0
    cdef bint has_chat = False
    cdef unsigned int seen
    cdef int64_t r_chat, r_parent, r_session, r_input, r_output, r_turn, r_user, r_type
    cdef double t_ts, t_arr, dv
    cdef char *endp = NULL
    cdef bint line_chat, line_float
    cdef Py_ssize_t vs
    cdef object key, val
    if buf.shape[0] < end:
        raise ValueError("end beyond the buffer")
    while pos < end:
        nl = <const uint8_t *>memchr(&p[pos], 10, end - pos)
        if nl == NULL:
            if not at_eof:
                status = S_NEED_INPUT
                break
            e = end
        else:
            e = nl - p
        # -- one line: p[pos:e] ------------------------------------------------------------
        i = pos
        while i < e and _ws(p[i]):
            i += 1
        if i == e:  # blank line
            pos = e + 1 if e < end else e
            lineno += 1
            continue
        if n_rows >= cap_rows:
            status = S_ROWS_FULL
            break
        if p[i] != 123:  # '{'
            status = S_SLOW
            break
        i += 1
        seen = 0
        n0 = n_ids
        r_chat = -1
        r_parent = -1
        r_session = -1
        r_input = 0
        r_output = 0
        r_turn = 0
        r_user = 0
        r_type = 0
        t_ts = NAN
        t_arr = NAN
        line_chat = False
        line_float = False
        status = -1
        while i < e and _ws(p[i]):
            i += 1
        if i < e and p[i] == 125:  # '{}' has no hash_ids: slow path says so
            status = S_SLOW
        while status < 0:
            # key
            if i >= e or p[i] != 34:
                status = S_SLOW
                break
            ks = i + 1
            ke = _plain_string(p, ks, e)
            if ke < 0:
                status = S_SLOW
                break
            f = _field(&p[ks], ke - ks)
            i = ke + 1
            while i < e and _ws(p[i]):
                i += 1
            if i >= e or p[i] != 58:  # ':'
                status = S_SLOW
                break
            i += 1
            while i < e and _ws(p[i]):
                i += 1
            if i >= e:
                status = S_SLOW
                break
            if f >= 0:
                if seen & (1u << f):  # duplicate key: orjson keeps the last; let it decide
                    status = S_SLOW
                    break
                seen |= 1u << f
            if f == F_HASH:
                if p[i] != 91:  # '['
                    status = S_SLOW
                    break
                i += 1
                while i < e and _ws(p[i]):
                    i += 1
                if i < e and p[i] == 93:  # ']'
                    i += 1
                else:
                    while True:
                        i = _number(p, i, e, &kind, &iv)
                        if kind != N_INT and kind != N_UINT:
                            status = S_SLOW
                            break
                        if n_ids >= cap_ids:
                            status = S_IDS_FULL
                            break
                        ids[n_ids] = iv
                        n_ids += 1
                        while i < e and _ws(p[i]):
                            i += 1
                        if i < e and p[i] == 44:  # ','
                            i += 1
                            while i < e and _ws(p[i]):
                                i += 1
                            continue
                        if i < e and p[i] == 93:
                            i += 1
                            break
                        status = S_SLOW
                        break
                    if status >= 0:
                        break
            elif f == F_TS or f == F_ARRIVAL:
                vs = i
                i = _literal(p, i, e)
                if i >= 0:
                    if p[vs] != 110:  # true / false: slow path reports it
                        status = S_SLOW
                        break
                else:
                    i = _number(p, vs, e, &kind, &iv)
                    if kind == N_INT:
                        dv = <double>iv
                    elif kind == N_UINT:
                        dv = <double><uint64_t>iv
                    elif kind == N_FLOAT and i < e:
                        # NOTE: i < e: a byte that is not part of the number ends it in memory
                        # NOTE: correctly rounded and locale-independent, like orjson's parse
                        dv = PyOS_string_to_double(<const char *>&p[vs], &endp, NULL)
                        if endp != <char *>&p[i] or not isfinite(dv):
                            status = S_SLOW
                            break
                        if f == F_TS:
                            line_float = True
                    else:
                        status = S_SLOW
                        break
                    if not (0.0 <= dv < TIME_LIMIT):
                        # a negative time or one past any unit's range: the slow path words it
                        status = S_SLOW
                        break
                    if f == F_TS:
                        t_ts = dv
                    else:
                        t_arr = dv
            elif f == F_USER or f == F_TYPE:
                if p[i] == 34:
                    ke = _plain_string(p, i + 1, e)
                    if ke < 0:
                        status = S_SLOW
                        break
                    key = PyUnicode_DecodeUTF8(<const char *>&p[i + 1], ke - i - 1, NULL)
                    i = ke + 1
                elif f == F_USER:
                    vs = i
                    i = _literal(p, i, e)
                    if i >= 0:
                        if p[vs] != 110:
                            status = S_SLOW
                            break
                        key = None
                    else:
                        i = _number(p, vs, e, &kind, &iv)
                        if kind == N_INT:
                            key = iv
                        elif kind == N_UINT:
                            key = <uint64_t>iv
                        else:
                            status = S_SLOW
                            break
                else:
                    vs = i
                    i = _literal(p, i, e)
                    if i < 0 or p[vs] != 110:  # only a string or null here
                        status = S_SLOW
                        break
                    key = None
                if key is not None:
                    if f == F_USER:
                        val = users.get(key)
                        if val is None:
                            val = len(users) + 1
                            users[key] = val
                        r_user = val
                    else:
                        val = types.get(key)
                        if val is None:
                            # key is ASCII: its length is its UTF-8 length
                            if len(types) >= max_types or len(<str>key) > 32:
                                status = S_SLOW
                                break
                            val = len(types) + 1
                            types[key] = val
                        r_type = val
            elif f == F_UNKNOWN:
                if p[i] == 34:
                    ke = _plain_string(p, i + 1, e)
                    if ke < 0:
                        status = S_SLOW
                        break
                    i = ke + 1
                elif p[i] == 116 or p[i] == 102 or p[i] == 110:
                    i = _literal(p, i, e)
                    if i < 0:
                        status = S_SLOW
                        break
                else:
                    i = _number(p, i, e, &kind, &iv)
                    if kind == N_BAD:
                        status = S_SLOW
                        break
            else:  # the integer fields
                if f == F_CHAT:
                    line_chat = True
                vs = i
                i = _literal(p, i, e)
                if i >= 0:
                    if p[vs] != 110:
                        status = S_SLOW
                        break
                else:
                    i = _number(p, vs, e, &kind, &iv)
                    if kind != N_INT:
                        status = S_SLOW
                        break
                    if f == F_CHAT:
                        r_chat = iv
                    elif f == F_PARENT:
                        r_parent = iv
                    elif f == F_SESSION:
                        r_session = iv
                    elif f == F_TURN:
                        if iv < 0 or iv > 0xFFFF:
                            status = S_SLOW
                            break
                        r_turn = iv
                    else:
                        if iv < 0 or iv > 0xFFFFFFFF:
                            status = S_SLOW
                            break
                        if f == F_INPUT:
                            r_input = iv
                        else:
                            r_output = iv
            # after a value: ',' or '}'
            while i < e and _ws(p[i]):
                i += 1
            if i < e and p[i] == 44:
                i += 1
                while i < e and _ws(p[i]):
                    i += 1
                continue
            if i < e and p[i] == 125:
                i += 1
                while i < e and _ws(p[i]):
                    i += 1
                if i != e or not (seen & (1u << F_HASH)):
                    status = S_SLOW
                break
            status = S_SLOW
        if status >= 0:
            # NOTE: drop the ids of a line not taken.  A user or type it already added keeps
            # its dense id: the slow path reads the same value next and finds it (a value only
            # a rejected line had is a gap that annotate() renumbers away).
            n_ids = n0
            break
        rows[n_rows, 0] = lineno
        rows[n_rows, 1] = n_ids - n0
        rows[n_rows, 2] = r_chat
        rows[n_rows, 3] = r_parent
        rows[n_rows, 4] = r_session
        rows[n_rows, 5] = r_input
        rows[n_rows, 6] = r_output
        rows[n_rows, 7] = r_turn
        rows[n_rows, 8] = r_user
        rows[n_rows, 9] = r_type
        times[n_rows, 0] = t_ts
        times[n_rows, 1] = t_arr
        n_rows += 1
        if line_float:
            n_float += 1
        if line_chat:
            has_chat = True
        lineno += 1
        pos = e + 1 if e < end else e
    if pos >= end and status < 0:
        status = S_NEED_INPUT
    return status, pos, lineno, n_rows, n_ids, n_float, has_chat
