"""Cell files and the tidy CSV rebuilt from them."""

from __future__ import annotations

import csv

import pytest

from shadow.errors import ShadowError
from shadow.sweep.plan import Cell
from shadow.sweep.store import CELL_COLUMNS, SweepDir, parse_result_line, read_csv


def test_parse_result_line_keeps_order_and_spaces_in_values():
    d = parse_result_line("RESULT trace=my trace.jsonl algo=lru cache_size=8192 block_hit_ratio=0.25\n")
    assert list(d) == ["trace", "algo", "cache_size", "block_hit_ratio"]
    assert d["trace"] == "my trace.jsonl" and d["block_hit_ratio"] == "0.25"
    with pytest.raises(ValueError, match="not a RESULT line"):
        parse_result_line("lru block hit ratio 0.25")


def _cell(algo="lru", cap=1024, trace="/t/x.jsonl", cm="uniform"):
    return Cell(trace, algo, cap, cm)


def test_write_and_read_cell_round_trip(tmp_path):
    sd = SweepDir(tmp_path)
    sd.prepare()
    cell = _cell()
    path = sd.write_cell(cell, "lru   block hit ratio 0.1\nRESULT trace=x.jsonl algo=lru n_req=5 block_hit_ratio=0.1\n")
    assert path == sd.cell_path(cell) and sd.is_done(cell)
    got, rows = sd.read_cell(path)
    assert got == cell
    assert rows == [{"trace": "x.jsonl", "algo": "lru", "n_req": "5", "block_hit_ratio": "0.1"}]
    assert [p.name for p in tmp_path.joinpath("cells").iterdir()] == [cell.file_name]  # no temporaries


def test_a_cell_without_result_lines_is_not_stored(tmp_path):
    sd = SweepDir(tmp_path)
    sd.prepare()
    with pytest.raises(ShadowError, match="no RESULT line"):
        sd.write_cell(_cell(), "Traceback ...\n")
    assert not sd.is_done(_cell()) and sd.cell_files() == []


def test_prepare_drops_stray_temporaries_and_readers_ignore_them(tmp_path):
    sd = SweepDir(tmp_path)
    sd.prepare()
    stray = sd.cells_dir / ".tmp-abc123"
    stray.write_text("# cell {half written")
    assert sd.cell_files() == []
    sd.prepare()
    assert not stray.exists()


def test_csv_columns_order_and_sorting(tmp_path):
    sd = SweepDir(tmp_path)
    sd.prepare()
    for algo, cap in [("lru", 4096), ("fifo", 1024), ("lru", 1024)]:
        sd.write_cell(_cell(algo, cap), f"RESULT trace=x.jsonl algo={algo} cache_size={cap} cost_model=uniform "
                                        f"n_req=5 block_hit_ratio=0.{cap}\n")
    sd.write_cell(_cell("lru", 512, cm="position"), "RESULT trace=x.jsonl n_req=5 block_hit_ratio=0.5 extra=7\n")
    path = sd.write_csv()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
        header = rows and list(rows[0])
    assert header == CELL_COLUMNS + ["n_req", "block_hit_ratio", "extra"]
    assert [(r["cost_model"], r["algo"], r["cache_size"]) for r in rows] == [
        ("position", "lru", "512"), ("uniform", "fifo", "1024"), ("uniform", "lru", "1024"),
        ("uniform", "lru", "4096")]
    assert rows[0]["extra"] == "7" and rows[1]["extra"] == ""
    assert rows[1]["pin"] == "on" and rows[1]["trace_path"] == "/t/x.jsonl"
    assert read_csv(path) == rows


def test_bad_cell_file_error_names_file_and_line(tmp_path):
    sd = SweepDir(tmp_path)
    sd.prepare()
    bad = sd.cells_dir / "x.result"
    bad.write_text("RESULT a=1\n")
    with pytest.raises(ShadowError, match=r"x\.result:1: not a sweep cell file"):
        sd.write_csv()
    bad.write_text('# cell {"trace":"/a","algo":"lru","capacity":1}\nRESULT a=1\nRESULT junk\n')
    with pytest.raises(ShadowError, match=r"x\.result:3: RESULT field without '='"):
        sd.write_csv()


def test_read_csv_errors(tmp_path):
    with pytest.raises(ShadowError, match="no such file"):
        read_csv(tmp_path / "nope.csv")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ShadowError, match=r"other\.csv:1: not a sweep CSV"):
        read_csv(tmp_path / "other.csv")
