"""`shadow convert` refuses bad input with one line naming the file and the place, exit status 2,
no traceback, and no output (neither OUT nor OUT.partial): damaged lcp inputs to every output
kind, hostile JSONL numbers and lines, bad segments and arguments (a table: one row per case,
see tests/trace/bad_inputs.py)."""

from __future__ import annotations

import pytest

from tests.trace import bad_inputs as bi
from tests.tiers import by_name, unit_rows


def _refused_and_nothing_written(tmp_path, args: list[str], words: list[str]) -> None:
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("convert", *args), words)
    assert bi.listing(tmp_path) == before


@pytest.mark.parametrize("out", unit_rows(["out.lcp.zst", "out.jsonl"], 2))
@pytest.mark.parametrize("name,damage", unit_rows(bi.LCP_DAMAGE, 27, ids=by_name))
def test_damaged_lcp(name, damage, out, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage)
    _refused_and_nothing_written(tmp_path, [str(path), str(tmp_path / out)], words)


@pytest.mark.parametrize("name,damage", unit_rows(bi.ZST_DAMAGE, 6, ids=by_name))
def test_damaged_lcp_zst(name, damage, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage, "bad.lcp.zst")
    _refused_and_nothing_written(tmp_path, [str(path), str(tmp_path / "out.lcp")], words)


@pytest.mark.slow
def test_indexed_frames_with_right_checksums(tmp_path):
    path, words = bi.writer_made(tmp_path)
    _refused_and_nothing_written(tmp_path, [str(path), str(tmp_path / "out.lcp")], words)


SEGMENT_DAMAGE = [(n, d) for n, d in bi.LCP_DAMAGE if n in (
    "type id past the table", "user id past n_users", "block id 2**63", "next access -2",
    "cut inside a request", "flag bit 4")]


@pytest.mark.parametrize("name,damage", unit_rows(SEGMENT_DAMAGE, 6, first=3, ids=by_name))
def test_damaged_second_segment(name, damage, lcp_base, tmp_path):
    first = tmp_path / "seg1.lcp"
    first.write_bytes(lcp_base.data)
    path, words = bi.damaged(tmp_path, lcp_base, damage, "seg2.lcp")
    _refused_and_nothing_written(tmp_path, [str(first), str(path), str(tmp_path / "j.lcp")],
                                 words)


@pytest.mark.parametrize("name,line,options,words", unit_rows(bi.JSONL_CASES, 30, ids=by_name))
def test_hostile_jsonl(name, line, options, words, tmp_path):
    src = bi.jsonl_file(tmp_path, line)
    _refused_and_nothing_written(tmp_path, [*options, str(src), str(tmp_path / "o.lcp.zst")],
                                 [f"{src}:2: ", *words])


ARGS = [
    ("one path", ["{d}/base.lcp"], ["need at least one input and one output"]),
    ("no path", [], ["Missing argument 'PATHS...'"]),
    ("output of no known kind", ["{d}/base.lcp", "{d}/o.txt"], ["o.txt: cannot tell the"
                                                                " output format"]),
    ("no such input", ["{d}/nope.jsonl", "{d}/o.lcp"], ["nope.jsonl: no such file"]),
    ("input a directory", ["{d}/sub", "{d}/o.lcp"], ["is a directory"]),
    ("empty input", ["{d}/empty.jsonl", "{d}/o.lcp"], ["empty.jsonl: empty file"]),
    ("binary input", ["{d}/garbage.bin", "{d}/o.lcp"], ["garbage.bin: not a trace"]),
    ("blank JSONL", ["{d}/blank.jsonl", "{d}/o.lcp"], ["blank.jsonl: no requests"]),
    ("output is the input", ["{d}/base.lcp", "{d}/base.lcp"], ["output is also an input"]),
    ("JSONL among segments", ["{d}/base.lcp", "{d}/good.jsonl", "{d}/o.lcp"],
     ["several inputs must all be lcp segments"]),
    ("segments with other type tables", ["{d}/base.lcp", "{d}/other_types.lcp", "{d}/o.lcp"],
     ["other_types.lcp: request type table"]),
    ("--block-id raw on lcp", ["--block-id", "raw", "{d}/base.lcp", "{d}/o.lcp"],
     ["--block-id raw applies to JSONL input only"]),
    ("--frame-size 4X", ["--frame-size", "4X", "{d}/good.jsonl", "{d}/o.lcp.zst"],
     ["frame size"]),
    ("--frame-size -1", ["--frame-size", "-1", "{d}/good.jsonl", "{d}/o.lcp.zst"],
     ["frame size"]),
    ("--level 0", ["--level", "0", "{d}/good.jsonl", "{d}/o.lcp.zst"], ["--level"]),
    ("--level 20", ["--level", "20", "{d}/good.jsonl", "{d}/o.lcp.zst"], ["--level"]),
    ("--block-size 0", ["--block-size", "0", "{d}/good.jsonl", "{d}/o.lcp"], ["--block-size"]),
    ("--block-size x", ["--block-size", "x", "{d}/good.jsonl", "{d}/o.lcp"], ["--block-size"]),
    ("--block-size 2**32", ["--block-size", "4294967296", "{d}/good.jsonl", "{d}/o.lcp"],
     ["'--block-size': 4294967296 is not in the range 1<=x<=4294967295"]),
    ("--time-unit h", ["--time-unit", "h", "{d}/good.jsonl", "{d}/o.lcp"], ["'h' is not one of"]),
    ("unknown option", ["--bogus", "{d}/good.jsonl", "{d}/o.lcp"], ["No such option '--bogus'"]),
]


@pytest.mark.parametrize("name,args,words", unit_rows(ARGS, 11, first=5, ids=by_name))
def test_bad_arguments(name, args, words, lcp_base, tmp_path):
    from shadow.trace import LcpWriter

    (tmp_path / "base.lcp").write_bytes(lcp_base.data)
    (tmp_path / "sub").mkdir()
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)))
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    (tmp_path / "good.jsonl").write_text('{"timestamp": 1, "hash_ids": [1, 2]}\n')
    with LcpWriter(str(tmp_path / "other_types.lcp"), type_names=["chat"]) as w:
        w.write_request({"complete_time_us": 1, "type_id": 1}, [1])
    _refused_and_nothing_written(tmp_path, [a.replace("{d}", str(tmp_path)) for a in args], words)
