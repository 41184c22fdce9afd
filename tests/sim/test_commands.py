"""`shadow simulate` through the real CLI entry point (one-line errors, exit 2)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.sim.registry import EXCLUDED, FAMILIES, POLICIES, policy_info
from tests.sim._traces import PEER_RESULTS, SYNTHETIC


def run(args):
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def shadow(*args):
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True)


def test_help():
    r = run(["simulate", "--help"])
    assert r.exit_code == 0
    for opt in ("--trace", "--cache-size", "--algo", "--algo-params", "--cost-model", "--no-pin",
                "--replay-order", "--no-verify", "--dump-holes", "--output", "--list-algos",
                "--allow-truncated", "--block-id", "--format"):
        assert opt in r.output


def test_list_algos_grouped_by_family():
    r = run(["simulate", "--list-algos"])
    assert r.exit_code == 0
    groups: dict[str, list[str]] = {}
    for line in r.output.splitlines():
        if not line.startswith(" "):
            family = line.rstrip(":")
            groups[family] = []
        else:
            groups[family].append(line.split()[0])
    assert [f for f in groups if f != "excluded"] == [f for f in FAMILIES if groups.get(f)]
    for name in POLICIES:
        family = policy_info(name).spec.family
        assert name in groups[family]
    for family, names in groups.items():
        if family != "excluded":          # registry order within a family
            assert names == [n for n in POLICIES if n in names]
    assert groups["excluded"] == list(EXCLUDED) and "clockpro" in EXCLUDED
    assert "honours pins" in r.output and "cannot express" in r.output


def test_result_lines_and_output_file(tmp_path):
    out = tmp_path / "res.txt"
    out.write_text("previous\n")
    r = run(["simulate", "--trace", str(SYNTHETIC), "-c", "2k,8k", "--algo", "lru,clock",
             "--no-pin", "--output", str(out)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(f"trace {SYNTHETIC}: 3993 requests, 121877 block accesses")
    assert "cache size 2048 blocks, cost model uniform" in lines
    results = [l for l in lines if l.startswith("RESULT ")]
    assert len(results) == 4
    if PEER_RESULTS.exists():
        assert any("algo=lru cache_size=2048" in l and "block_hit_ratio=0.149544" in l
                   and "n_eviction=102029 n_self_eviction=426" in l for l in results)
    saved = out.read_text().splitlines()
    assert saved[0] == "previous" and saved[1:] == results


def test_demo_table():
    r = run(["simulate", "--algo", "lru,fifo", "-c", "1k,4k"])
    assert r.exit_code == 0, r.output
    assert "block hit ratio:" in r.output and "prefix-only hit ratio" in r.output
    row = next(l for l in r.output.splitlines() if l.strip().startswith("lru"))
    assert len(row.split()) == 3


def test_algo_params_forms():
    r = run(["simulate", "--trace", str(SYNTHETIC), "-c", "1k", "--algo", "lru,clock",
             "--algo-params", "clock:n-bit-counter=2"])
    assert r.exit_code == 0, r.output
    assert "params=n-bit-counter=2" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("args,msg", [
    (["--cost-model", "bogus"], "unknown cost model"),
    (["--algo", "nope"], "unknown policy"),
    (["--algo", "clock", "--algo-params", "bits=1"], "unknown parameter"),
    (["-c", "12q"], "bad cache size"),
    (["--trace", "/nonexistent.lcp"], "nonexistent"),
])
def test_bad_input_is_one_line_exit_2(args, msg):
    p = shadow("simulate", "--trace", str(SYNTHETIC), "-c", "1k", *args) if "--trace" not in args \
        else shadow("simulate", "-c", "1k", *args)
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("shadow: error:") and msg in err[0]
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_oracle_on_trace_without_next_access_is_one_line_error(tmp_path) -> None:
    from shadow.trace.writer import LcpWriter

    path = tmp_path / "rec.lcp.zst"
    with LcpWriter(str(path), block_size_tokens=32) as w:      # a recording: no next-access times
        w.write_request({"input_length": 64, "output_length": 1}, [1, 2])
        w.write_request({"input_length": 64, "output_length": 1}, [1, 3])
    res = shadow("simulate", "--trace", str(path), "--algo", "lru,belady,belady_compute", "--cache-size", "4")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"shadow: error: {path}: the trace has no next-access times, which belady, belady_compute need "
        f"(convert it with `shadow convert`)"]
    assert "RESULT" not in res.stdout


@pytest.mark.slow
def test_one_decode_thread_by_default_and_the_same_results(monkeypatch, tmp_path) -> None:
    """`simulate` decodes on one thread (``SIM_DECODE_THREADS``) unless the environment says
    otherwise; the RESULT lines do not depend on it."""
    import shadow.trace.api as api
    from shadow.sim.core.simulator import SIM_DECODE_THREADS
    from shadow.trace import convert_file
    from shadow.trace.reader import DECODE_THREADS_ENV

    trace = tmp_path / "synthetic.lcp.zst"
    convert_file(str(SYNTHETIC), str(trace), frame_bytes=64 << 10)   # many indexed frames
    seen = []

    class Spy(api.LcpReader):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            seen.append(self.decode_threads)

    monkeypatch.setattr(api, "LcpReader", Spy)
    args = ["simulate", "--trace", str(trace), "-c", "1k,4k", "--algo", "lru,s3fifo,belady"]
    outs = []
    for env in (None, "2", "0"):
        if env is None:
            monkeypatch.delenv(DECODE_THREADS_ENV, raising=False)
        else:
            monkeypatch.setenv(DECODE_THREADS_ENV, env)
        r = run(args)
        assert r.exit_code == 0, r.output
        outs.append([l for l in r.output.splitlines() if l.startswith("RESULT ")])
    assert SIM_DECODE_THREADS == 1 and seen[0] == 1 and seen[-2:] == [2, 0]
    assert len(outs[0]) == 6 and outs[0] == outs[1] == outs[2]
