"""`shadow plot` refuses a damaged or foreign CSV with one line naming the file and line, exit
status 2, no traceback and no PNG (nor a plot directory): a table, one row per case."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.tiers import by_name, unit_rows

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("trace,algo,params,cache_size,cost_model,pin,replay_order,block_id,trace_path,n_req,"
           "block_hit_ratio,compute_saving_ratio,prefix_hit_ratio,holes_per_req")


def _row(algo: str = "lru", size: str = "1024", hit: str = "0.25", saving: str = "0.2",
         prefix: str = "0.2", holes: str = "0.5", trace: str = "t.lcp",
         cost_model: str = "uniform") -> str:
    return (f"{trace},{algo},,{size},{cost_model},on,deepest-first,prefix,/d/{trace},5,{hit},"
            f"{saving},{prefix},{holes}")


GOOD = [_row(), _row(size="4096", hit="0.5", saving="0.4", prefix="0.45"), _row("fifo")]


def _csv(line3: str | None = None, header: str = COLUMNS) -> bytes:
    """A results.csv: the header, a good row, ``line3`` (when given), two more good rows."""
    rows = GOOD[:1] + ([line3] if line3 is not None else []) + GOOD[1:]
    return ("\n".join([header, *rows]) + "\n").encode()


def _plot(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "shadow", "plot", *args], capture_output=True,
                          text=True, errors="replace", cwd=ROOT, env=env, timeout=120)


def _listing(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


CASES = [
    ("ratio not a number", _csv(_row(hit="abc")), ":3: block_hit_ratio 'abc' is not a number"),
    ("ratio nan", _csv(_row(hit="nan")), ":3: block_hit_ratio 'nan' is out of range ([0, 1])"),
    ("ratio inf", _csv(_row(saving="inf")), ":3: compute_saving_ratio 'inf' is out of range"),
    ("ratio 1e400", _csv(_row(prefix="1e400")), ":3: prefix_hit_ratio '1e400' is out of range"),
    ("ratio -0.1", _csv(_row(hit="-0.1")), ":3: block_hit_ratio '-0.1' is out of range"),
    ("ratio 1.5", _csv(_row(hit="1.5")), ":3: block_hit_ratio '1.5' is out of range"),
    ("ratio with a NUL", _csv(_row(hit="0.5\0")), ":3: block_hit_ratio '0.5\\x00' is not a"
                                                  " number"),
    ("ratio with a unit", _csv(_row(saving="50%")), ":3: compute_saving_ratio '50%' is not a"
                                                    " number"),
    ("holes negative", _csv(_row(holes="-1")), ":3: holes_per_req '-1' is out of range (>= 0)"),
    ("holes not a number", _csv(_row(holes="n/a")), ":3: holes_per_req 'n/a' is not a number"),
    ("cache_size not a number", _csv(_row(size="abc")), ":3: cache_size 'abc' is not a positive"
                                                        " integer"),
    ("cache_size 0", _csv(_row(size="0")), ":3: cache_size '0' is not"),
    ("cache_size -5", _csv(_row(size="-5")), ":3: cache_size '-5' is not"),
    ("cache_size 1.5", _csv(_row(size="1.5")), ":3: cache_size '1.5' is not"),
    ("cache_size 1e3", _csv(_row(size="1e3")), ":3: cache_size '1e3' is not"),
    ("cache_size empty", _csv(_row(size="")), ":3: cache_size '' is not"),
    ("cache_size in Arabic digits", _csv(_row(size="\u0661\u0662")), ":3: cache_size"),
    ("trace empty", _csv(_row(trace="")), ":3: trace is empty"),
    ("algo empty", _csv(_row(algo=" ")), ":3: algo is empty"),
    ("cost model empty", _csv(_row(cost_model="")), ":3: cost_model is empty"),
    ("a row cut short", _csv("t.lcp,lru,,1024"), ":3: 4 fields, the header has 14"),
    ("a row too long", _csv(_row() + ",7,8"), ":3: 16 fields, the header has 14"),
    ("an empty field added", _csv(_row() + ","), ":3: 15 fields, the header has 14"),
    ("a field past the csv limit", _csv(_row(algo="a" * 200_000)), ":3: not a CSV row (field"
                                                                   " larger than field limit"),
    ("not UTF-8 on line 4", _csv().replace(b"fifo", b"f\xffo"), ":4: not UTF-8 text (byte"
                                                                " offset"),
    ("Latin-1 text", _csv(_row(algo="lXru")).replace(b"lXru", b"l\xe9ru"), ":3: not UTF-8 text"),
    ("a PNG", b"\x89PNG\r\n\x1a\n" + bytes(64), ":1: not UTF-8 text"),
    ("no sweep columns", b"a,b\n1,2\n", ":1: not a sweep CSV: missing columns"),
    ("an empty file", b"", ":1: not a sweep CSV: missing columns"),
    ("header only", (COLUMNS + "\n").encode(), ": no results to plot"),
]


@pytest.mark.parametrize("name,data,words", unit_rows(CASES, 15, ids=by_name))
def test_plot_refuses_a_bad_csv_in_one_line(name, data, words, tmp_path):
    csv_path = tmp_path / "results.csv"
    csv_path.write_bytes(data)
    before = _listing(tmp_path)
    r = _plot(str(tmp_path))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert f"{csv_path}{words}" in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert _listing(tmp_path) == before   # no plots/ directory, no PNG


ARGS = [
    ("no such directory", ["{d}/nope"], "'{d}/nope' does not exist"),
    ("no results.csv", ["{d}/empty"], "{d}/empty/results.csv: no such file"),
    ("results.csv a directory", ["{d}/dir"], "{d}/dir/results.csv: is a directory"),
    ("--bytes-per-block abc", ["{d}/good", "--bytes-per-block", "abc"], "bad --bytes-per-block"),
    ("--bytes-per-block 0", ["{d}/good", "--bytes-per-block", "0"], "must be positive"),
    ("--dpi 10", ["{d}/good", "--dpi", "10"], "'--dpi': 10 is not in the range"),
    ("--dpi x", ["{d}/good", "--dpi", "x"], "'--dpi': 'x' is not a valid integer"),
    ("no DIR", [], "Missing argument 'DIR'"),
]


@pytest.mark.parametrize("name,args,words", unit_rows(ARGS, 8, ids=by_name))
def test_plot_refuses_bad_arguments(name, args, words, tmp_path):
    for sub in ("empty", "dir/results.csv", "good"):
        (tmp_path / sub).mkdir(parents=True)
    (tmp_path / "good" / "results.csv").write_bytes(_csv())
    before = _listing(tmp_path)
    r = _plot(*(a.replace("{d}", str(tmp_path)) for a in args))
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and words.replace("{d}", str(tmp_path)) in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert _listing(tmp_path) == before


@pytest.mark.slow
def test_a_byte_order_mark_and_empty_figures_are_accepted(tmp_path):
    """A CSV saved with a BOM plots; an empty ratio or hole value is a figure not reported."""
    (tmp_path / "results.csv").write_bytes(b"\xef\xbb\xbf" + _csv(_row("arc", holes="", prefix="")))
    r = _plot(str(tmp_path), "--dpi", "40")
    assert r.returncode == 0, r.stderr
    assert [Path(p).name for p in r.stdout.split()] == ["t.lcp__uniform.png"]
