"""The test tiers (README, Tests), as marks on the tests themselves.

``make test-unit`` runs every test that needs neither vLLM (an engine or its classes) nor
Prometheus nor Ray (marks ``vllm``, ``prometheus``, ``ray``) and is not marked ``slow``; a module
whose ``pytestmark`` rules it out is not even imported (tests/conftest.py); ``make test-fast`` every test not marked
``slow``; ``make test`` every test.  A big table of cases keeps a few rows spread over it in the
unit tier and marks the others ``slow`` (:func:`unit_rows`): every row still runs in ``make test``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


def unit_rows(rows: Sequence[Any], every: int, *, first: int = 0,
              ids: Sequence[str] | Callable[[Any], str] | None = None) -> list:
    """``rows`` of a ``parametrize`` table as ``pytest.param``\\ s: rows ``first, first + every,
    first + 2 * every, ...`` as they are, every other row marked ``slow``.

    ``ids``: the rows' test ids (a list, or a function of a row's values such as :func:`by_name`);
    default pytest's own.  A row may already be a ``pytest.param``; its marks and id are kept.
    """
    if every < 1 or not 0 <= first < len(rows):
        raise ValueError(f"every {every} must be >= 1 and first {first} a row of {len(rows)}")
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, type(pytest.param())):
            values, marks, rid = row.values, list(row.marks), row.id
        else:
            values, marks, rid = (row if isinstance(row, tuple) else (row,)), [], None
        if rid is None and ids is not None:
            rid = ids(values) if callable(ids) else ids[i]
        if i < first or (i - first) % every:
            marks.append(pytest.mark.slow)
        out.append(pytest.param(*values, marks=marks, id=rid))
    return out


def by_name(row: Sequence[Any]) -> str:
    """The test id of a row whose first item is the case's name."""
    return str(row[0])
