"""The JSONL fast path (Cython scanner) against the orjson path, and the intern table against a
dict, across buffer refills and table growth."""

from __future__ import annotations

import json
import random

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.errors import ShadowError
from shadow.trace import _lcp, _scan, jsonl
from shadow.trace.jsonl import JsonlReader


def _slow_scan(buf, pos, end, at_eof, lineno, rows, times, n_rows, ids, n_ids, *rest):
    """Stand-in scanner that sends every line to the orjson path."""
    st = _scan.SCAN_SLOW if pos < end else _scan.SCAN_NEED_INPUT
    return st, pos, lineno, n_rows, n_ids, 0, False


def _read_both(path, monkeypatch, **kw):
    fast = JsonlReader(str(path), **kw)
    a = fast.read()
    with monkeypatch.context() as m:
        m.setattr(_scan, "scan", _slow_scan)
        slow = JsonlReader(str(path), **kw)
        b = slow.read()
    assert slow.n_slow_lines > 0
    return fast, a, b


def _assert_same(a, b):
    assert a.records.tobytes() == b.records.tobytes()
    assert np.array_equal(a.offsets, b.offsets)
    assert np.array_equal(a.block_ids, b.block_ids)
    assert a.type_names == b.type_names
    assert a.block_size_tokens == b.block_size_tokens


def test_bundled_trace_takes_the_fast_path(synthetic_jsonl, monkeypatch):
    fast, a, b = _read_both(synthetic_jsonl, monkeypatch)
    assert fast.n_slow_lines == 0
    _assert_same(a, b)


def test_buffer_refills_and_long_lines(tmp_path, monkeypatch):
    # tiny read size, id and row arrays: lines straddle reads, a line outgrows the id array
    rng = random.Random(7)
    rows = []
    for i in range(300):
        n = rng.choice([0, 1, 3, 40, 300])
        rows.append({"timestamp": i, "input_length": 16 * n,
                     "hash_ids": [rng.randrange(50) for _ in range(n)]})
    src = tmp_path / "t.jsonl"
    src.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))  # no final newline
    ref = JsonlReader(str(src)).read()
    monkeypatch.setattr(jsonl, "READ_BYTES", 97)
    monkeypatch.setattr(jsonl, "CHUNK_IDS", 64)
    monkeypatch.setattr(jsonl, "CHUNK_LINES", 7)
    fast, a, b = _read_both(src, monkeypatch)
    assert fast.n_slow_lines == 0
    _assert_same(a, b)
    _assert_same(a, ref)
    assert a.n_requests == 300


EDGE_LINES = [
    # (line, scanner takes it)
    ('{"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521,'
     ' "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, 6326]}', True),
    ('{"timestamp": 1.5e3, "hash_ids": [1, 2]}', True),
    ('{"timestamp":-0.0,"timestamp_arrival":1E-2,"hash_ids":[]}', True),
    ('{"timestamp":0.25,"timestamp_arrival":-0,"hash_ids":[]}', True),
    ('\t{ "hash_ids" : [ 18446744073709551615 , -9223372036854775808, 0 ] , "turn" : 65535 }\r',
     True),
    ('{"chat_id": null, "parent_chat_id": -1, "session_id": 9223372036854775807,'
     ' "input_length": 4294967295, "output_length": 0, "hash_ids": [5]}', True),
    ('{"user_id": "alice", "type": "text", "hash_ids": [5], "extra": "x", "f": 1.0, "g": true,'
     ' "h": false, "i": null}', True),
    ('{"user_id": 18446744073709551615, "type": null, "hash_ids": [5]}', True),
    ('{"user_id": "bob", "type": "image", "hash_ids": [5], "nested": {"a": [1, {"b": 2}]}}',
     False),
    ('{"type": "t\\u00e9xt", "hash_ids": [5, 6]}', False),
    ('{"type": "caf\u00e9", "hash_ids": [5]}', False),
    ('{"hash_ids": [1], "hash_ids": [2, 3]}', False),
    ('{"timestamp": 3, "timestamp": 4.5, "hash_ids": [1]}', False),
    ('{"user_id": "a\\"b", "hash_ids": [7]}', False),
    ('  ', True),
    ('{"hash_ids": [1], "turn": 0, "k\\u0065y": 1}', False),
]


@pytest.mark.parametrize("line,fast", EDGE_LINES)
def test_edge_lines_same_as_orjson(tmp_path, monkeypatch, line, fast):
    src = tmp_path / "e.jsonl"
    src.write_text('{"timestamp": 0, "hash_ids": [1]}\n' + line + '\n{"timestamp": 2,'
                   ' "type": "text", "hash_ids": [1, 2]}\n', encoding="utf-8")
    r, a, b = _read_both(src, monkeypatch)
    assert (r.n_slow_lines == 0) == fast
    _assert_same(a, b)


@pytest.mark.parametrize("line,message", [
    ('{"timestamp": 1, "hash_ids": [1, 18446744073709551616]}', "hash_ids holds 1.84"),
    ('{"timestamp": 1, "hash_ids": [1, -9223372036854775809]}', "hash_ids holds -9.22"),
    ('{"timestamp": true, "hash_ids": [1]}', "timestamp is True"),
    ('{"timestamp": -0.25, "hash_ids": [1]}', "timestamp -0.25 is negative"),
    ('{"timestamp_arrival": -1, "hash_ids": [1]}', "timestamp_arrival -1 is negative"),
    ('{"timestamp": 9223372036854775808, "hash_ids": [1]}', "timestamp 9223372036854775808 is"
                                                           " too large"),
    ('{"timestamp": 1e400, "hash_ids": [1]}', "invalid JSON"),
    ('{"timestamp": 1, "hash_ids": [1,]}', "invalid JSON"),
    ('{"timestamp": 01, "hash_ids": [1]}', "invalid JSON"),
    ('{"timestamp": 1, "hash_ids": [1]} x', "invalid JSON"),
    ('{"timestamp": 1, "hash_ids": [1], "user_id": [2]}', "user_id is [2]"),
    ('{"timestamp": 1, "hash_ids": [1], "chat_id": 1.5}', "chat_id is 1.5"),
    ('{"timestamp": 1, "hash_ids": [1], "output_length": 4294967296}',
     "output_length 4294967296 out of range"),
    ('{"timestamp": 1, "hash_ids": [1], "type": "' + "x" * 33 + '"}', "longer than 32 bytes"),
    ('{"timestamp": 1}', "missing hash_ids"),
    ('{}', "missing hash_ids"),
])
def test_errors_name_the_line(tmp_path, line, message):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"timestamp": 0, "hash_ids": [1]}\n\n' + line + "\n")
    with pytest.raises(ShadowError, match=rf"bad.jsonl:3: .*{message}".replace("[", r"\[")):
        JsonlReader(str(src)).read()


_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
_row = st.fixed_dictionaries(
    {"hash_ids": st.lists(st.integers(-2**63, 2**64 - 1) | st.integers(0, 20), max_size=6)},
    optional={"timestamp": st.integers(0, 10**12) | st.floats(0, 1e9),
              "timestamp_arrival": st.none() | st.integers(0, 10**9) | st.floats(0, 1e9),
              "chat_id": st.none() | st.integers(-2**63, 2**63 - 1),
              "parent_chat_id": st.integers(-1, 10),
              "session_id": st.integers(0, 5), "turn": st.integers(0, 65535),
              "input_length": st.integers(0, 2**32 - 1), "output_length": st.integers(0, 500),
              "user_id": st.none() | st.integers(-5, 5) | st.sampled_from(["u1", "u2", "\u00fc"]),
              "type": st.none() | st.sampled_from(["text", "image", "t\"q", "\u00e9"]),
              "other": _scalar, "nested": st.lists(st.integers(-2**63, 2**63 - 1), max_size=2)})


def _dump(row, style):
    if style == 0:
        return orjson.dumps(row).decode()
    if style == 1:
        return json.dumps(row)
    if style == 2:
        return json.dumps(row, separators=(" ,", " :  "), ensure_ascii=False)
    return " \t" + json.dumps(row, separators=(",", ":")) + " \r"


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_row, st.integers(0, 3)), min_size=1, max_size=25),
       blank=st.booleans())
def test_hypothesis_fast_equals_orjson(tmp_path_factory, monkeypatch, rows, blank):
    src = tmp_path_factory.mktemp("s") / "h.jsonl"
    lines = [_dump(r, s) for r, s in rows]
    if blank:
        lines.insert(len(lines) // 2, "   ")
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    fast = JsonlReader(str(src), time_unit="ms")
    a = fast.read()
    with monkeypatch.context() as m:
        m.setattr(_scan, "scan", _slow_scan)
        b = JsonlReader(str(src), time_unit="ms").read()
    _assert_same(a, b)


# -- intern table ----------------------------------------------------------------------------
def _reference_intern(reqs, prefix):
    table, out, multi, first_parent = {}, [], set(), {}
    for r in reqs:
        parent = 0
        row = []
        for x in r:
            key = (parent, x) if prefix else x
            v = table.setdefault(key, len(table) + 1)
            if not prefix:
                fp = first_parent.setdefault(v, parent)
                if fp != parent:
                    multi.add(v)
            row.append(v)
            parent = v
        out.append(row)
    return out, len(multi)


@pytest.mark.slow
@pytest.mark.parametrize("prefix", [True, False])
def test_intern_table_across_growth(prefix):
    rng = random.Random(3)
    # shared prefixes, ids near 0 and near 2**64, many doublings from the smallest table
    reqs = []
    for _ in range(6000):
        base = reqs[rng.randrange(len(reqs))][:rng.randrange(8)] if reqs else []
        tail = [rng.choice([rng.randrange(40), 2**64 - 1 - rng.randrange(40),
                            rng.randrange(2**64)]) for _ in range(rng.randrange(12))]
        reqs.append(base + tail)
    table = _lcp.InternTable(1, not prefix)
    got = []
    for k in range(0, len(reqs), 700):  # several chunks, like the reader's flushes
        chunk = reqs[k:k + 700]
        raw = np.array([x for r in chunk for x in r], dtype=np.uint64)
        offs = np.zeros(len(chunk) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in chunk], out=offs[1:])
        out = np.empty(raw.shape[0], dtype=np.int64)
        table.intern_requests(raw, offs, out, prefix)
        got += [out[offs[i]:offs[i + 1]].tolist() for i in range(len(chunk))]
    want, n_multi = _reference_intern(reqs, prefix)
    assert got == want
    assert table.n == max(max(r, default=0) for r in want) > 8 * 640  # 1024 slots at first
    if not prefix:
        assert table.n_multi_parent == n_multi > 0
