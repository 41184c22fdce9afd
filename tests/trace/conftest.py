"""Fixtures of the trace tests' bad-input tables (tests/trace/bad_inputs.py)."""

from __future__ import annotations

import pytest

from tests.trace.bad_inputs import Base, make_base


@pytest.fixture(scope="session")
def lcp_base(tmp_path_factory) -> Base:
    """The small valid plain `.lcp` that every damaged-lcp case starts from."""
    return make_base(tmp_path_factory.mktemp("lcp_base"))
