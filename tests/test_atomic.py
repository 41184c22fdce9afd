"""shadow.atomic: the target holds the old or the complete new content, and no temporary is left."""

from pathlib import Path

import pytest

from shadow.atomic import TMP_PREFIX, atomic_path, atomic_write_text


def test_write_creates_parents_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "out.txt"
    atomic_write_text(target, "one\r\ntwo\n")
    assert target.read_bytes() == b"one\r\ntwo\n"        # newlines untranslated
    assert [p.name for p in target.parent.iterdir()] == ["out.txt"]


def test_failure_keeps_old_content_and_removes_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target, suffix=".png") as tmp:
            assert tmp.name.startswith(TMP_PREFIX) and tmp.suffix == ".png"
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_success_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with atomic_path(target) as tmp:
        tmp.write_text("new")
        assert target.read_text() == "old"              # not visible before the block ends
    assert target.read_text() == "new"
