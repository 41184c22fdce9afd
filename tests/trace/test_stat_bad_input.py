"""`shadow stat` refuses bad input with one line naming the file and the place, exit status 2,
no traceback and nothing written: damaged lcp (plain and zstd), hostile JSONL numbers and lines,
bad arguments (a table: one row per case, see tests/trace/bad_inputs.py)."""

from __future__ import annotations

import pytest

from tests.trace import bad_inputs as bi
from tests.tiers import by_name, unit_rows


@pytest.mark.slow
def test_the_base_trace_is_valid(lcp_base, tmp_path):
    path = tmp_path / "base.lcp"
    path.write_bytes(lcp_base.data)
    r = bi.shadow("stat", str(path))
    assert r.returncode == 0, r.stderr
    assert "requests               12" in r.stdout and "types                  2 (text image)" in r.stdout


@pytest.mark.parametrize("name,damage", unit_rows(bi.LCP_DAMAGE, 27, first=9, ids=by_name))
def test_damaged_lcp(name, damage, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage)
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("stat", str(path)), words)
    assert bi.listing(tmp_path) == before


@pytest.mark.parametrize("name,damage", unit_rows(bi.ZST_DAMAGE, 6, first=2, ids=by_name))
def test_damaged_lcp_zst(name, damage, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage, "bad.lcp.zst")
    bi.assert_refused(bi.shadow("stat", "--json", str(path)), words)


@pytest.mark.slow
def test_indexed_frames_with_right_checksums(tmp_path):
    path, words = bi.writer_made(tmp_path)
    bi.assert_refused(bi.shadow("stat", str(path)), words)


@pytest.mark.slow
def test_a_frame_index_entry_claiming_a_huge_frame_is_streamed(lcp_base, tmp_path):
    """Accepted, read by the streaming decoder: under a 2 GiB address-space limit the 1 TiB the
    entry claims is never allocated, and the figures are those of the trace."""
    import resource
    import subprocess
    import sys

    path = bi.lying_frame_index(tmp_path, lcp_base)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    r = subprocess.run([sys.executable, "-m", "shadow", "stat", "--json", str(path)],
                       capture_output=True, text=True, cwd=bi.REPO, preexec_fn=limit, timeout=120)
    assert r.returncode == 0, r.stderr
    assert '"requests": 12' in r.stdout and '"block_accesses": 42' in r.stdout


@pytest.mark.slow
def test_a_block_id_of_2_63_is_not_a_request_of_2_63_blocks(lcp_base, tmp_path):
    damage = dict(bi.LCP_DAMAGE)["block id 2**63"]
    path, _ = bi.damaged(tmp_path, lcp_base, damage)
    r = bi.shadow("stat", str(path))
    assert "blocks (header" not in r.stderr and "block id 9223372036854775808" in r.stderr


@pytest.mark.slow
def test_allow_truncated_reads_the_prefix_before_the_damage(lcp_base, tmp_path):
    path, _ = bi.damaged(tmp_path, lcp_base, dict(bi.LCP_DAMAGE)["type id past the table"])
    r = bi.shadow("stat", "--allow-truncated", str(path))
    assert r.returncode == 0, r.stderr
    assert "requests               3" in r.stdout and "(truncated: complete prefix only)" in r.stdout
    assert "type id 9 beyond" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("name,line,options,words", unit_rows(bi.JSONL_CASES, 30, first=10, ids=by_name))
def test_hostile_jsonl(name, line, options, words, tmp_path):
    src = bi.jsonl_file(tmp_path, line)
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("stat", *options, str(src)), [f"{src}:2: ", *words])
    assert bi.listing(tmp_path) == before


ARGS = [
    ("no such file", ["{d}/nope.lcp"], ["nope.lcp: no such file"]),
    ("a directory", ["{d}"], ["is a directory"]),
    ("an empty file", ["{d}/empty.lcp"], ["empty.lcp: empty file"]),
    ("binary garbage", ["{d}/garbage.bin"], ["garbage.bin: not a trace"]),
    ("a byte-order mark before JSONL", ["{d}/bom.jsonl"], ["bom.jsonl: not a trace"]),
    ("only blank lines", ["{d}/blank.jsonl"], ["blank.jsonl: no requests"]),
    ("--block-id raw on lcp", ["--block-id", "raw", "{d}/base.lcp"],
     ["--block-id raw applies to JSONL input only"]),
    ("--block-id bogus", ["--block-id", "bogus", "{d}/base.lcp"], ["'bogus' is not one of"]),
    ("--time-unit h", ["--time-unit", "h", "{d}/base.lcp"], ["'h' is not one of"]),
    ("no trace", [], ["Missing argument 'TRACE'"]),
    ("two traces", ["{d}/base.lcp", "{d}/base.lcp"], ["unexpected extra argument"]),
    ("unknown option", ["--bogus", "{d}/base.lcp"], ["No such option '--bogus'"]),
]


@pytest.mark.parametrize("name,args,words", unit_rows(ARGS, 12, first=2, ids=by_name))
def test_bad_arguments(name, args, words, lcp_base, tmp_path):
    (tmp_path / "base.lcp").write_bytes(lcp_base.data)
    (tmp_path / "empty.lcp").write_bytes(b"")
    (tmp_path / "garbage.bin").write_bytes(bytes(range(256)))
    (tmp_path / "bom.jsonl").write_bytes(b'\xef\xbb\xbf{"hash_ids": [1]}\n')
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    before = bi.listing(tmp_path)
    bi.assert_refused(bi.shadow("stat", *(a.replace("{d}", str(tmp_path)) for a in args)), words)
    assert bi.listing(tmp_path) == before
