"""`shadow simulate` refuses a damaged trace as `shadow stat` and `shadow convert` do: one line
naming the file and the place, exit status 2, no traceback, no results file (the damaged lcp
table of tests/trace/bad_inputs.py, and hostile JSONL numbers)."""

from __future__ import annotations

import pytest

from tests.trace import bad_inputs as bi
from tests.tiers import by_name, unit_rows

pytest.importorskip("shadow.sim.core.loop")


def _simulate(tmp_path, trace, words: list[str], algos: str = "lru,belady") -> None:
    """belady (an oracle) reads next-access times; a trace without them simulates lru alone."""
    before = bi.listing(tmp_path)
    r = bi.shadow("simulate", "-t", str(trace), "-a", algos, "-c", "4",
               "-o", str(tmp_path / "results.txt"))
    bi.assert_refused(r, words)
    assert bi.listing(tmp_path) == before


@pytest.mark.slow
def test_the_base_trace_simulates(lcp_base, tmp_path):
    (tmp_path / "base.lcp").write_bytes(lcp_base.data)
    r = bi.shadow("simulate", "-t", str(tmp_path / "base.lcp"), "-a", "lru,belady", "-c", "4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("RESULT ") == 2


@pytest.mark.parametrize("name,damage", unit_rows(bi.LCP_DAMAGE, 27, first=18, ids=by_name))
def test_damaged_lcp(name, damage, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage)
    _simulate(tmp_path, path, words, "lru" if "HAS_NEXT_ACCESS" in name else "lru,belady")


@pytest.mark.parametrize("name,damage", unit_rows(bi.ZST_DAMAGE, 6, first=4, ids=by_name))
def test_damaged_lcp_zst(name, damage, lcp_base, tmp_path):
    path, words = bi.damaged(tmp_path, lcp_base, damage, "bad.lcp.zst")
    _simulate(tmp_path, path, words)


@pytest.mark.slow
def test_indexed_frames_with_right_checksums(tmp_path):
    path, words = bi.writer_made(tmp_path)
    _simulate(tmp_path, path, words, "lru")


NUMBERS = [c for c in bi.JSONL_CASES if c[0].startswith(("timestamp", "input_length", "turn"))]


@pytest.mark.parametrize("name,line,options,words", unit_rows(NUMBERS, 31, first=5, ids=by_name))
def test_hostile_jsonl_numbers(name, line, options, words, tmp_path):
    src = bi.jsonl_file(tmp_path, line)
    if options:
        pytest.skip("simulate reads JSONL with the automatic time unit only")
    _simulate(tmp_path, src, [f"{src}:2: ", *words])


ORACLE_COUNTS = [
    ("n_block_accesses 2**40", bi._header(bi.N_ACCESSES, "<Q", 1 << 40,
                                          ["block accesses, the header says"])),
    ("n_unique_blocks 2**40", bi._header(48, "<Q", 1 << 40, ["n_unique_blocks"])),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,damage", ORACLE_COUNTS, ids=bi.ids(ORACLE_COUNTS))
def test_an_oracle_is_not_sized_by_a_false_count(name, damage, lcp_base, tmp_path):
    """A count that is possible but false: the oracle's next-access pass presizes at most
    oracle.PRESIZE_MAX entries and grows with what the file holds, so the reader's end-of-file
    check refuses it (no temporary file of 8 TiB, no SIGBUS)."""
    path, words = bi.damaged(tmp_path, lcp_base, damage)
    _simulate(tmp_path, path, words, "belady")
