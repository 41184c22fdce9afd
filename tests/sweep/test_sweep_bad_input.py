"""`shadow sweep` refuses bad input with one line, exit status 2 and no traceback: a resumed sweep
whose cell files are damaged names the cell file and line (and writes nothing: no cell runs, the
CSV is not rebuilt, no temporary stays), a sweep directory that is not one names the path that is
not a directory, bad options are refused before any cell runs, and a damaged trace fails its
cells with the reader's one-line error (a table: one row per case)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shadow.sweep.plan import plan_cells
from shadow.sweep.store import SweepDir
from tests.tiers import by_name, unit_rows

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("shadow.sim.core.loop")


#: ``python -c`` that runs ``shadow`` with ``import ray`` failing, as where Ray is not installed.
WITHOUT_RAY = "import sys; sys.modules['ray'] = None; from shadow.cli import main; main()"


def _sweep(*args: str, without: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = ["-c", without] if without else ["-m", "shadow"]
    return subprocess.run([sys.executable, *start, "sweep", *args], capture_output=True,
                          text=True, errors="replace", cwd=ROOT, env=env, timeout=120)


def _listing(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else b"")
            for p in d.rglob("*")}


def _one_line(r: subprocess.CompletedProcess, words: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert words in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    return lines[0]


RESULT = ("RESULT trace=t.jsonl algo=lru cache_size={cap} cost_model=uniform n_req=5"
          " block_hit_ratio=0.25 compute_saving_ratio=0.2 prefix_hit_ratio=0.2 holes_per_req=0.5")


@pytest.fixture
def done(tmp_path):
    """A finished sweep of t.jsonl x lru x 1k,2k (cells written as the driver writes them)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 1, "hash_ids": [1, 2]}\n')
    sd = SweepDir(tmp_path / "sw")
    sd.prepare()
    cells = plan_cells([str(trace)], [("lru", "")], [1024, 2048], ["uniform"])
    for c in cells:
        sd.write_cell(c, RESULT.format(cap=c.capacity))
    sd.write_csv()
    args = ["-t", str(trace), "-a", "lru", "-c", "1k,2k", "--out", str(sd.root), "-j", "1"]
    return sd, cells, args


@pytest.mark.slow
def test_resuming_a_whole_sweep_runs_nothing(done):
    sd, cells, args = done
    r = _sweep(*args)
    assert r.returncode == 0, r.stderr
    assert "2 cells: 2 already done, 0 run, 0 failed" in r.stdout


def _key(cell, **changes) -> str:
    data = json.loads(cell.key())
    data.update(changes)
    for k in [k for k, v in changes.items() if v is _DROP]:
        del data[k]
    return "# cell " + json.dumps(data)


_DROP = object()
_R = RESULT.format(cap=1024)

#: (name, the text of the first cell's file from its key, words after ``<cell file>:``).
CELL_DAMAGE = [
    ("not UTF-8 on line 2", lambda c: _key(c).encode() + b"\n" + _R.encode()[:40] + b"\xff\xfe\n",
     ":2: not UTF-8 text (byte offset"),
    ("Latin-1 in the key", lambda c: _key(c, algo="lru").encode().replace(b'"lru"', b'"l\xe9"'),
     ":1: not UTF-8 text"),
    ("empty", lambda c: b"", ":1: not a sweep cell file"),
    ("no key line", lambda c: _R.encode(), ":1: not a sweep cell file"),
    ("key not JSON", lambda c: b"# cell {trace: 1}\n", ":1: bad cell key: Expecting property"),
    ("key a list", lambda c: b"# cell [1, 2]\n", ":1: bad cell key"),
    ("key null", lambda c: b"# cell null\n", ":1: bad cell key"),
    ("key with an unknown field", lambda c: _key(c, colour="red").encode(),
     ":1: bad cell key: unknown cell fields ['colour']"),
    ("key without capacity", lambda c: _key(c, capacity=_DROP).encode(),
     ":1: bad cell key: Cell.__init__() missing 1 required positional argument: 'capacity'"),
    ("capacity a string", lambda c: _key(c, capacity="1024").encode(),
     ":1: bad cell key: capacity is '1024'; expected a positive integer"),
    ("capacity 0", lambda c: _key(c, capacity=0).encode(), ":1: bad cell key: capacity is 0"),
    ("capacity -1", lambda c: _key(c, capacity=-1).encode(), ":1: bad cell key: capacity is -1"),
    ("capacity true", lambda c: _key(c, capacity=True).encode(),
     ":1: bad cell key: capacity is True"),
    ("capacity 1.5", lambda c: _key(c, capacity=1.5).encode(), ":1: bad cell key: capacity is 1.5"),
    ("algo a number", lambda c: _key(c, algo=5).encode(), ":1: bad cell key: algo is 5"),
    ("pin a string", lambda c: _key(c, pin="yes").encode(), ":1: bad cell key: pin is 'yes'"),
    ("trace empty", lambda c: _key(c, trace="").encode(), ":1: bad cell key: empty trace"),
    ("the key of another cell", lambda c: _key(c, capacity=4096).encode() + b"\n" + _R.encode(),
     ":1: the cell key is not the one this file name was made from"),
    ("RESULT without '='", lambda c: (_key(c) + "\n" + _R + "\nRESULT junk\n").encode(),
     ":3: RESULT field without '='"),
    ("not a RESULT line", lambda c: (_key(c) + "\nlru block hit ratio 0.25\n").encode(),
     ":2: not a RESULT line"),
    ("ratio not a number", lambda c: (_key(c) + "\n" + _R.replace("=0.25", "=abc")).encode(),
     ":2: block_hit_ratio 'abc' is not a number"),
    ("ratio nan", lambda c: (_key(c) + "\n" + _R.replace("=0.25", "=nan")).encode(),
     ":2: block_hit_ratio 'nan' is out of range"),
    ("ratio 2", lambda c: (_key(c) + "\n" + _R.replace("=0.25", "=2")).encode(),
     ":2: block_hit_ratio '2' is out of range ([0, 1])"),
    ("holes -1", lambda c: (_key(c) + "\n" + _R.replace("=0.5", "=-1")).encode(),
     ":2: holes_per_req '-1' is out of range (>= 0)"),
    ("replicas 0", lambda c: _key(c, replicas=0).encode(),
     ":1: bad cell key: replicas is 0; expected a positive integer"),
    ("replicas a string", lambda c: _key(c, replicas="2").encode(),
     ":1: bad cell key: replicas is '2'; expected a positive integer"),
    ("router a number", lambda c: _key(c, router=5).encode(),
     ":1: bad cell key: router is 5; expected a string"),
]


@pytest.mark.parametrize("name,text,words", unit_rows(CELL_DAMAGE, 12, ids=by_name))
def test_a_damaged_cell_file_is_named_with_its_line(name, text, words, done):
    sd, cells, args = done
    path = sd.cell_path(cells[0])
    path.write_bytes(text(cells[0]))
    before = _listing(sd.root)
    line = _one_line(_sweep(*args), f"{path}{words}")
    assert line.endswith("delete the file to run its cell again")
    assert _listing(sd.root) == before


def test_cells_a_file(done, tmp_path):
    sd, cells, args = done
    for p in sd.cells_dir.iterdir():
        p.unlink()
    sd.cells_dir.rmdir()
    sd.cells_dir.write_text("")
    _one_line(_sweep(*args), f"{sd.cells_dir}: not a directory")


def test_out_a_file(done, tmp_path):
    sd, cells, args = done
    out = tmp_path / "file"
    out.write_text("")
    args[args.index("--out") + 1] = str(out)
    _one_line(_sweep(*args), f"Directory '{out}' is a file")


OPTIONS = [
    ("cache size 0", ["-c", "0"], "bad cache size '0': must be positive"),
    ("cache size abc", ["-c", "abc"], "bad cache size 'abc'"),
    ("cache sizes empty", ["-c", ""], "bad --cache-sizes '': empty"),
    ("cache size range without points", ["-c", "1k:2k"], "bad cache-size range '1k:2k'"),
    ("cache size range of a billion points", ["-c", "1k:2k:log999999999"], "1024"),
    ("cache size range of one point", ["-c", "1k:256k:log1"],
     "bad cache-size range '1k:256k:log1': 1 point cannot hold both ends 1024 and 262144"),
    ("cache size linear range of one point", ["-c", "1k:2k:lin1"], "1 point cannot hold both"),
    ("cache size list with an empty item", ["-c", "1k,,2k"],
     "bad cache size list '1k,,2k': item 2 is empty"),
    ("cache size list with a trailing comma", ["-c", "1k:4k:log3,"], "item 2 is empty"),
    ("cache size 2**63", ["-c", "9223372036854775808"], "too large"),
    ("cache size 2**31 - 1", ["-c", "2147483647"], "at most 2147483646"),
    ("no policy", ["-a", " "], "--algo"),
    ("unknown policy", ["-a", "nosuch"], "unknown policy 'nosuch'"),
    ("policy parameter out of range", ["-a", "clock", "--algo-params", "clock:n-bit-counter=0"],
     "n-bit-counter must be 1..8"),
    ("parameter without a value", ["--algo-params", "x"], "bad item 'x': expected key=value"),
    ("parameters of a policy not run", ["--algo-params", "arc:x=1"], "'arc' is not one of"),
    ("cost model linear:1", ["--cost-model", "linear:1"], "expected linear:A,B"),
    ("--jobs 0", ["-j", "0"], "'--jobs' / '-j': 0 is not in the range"),
    ("--address without ray", ["--address", "a:1"], "--address is for --executor ray"),
    ("--executor bogus", ["--executor", "bogus"], "'bogus' is not one of"),
    ("--replicas 0", ["--router", "random", "--replicas", "0"],
     "--replicas must be between 1 and 4096, got 0"),
    ("--replicas 4097", ["--router", "random", "--replicas", "2,4097"],
     "--replicas must be between 1 and 4096, got 4097"),
    ("--replicas not a number", ["--router", "random", "--replicas", "2,x"],
     "bad --replicas list '2,x': item 2 'x' is not a whole number"),
    ("--replicas with an empty item", ["--router", "random", "--replicas", "1,,2"],
     "bad --replicas list '1,,2': item 2 is empty"),
    ("--replicas without a router", ["--replicas", "1,2"],
     "--replicas 2 needs a router to spread the requests"),
    ("unknown router", ["--router", "round_robin,nope"], "unknown router 'nope'"),
    ("a router twice", ["--router", "random,random"], "--router lists a router twice"),
    ("router parameter unknown", ["--router", "random", "--router-params", "x=1"],
     "router random: unknown parameter 'x'"),
    ("parameters of a router not run", ["--router", "random", "--router-params", "dynamo:seed=1"],
     "--router-params 'dynamo:seed=1': dynamo is not in --router"),
    ("--router-params without --router", ["--router-params", "seed=1"],
     "--router-params without --router"),
    ("a load router under serial timing", ["--router", "power_of_two"],
     "router power_of_two routes by load, which a time model gives"),
    ("a load router beside a serial timing",
     ["--router", "least_load", "--timing", "model", "--timing", "serial"],
     "router least_load routes by load"),
    ("an oracle in a fleet", ["-a", "belady", "--router", "random", "--replicas", "1,2"],
     "belady (an oracle) cannot run in a fleet of 2"),
    ("a fleet with a tier", ["--router", "random", "--tier", "cpu:8kblk:lru"],
     "--tier runs behind one engine"),
]


@pytest.mark.parametrize("name,extra,words", unit_rows(OPTIONS, 10, first=3, ids=by_name))
def test_bad_options_are_refused_before_any_cell(name, extra, words, tmp_path, without=None):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 1, "hash_ids": [1, 2]}\n')
    out = tmp_path / "sw"
    base = {"-t": str(trace), "-a": "lru", "-c": "1k", "--out": str(out)}
    for k in ("-c", "-a"):
        if k in extra:
            del base[k]
    args = [x for kv in base.items() for x in kv] + extra
    _one_line(_sweep(*args, without=without), words)
    assert not out.exists()


#: (name, options, words): refused where Ray is not installed (the import is made to fail).
WITHOUT_RAY_OPTIONS = [
    ("--executor ray", ["--executor", "ray"], "--executor ray needs Ray: pip install"),
    ("--executor ray --address", ["--executor", "ray", "--address", "127.0.0.1:1"],
     "--executor ray needs Ray"),
]


@pytest.mark.parametrize("name,extra,words", unit_rows(WITHOUT_RAY_OPTIONS, 2, ids=by_name))
def test_ray_asked_for_where_it_is_not_installed(name, extra, words, tmp_path):
    test_bad_options_are_refused_before_any_cell(name, extra, words, tmp_path, without=WITHOUT_RAY)


DAMAGED_TRACES = [
    ("lcp type id past the table", "t.lcp", "type id 9 beyond the header's 2 request types"),
    ("lcp block id 2**63", "t.lcp", "block id 9223372036854775808 out of range"),
    ("JSONL timestamp 1e400", "t.jsonl", "t.jsonl:2: invalid JSON"),
    ("JSONL timestamp -5", "t.jsonl", "t.jsonl:2: timestamp -5 is negative"),
]


@pytest.mark.parametrize("name,file,words", unit_rows(DAMAGED_TRACES, 4, first=1, ids=by_name))
def test_a_damaged_trace_fails_its_cells_in_one_line_each(name, file, words, tmp_path):
    from tests.trace.bad_inputs import JSONL_CASES, LCP_DAMAGE, damaged, jsonl_file, make_base

    if file.endswith(".lcp"):
        damage = dict(LCP_DAMAGE)[name[4:]]
        trace, _ = damaged(tmp_path, make_base(tmp_path), damage, file)
    else:
        line = next(c[1] for c in JSONL_CASES if c[0] == name[6:])
        trace = jsonl_file(tmp_path, line, file)
    out = tmp_path / "sw"
    r = _sweep("-t", str(trace), "-a", "lru,fifo", "-c", "1k", "--out", str(out), "-j", "1")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 3 and "Traceback" not in r.stderr, r.stderr
    assert all(ln.startswith("cell failed: ") and words in ln for ln in lines[:2]), lines
    assert lines[2] == ("shadow: error: 2 of 2 cells failed (listed above); run the same command"
                        " again to retry them")
    assert list((out / "cells").iterdir()) == []


#: (name, address, words): refused with Ray installed, before the sweep directory is made.
RAY_ADDRESSES = [
    ("nothing listens", "127.0.0.1:1", "cannot connect to Ray at 127.0.0.1:1: connection refused"),
    ("ray client nothing listens", "ray://127.0.0.1:1", "cannot connect to Ray at ray://127.0.0.1:1"),
    ("no port", "nonsense", "--address 'nonsense': expected HOST:PORT"),
]


@pytest.mark.ray
@pytest.mark.parametrize("name,address,words", RAY_ADDRESSES, ids=[r[0] for r in RAY_ADDRESSES])
def test_an_unreachable_ray_address_leaves_nothing(name, address, words, tmp_path):
    pytest.importorskip("ray")
    test_bad_options_are_refused_before_any_cell(name, ["--executor", "ray", "--address", address], words,
                                                 tmp_path)
