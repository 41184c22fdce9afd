"""The click layer of `shadow sweep` / `shadow plot`: --help, option parsing, one-line errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.errors import ShadowError
from shadow.sweep.commands import _split_algos


@pytest.mark.parametrize("args", [["sweep", "--help"], ["plot", "--help"], ["sweep", "-h"]])
def test_every_help(args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: cli {args[0]} ") or res.output.startswith(f"Usage: shadow {args[0]} ")
    for word in (["--cache-sizes", "--executor", "--jobs", "--address", "--no-pin", "--replay-order",
                  "--algo-params", "--block-id", "--cost-model", "--allow-truncated"] if args[0] == "sweep"
                 else ["--bytes-per-block", "--out"]):
        assert word in res.output


def test_listed_in_shadow_help():
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0 and " sweep " in res.output and " plot " in res.output


def test_algo_params_common_and_per_policy():
    assert _split_algos(("lru,s3fifo", "belady"), ()) == [("lru", ""), ("s3fifo", ""), ("belady", "")]
    got = _split_algos(("lru,s3fifo",), ("a=1,b=2", "s3fifo:b=3,c=4"))
    assert got == [("lru", "a=1,b=2"), ("s3fifo", "a=1,b=3,c=4")]
    with pytest.raises(ShadowError, match="'arc' is not one of --algo lru"):
        _split_algos(("lru",), ("arc:x=1",))
    with pytest.raises(ShadowError, match="bad item 'x': expected key=value"):
        _split_algos(("lru",), ("x",))


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["sweep", "-t", "x.jsonl", "-a", "lru", "-c", "1k:2k", "--out", "{d}"], "bad cache-size range '1k:2k'"),
    (["sweep", "-a", "lru", "-c", "1k", "--out", "{d}"], "no trace given"),
    (["sweep", "-t", "x", "-a", "lru", "-c", "1k", "--out", "{d}", "--address", "a:1"], "--address is for --executor ray"),
    (["plot", "{d}"], "results.csv: no such file"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, message):
    args = [a.replace("{d}", str(tmp_path)) for a in args]
    proc = subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
