"""Shared pytest fixtures.  Trace fixtures first (trace room); other rooms append theirs below."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Data the tests need, kept in the repository (tests/data/NOTICE.md: provenance and licence).
TEST_DATA = REPO / "tests" / "data"


# -- trace fixtures --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def synthetic_jsonl() -> Path:
    """The bundled Mooncake synthetic trace (package data)."""
    from shadow.trace import bundled_trace_path

    return Path(bundled_trace_path())


@pytest.fixture(scope="session")
def conversation_jsonl() -> Path:
    """Mooncake's conversation trace (tests/data)."""
    p = TEST_DATA / "mooncake_conversation.jsonl"
    assert p.exists(), f"{p} is missing from the repository"
    return p


@pytest.fixture(scope="session")
def synthetic_lcp(tmp_path_factory, synthetic_jsonl) -> Path:
    """The synthetic trace converted once per test session to .lcp.zst."""
    from shadow.trace import convert_file

    out = tmp_path_factory.mktemp("traces") / "mooncake_synthetic.lcp.zst"
    convert_file(str(synthetic_jsonl), str(out))
    return out


def write_jsonl_lines(path: Path, rows: list[dict]) -> Path:
    """Write rows as JSONL (test helper; import it from tests.conftest)."""
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
