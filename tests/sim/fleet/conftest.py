"""Fleet fixtures: a small ``shadow synth`` trace (sessions, users absent, arrival times, block
size 16) and its arrays in memory."""

from __future__ import annotations

import pytest

from tests.sim._traces import synth


@pytest.fixture(scope="session")
def synth_small(tmp_path_factory) -> str:
    return synth(tmp_path_factory.mktemp("fleet") / "synth.lcp", "--sessions", "60", "--rate",
                 "4", "--seed", "3")


@pytest.fixture(scope="session")
def synth_ft(synth_small):
    from shadow.sim.fleet.run import load_trace
    from shadow.trace import open_trace
    with open_trace(synth_small) as tr:
        return load_trace(tr)
