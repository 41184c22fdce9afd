"""The capacity grammar and cell planning."""

from __future__ import annotations

import os

import pytest

from shadow.errors import ShadowError
from shadow.sweep.plan import Cell, parse_capacities, plan_cells


def test_capacity_list_with_suffixes_sorted_and_deduplicated():
    assert parse_capacities("2k,1k,1024,8192") == [1024, 2048, 8192]


def test_log_range_has_exact_ends_and_log_spacing():
    caps = parse_capacities("1k:256k:log8")
    assert caps == [1024, 2261, 4993, 11026, 24347, 53761, 118715, 262144]
    ratios = [b / a for a, b in zip(caps, caps[1:])]
    assert all(abs(r - 256 ** (1 / 7)) < 0.01 for r in ratios)


def test_lin_range_and_mixed_items():
    assert parse_capacities("1k:4k:lin4") == [1024, 2048, 3072, 4096]
    assert parse_capacities("100,1k:4k:log3,4k") == [100, 1024, 2048, 4096]


def test_range_points_that_round_together_are_kept_once():
    assert parse_capacities("1:3:log9") == [1, 2, 3]
    assert parse_capacities("5:5:log4") == [5]
    assert parse_capacities("7:7:log1") == [7]


@pytest.mark.parametrize("text, words", [
    ("", "empty"),
    ("1k:2k", "START:STOP:logN"),
    ("1k:2k:exp4", "START:STOP:logN"),
    ("4k:1k:log3", "stop 1024 < start 4096"),
    ("1k:2k:log0", "at least 1 point"),
    ("1k:256k:log1", "1 point cannot hold both ends 1024 and 262144"),
    ("7:9:lin1", "1 point cannot hold both ends 7 and 9"),
    ("1k,,2k", "item 2 is empty"),
    (",1k", "item 1 is empty"),
    ("1k:256k:log99999999", r"99999999 points \(at most 1024"),
    ("abc", "expected an integer"),
    ("0", "must be positive"),
])
def test_bad_capacities_say_what(text, words):
    with pytest.raises(ShadowError, match=words):
        parse_capacities(text)


def test_cell_key_names_every_field_and_round_trips():
    c = Cell("/t/a.lcp.zst", "s3fifo", 4096, "linear:865,2", "small-size-ratio=0.2", False,
             "prefix-order", "raw")
    assert Cell.from_key(c.key()) == c
    others = [Cell("/t/a.lcp.zst", "s3fifo", 4096, "linear:865,2", "small-size-ratio=0.2", False,
                   "prefix-order", "prefix"),
              Cell("/t/b.lcp.zst", "s3fifo", 4096, "linear:865,2", "small-size-ratio=0.2", False,
                   "prefix-order", "raw"),
              Cell("/t/a.lcp.zst", "s3fifo", 4096, "linear:865,2", "", False, "prefix-order", "raw")]
    assert len({c.digest, *(o.digest for o in others)}) == 4
    assert len({c.file_name, *(o.file_name for o in others)}) == 4


def test_cell_file_name_is_readable_and_safe():
    c = Cell("/t/my trace.jsonl", "lru", 1024, "table:/x/costs.txt")
    name = c.file_name
    assert name.startswith("my-trace.jsonl.lru.1024.table-x-costs.txt.") and name.endswith(".result")
    assert "/" not in name and " " not in name


def test_cell_from_key_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown cell fields"):
        Cell.from_key('{"trace":"/a","algo":"lru","capacity":1,"colour":"red"}')


def test_plan_is_the_cross_product_in_a_stable_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = plan_cells(["a.jsonl", "b.jsonl", "a.jsonl"], [("lru", ""), ("fifo", "")], [2048, 1024, 2048],
                       ["uniform", "position"], pin=False)
    assert len(cells) == 2 * 2 * 2 * 2
    assert cells[0] == Cell(str(tmp_path / "a.jsonl"), "lru", 1024, "uniform", "", False)
    assert [c.capacity for c in cells[:4]] == [1024, 2048, 1024, 2048]
    assert [c.algo for c in cells[:4]] == ["lru", "lru", "fifo", "fifo"]
    assert all(os.path.isabs(c.trace) for c in cells)
    assert len(set(cells)) == len(cells)
