"""Fleet fixtures: a small ``shadow synth`` trace (sessions, users absent, arrival times, block
size 16) and its arrays in memory."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from shadow.cli import cli


@pytest.fixture(scope="session")
def synth_small(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("fleet") / "synth.lcp"
    res = CliRunner().invoke(cli, ["synth", "--sessions", "60", "--rate", "4", "--seed", "3",
                                    str(path)])
    assert res.exit_code == 0, res.output
    return str(path)


@pytest.fixture(scope="session")
def synth_ft(synth_small):
    from shadow.sim.fleet.run import load_trace
    from shadow.trace import open_trace
    with open_trace(synth_small) as tr:
        return load_trace(tr)
