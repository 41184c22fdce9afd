"""``shadow convert`` and ``shadow stat`` through the real command line (one-line errors)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from shadow.trace.format import VERSIONS

REPO = Path(__file__).resolve().parents[2]


def shadow(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shadow", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("cmd", ["convert", "stat"])
def test_help(cmd):
    r = shadow(cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage: shadow " + cmd in r.stdout
    assert "--allow-truncated" in r.stdout and "--block-id" in r.stdout


@pytest.mark.slow
def test_convert_and_stat(tmp_path, synthetic_jsonl):
    out = tmp_path / "s.lcp.zst"
    r = shadow("convert", str(synthetic_jsonl), str(out))
    assert r.returncode == 0, r.stderr
    assert "3,993 requests, 121,877 blocks, 43,924 unique" in r.stdout
    r = shadow("stat", str(out))
    assert r.returncode == 0, r.stderr
    assert "infinite-cache hit     0.639604" in r.stdout and "512 tokens" in r.stdout
    assert r.stderr == ""   # no progress bar when stderr is not a terminal
    r = shadow("stat", "--json", str(out))
    s = json.loads(r.stdout)
    assert s["requests"] == 3993 and s["unique_blocks"] == 43924 and s["max_blocks_per_request"] == 374
    rd = s["reuse_distance"]
    assert rd["n"] == 121877 - 43924 and 0 < rd["p50"] <= rd["p90"] <= rd["p99"]
    r = shadow("convert", str(out), str(tmp_path / "back.jsonl"))
    assert r.returncode == 0, r.stderr
    assert len((tmp_path / "back.jsonl").read_text().splitlines()) == 3993


def _one_line_error(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_bad_jsonl_line(tmp_path):
    src = tmp_path / "bad.jsonl"
    src.write_text('{"timestamp": 0, "hash_ids": [1]}\n{"timestamp": 1, "hash_ids": [1,\n')
    r = shadow("convert", str(src), str(tmp_path / "o.lcp.zst"))
    _one_line_error(r, f"{src}:2: invalid JSON")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


@pytest.mark.slow
def test_truncated_lcp_errors_and_allow_truncated(tmp_path, synthetic_lcp):
    data = synthetic_lcp.read_bytes()
    cut = tmp_path / "cut.lcp.zst"
    cut.write_bytes(data[: len(data) // 2])
    r = shadow("stat", str(cut))
    _one_line_error(r, "byte offset", "truncated", "complete requests read")
    r = shadow("stat", "--json", "--allow-truncated", str(cut))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["truncated"] and 0 < s["requests"] < 3993
    assert "truncated" in r.stderr
    r = shadow("convert", str(cut), str(tmp_path / "o.lcp"))
    _one_line_error(r, "truncated")
    assert not (tmp_path / "o.lcp").exists()


@pytest.mark.slow
@pytest.mark.parametrize("content,fragment", [
    (b"", "empty file"),
    (b"\x00\x01\x02garbage", "not a trace"),
    (b"LCPTRACE" + struct.pack("<I", max(VERSIONS) + 1) + bytes(8180),
     f"unsupported lcp version {max(VERSIONS) + 1}"),
    (b"\x28\xb5\x2f\xfd\x00\x00garbage", "zstd"),
])
def test_bad_files(tmp_path, content, fragment):
    p = tmp_path / "x.lcp"
    p.write_bytes(content)
    _one_line_error(shadow("stat", str(p)), fragment)
    _one_line_error(shadow("convert", str(p), str(tmp_path / "y.jsonl")), fragment)


@pytest.mark.slow
def test_usage_errors(tmp_path):
    _one_line_error(shadow("stat", str(tmp_path / "missing.lcp")), "no such file")
    r = shadow("convert", "only-one")
    assert r.returncode == 2 and "need at least one input" in r.stderr
    src = tmp_path / "a.jsonl"
    src.write_text('{"timestamp": 0, "hash_ids": [1]}\n')
    _one_line_error(shadow("convert", str(src), str(tmp_path / "out.bin")), "output format")


@pytest.mark.slow
def test_convert_frame_size(tmp_path, synthetic_jsonl):
    from shadow.trace import LcpReader
    from shadow.trace.format import HEADER_FRAME_SIZE, ZSTD_MAGIC

    outs = {}
    for fs in ("0", "64k", "4M"):
        out = tmp_path / f"f{fs}.lcp.zst"
        r = shadow("convert", "--frame-size", fs, str(synthetic_jsonl), str(out))
        assert r.returncode == 0, r.stderr
        with LcpReader(str(out), decode_threads=2) as rd:
            outs[fs] = [b.block_ids.tolist() for b in rd]
            frames = rd.n_frames_parallel
        # 68 x 3,993 requests + 16 x 121,877 entries = 2,221,556 bytes of payload; a frame
        # ends with the request that takes it to 64 KiB or more
        assert frames in {"0": (0,), "64k": (33, 34), "4M": (1,)}[fs]
    assert outs["0"] == outs["64k"] == outs["4M"]
    assert (tmp_path / "f0.lcp.zst").read_bytes()[HEADER_FRAME_SIZE:][:4] == ZSTD_MAGIC
    r = shadow("convert", "--frame-size", "lots", str(synthetic_jsonl), str(tmp_path / "x.lcp.zst"))
    _one_line_error(r, "bad frame size 'lots'")


@pytest.mark.slow
def test_openblas_threads_default_and_override():
    """`shadow` keeps numpy's spinning OpenBLAS workers off the decoder's cores unless told otherwise."""
    code = ("import os, sys\n"
            "from shadow.cli import main\n"
            "try:\n"
            "    main(['--version'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-1] == "1"
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[-1] == "3"
