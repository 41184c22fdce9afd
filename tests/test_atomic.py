"""shadow.atomic: the target holds the old or the complete new content, and no temporary is left;
modes are kept; an unwritable output is one OutputError naming it."""

import errno
import os
import stat
from pathlib import Path

import pytest

from shadow.atomic import (TMP_PREFIX, atomic_open, atomic_path, atomic_write_text,
                           check_writable, commit, create_temp, output_error)
from shadow.errors import OutputError, ShadowError
from shadow.signals import Interrupted


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


# -- modes, errors, what is left behind ---------------------------------------------------------


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_new_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new.txt") == 0o640                 # not mkstemp's 0600
    target = tmp_path / "kept.txt"
    target.write_text("old")
    target.chmod(0o604)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and _mode(target) == 0o604


def test_append_keeps_lines_and_mode_and_ends_a_last_line(tmp_path: Path) -> None:
    target = tmp_path / "results.txt"
    target.write_bytes(b"one\ntwo")                            # no newline at the end
    target.chmod(0o640)
    with atomic_open(target, "w", append=True, encoding="utf-8") as f:
        f.write("three\n")
    assert target.read_bytes() == b"one\ntwo\nthree\n" and _mode(target) == 0o640
    with atomic_open(tmp_path / "fresh.txt", "w", append=True) as f:
        f.write("a\n")
    assert (tmp_path / "fresh.txt").read_text() == "a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.txt", "results.txt"]


def test_a_symlink_stays_a_link_to_the_new_content(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "r.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["r.txt"]


@pytest.mark.parametrize("case", ["missing dir", "under a file", "a directory", "a device"])
def test_unwritable_targets_are_one_line_output_errors(tmp_path: Path, case: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    path, words = {"missing dir": (tmp_path / "no" / "out.txt", "directory"),
                   "under a file": (tmp_path / "file" / "out.txt", "file is not a directory"),
                   "a directory": (tmp_path / "dir", "a directory"),
                   "a device": (Path(os.devnull), "not a regular file")}[case]
    with pytest.raises(OutputError) as info:
        atomic_write_text(path, "x", parents=False)
    msg = str(info.value)
    assert msg.startswith(f"{path}: cannot write: ") and words in msg and "\n" not in msg
    assert isinstance(info.value, ShadowError) and isinstance(info.value, OSError)
    with pytest.raises(OutputError):
        check_writable(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]
    assert list((tmp_path / "dir").iterdir()) == []


@pytest.mark.parametrize("code, words", [(errno.ENOSPC, "no space left on device"),
                                         (errno.EFBIG, "file too large"),
                                         (errno.EDQUOT, "disk quota exceeded"),
                                         (errno.EROFS, "read-only file system")])
def test_a_write_error_in_the_block_names_the_target(tmp_path: Path, code: int, words: str) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(OutputError, match=words) as info:
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise OSError(code, os.strerror(code))         # as a full disk raises it
    assert info.value.errno == code and info.value.filename == str(target)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_other_errors_of_the_block_pass_unchanged(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        with atomic_path(tmp_path / "out.txt"):
            open(tmp_path / "some-input")                   # an input's error is not the output's
    with pytest.raises(Interrupted):
        with atomic_path(tmp_path / "out.txt") as tmp:
            tmp.write_text("half")
            raise Interrupted(15)
    assert list(tmp_path.iterdir()) == []


def test_commit_failure_removes_the_temporary(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    tmp = create_temp(tmp_path / "out.txt")
    assert tmp.name.startswith(TMP_PREFIX + "out.txt.")
    tmp.write_text("x")
    with pytest.raises(OutputError, match="file is not a directory"):
        commit(tmp, tmp_path / "file" / "below")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_output_error_pickles_whole() -> None:
    import pickle

    e = output_error("/x/out.txt", OSError(errno.ENOSPC, "No space left on device"))
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) == "/x/out.txt: cannot write: no space left on device"
    assert (back.errno, back.strerror, back.filename) == (e.errno, e.strerror, e.filename)
