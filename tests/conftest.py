"""Shared pytest fixtures.  Trace fixtures first (trace room); other rooms append theirs below."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Data the tests need, kept in the repository (tests/data/NOTICE.md: provenance and licence).
TEST_DATA = REPO / "tests" / "data"


# -- collection ----------------------------------------------------------------------------
def _module_marks(path: Path) -> frozenset[str]:
    """The marker names of a test module's ``pytestmark`` (read from its source, not imported)."""
    import ast

    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            for sub in ast.walk(node.value):
                # pytest.mark.NAME or pytest.mark.NAME(...)
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark"):
                    names.add(sub.attr)
    return frozenset(names)


def _deselects_every_test(markexpr: str, marks: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` deselects every test that carries ``marks``, whatever marks of the
    expression the test carries besides (every assignment of the others is tried)."""
    from itertools import product

    from _pytest.mark.expression import Expression

    expr = Expression.compile(markexpr)
    idents = sorted(set(re.findall(r"[A-Za-z_][\w.]*", markexpr)) - {"and", "or", "not"} - marks)
    for values in product((False, True), repeat=len(idents)):
        carried = marks | {n for n, v in zip(idents, values) if v}
        if expr.evaluate(carried.__contains__):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A module whose ``pytestmark`` the ``-m`` expression rules out is not imported at all.

    NOTE: the modules marked ``vllm`` import vLLM (about 7 s of CPU) when collected, which every
    worker of ``make test-unit`` would pay for tests it then deselects."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr or collection_path.suffix != ".py" or not collection_path.name.startswith(
            "test_"):
        return None
    marks = _module_marks(collection_path)
    if marks and _deselects_every_test(markexpr, marks):
        return True
    return None


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
