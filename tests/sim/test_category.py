"""Request categories (shadow/sim/category.py): each fold of the trace's type and turn, the
``--category`` option of ``shadow simulate`` and ``shadow sweep`` (help, default, one-line refusal)
and the connector's ``category`` key."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from shadow.cli import cli
from shadow.errors import ShadowError
from shadow.sim.category import CATEGORY_MODES, DEFAULT_CATEGORY, fold, request_info
from shadow.sim.live.wire import INFO_CATEGORY, INFO_SESSION, INFO_SESSION_NEXT, INFO_WIDTH
from shadow.trace.format import RECORD_DTYPE
from tests.sim._traces import ROOT

# (type_id, turn) pairs: untyped/unknown, first turns, later turns, the 16-bit ends
TYPES = np.array([0, 0, 0, 1, 1, 1, 2, 2, 65535, 65535])
TURNS = np.array([0, 1, 5, 0, 1, 2, 1, 3, 65535, 1])


def test_none_is_one_class():
    assert fold(TYPES, TURNS, "none").tolist() == [0] * len(TYPES)


def test_type_and_turn_alone():
    assert fold(TYPES, TURNS, "type").tolist() == TYPES.tolist()
    assert fold(TYPES, TURNS, "turn").tolist() == TURNS.tolist()


def test_type_and_turn_pairs_are_their_own_classes():
    got = fold(TYPES, TURNS, "type+turn")
    assert got.tolist() == [t * 65536 + u for t, u in zip(TYPES.tolist(), TURNS.tolist())]
    pairs = set(zip(TYPES.tolist(), TURNS.tolist()))
    assert len(set(got.tolist())) == len(pairs)


def test_type_by_first_or_later_turn():
    got = fold(TYPES, TURNS, "type+first-turn").tolist()
    # hand-folded: type * 4 + (0 unknown turn, 1 first, 2 later)
    assert got == [0, 1, 2, 4, 5, 6, 9, 10, 65535 * 4 + 2, 65535 * 4 + 1]
    assert fold(1, 7, "type+first-turn") == fold(1, 2, "type+first-turn")   # later turns: one class
    assert fold(1, 1, "type+first-turn") != fold(2, 1, "type+first-turn")


@pytest.mark.parametrize("mode", CATEGORY_MODES)
def test_every_fold_is_0_exactly_without_type_and_turn(mode):
    got = fold(TYPES, TURNS, mode)
    assert got.dtype == np.int64
    assert got[0] == 0                            # neither field: the one undifferentiated class
    if mode != "none":
        assert (got[1:] != 0).sum() >= 6


def test_unknown_fold_is_one_line():
    with pytest.raises(ShadowError, match=r"^--category: unknown category fold 'kind' \(one of none, "):
        fold(TYPES, TURNS, "kind")


def test_request_info_rows():
    rec = np.zeros(3, dtype=RECORD_DTYPE)
    rec["type_id"] = [0, 2, 2]
    rec["turn"] = [0, 1, 4]
    rec["session_id"] = [-1, 7, 7]
    rec["session_next_req"] = [-1, 3, -1]
    info = request_info(rec, "type+first-turn")
    assert info.shape == (3, INFO_WIDTH) and info.dtype == np.int64
    assert info[:, INFO_CATEGORY].tolist() == [0, 9, 10]
    assert info[:, INFO_SESSION].tolist() == [-1, 7, 7]
    assert info[:, INFO_SESSION_NEXT].tolist() == [-1, 3, -1]


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_help_names_every_fold_and_the_default(command):
    r = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "--category [" + "|".join(CATEGORY_MODES) + "]" in text
    assert f"[default: {DEFAULT_CATEGORY}]" in text


@pytest.mark.slow
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_unknown_category_is_one_line_exit_2_no_output(command, tmp_path):
    out = tmp_path / "out"
    args = (["-c", "8k", "-a", "lru", "-o", str(out)] if command == "simulate"
            else ["-t", str(ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl"), "-a", "lru",
                  "-c", "1k", "--out", str(out)])
    r = subprocess.run([sys.executable, "-m", "shadow", command, *args, "--category", "kind"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("shadow: error: "), r.stderr
    assert "--category" in lines[0] and "'kind'" in lines[0], lines[0]
    assert not out.exists()


@pytest.mark.slow
def test_simulate_runs_with_each_fold():
    for mode in CATEGORY_MODES:
        r = CliRunner().invoke(cli, ["simulate", "-c", "1k", "-a", "lru", "--category", mode],
                               catch_exceptions=False)
        assert r.exit_code == 0, r.output


def test_sweep_cells_carry_the_fold_and_keep_old_keys(tmp_path):
    from shadow.sweep.plan import Cell, plan_cells

    [old] = plan_cells([str(tmp_path / "t.lcp")], [("lru", "")], [8], ["uniform"])
    assert old.category == DEFAULT_CATEGORY and "category" not in old.key()
    [other] = plan_cells([str(tmp_path / "t.lcp")], [("lru", "")], [8], ["uniform"],
                         category="type")
    assert other.digest != old.digest and Cell.from_key(other.key()) == other
    assert Cell.from_key(old.key()) == old


def test_connector_key():
    from shadow.connector.config import parse_extra_config

    cfg = parse_extra_config({"category": "type"}, block_size=16, engine_blocks=64)
    assert cfg.category == "type"
    assert parse_extra_config({}, block_size=16, engine_blocks=64).category == DEFAULT_CATEGORY
    with pytest.raises(ShadowError, match=r"^kv_connector_extra_config\.category: unknown "
                                          r"category fold 'kind' \(one of "):
        parse_extra_config({"category": "kind"}, block_size=16, engine_blocks=64)
