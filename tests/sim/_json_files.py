"""Shared by the tests of the two JSON file readers (a model's config.json, replay's
report.json): both go through ``shadow.sim.cost.modelcfg.read_json_object``."""

from __future__ import annotations

from pathlib import Path

import pytest

from shadow.errors import ShadowError

#: (file name, content: None = no file, words): what read_json_object refuses for any use.
UNREADABLE = [
    ("missing.json", None, "cannot read it: No such file or directory"),
    ("bad.json", "{", "it is not JSON (Expecting property name"),
    ("binary.json", b"\xff\xfe\x00", "it is not JSON ("),
    ("list.json", "[]", "it is not a JSON object"),
]


def put(path: Path, content: str | bytes | None) -> Path:
    """Write ``content`` to ``path`` (None: leave no file)."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    return path


def one_line_error(call) -> str:
    """The ShadowError ``call()`` raises, checked to be one line."""
    with pytest.raises(ShadowError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg
    return msg
