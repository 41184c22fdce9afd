"""The shared option decorators: every subcommand's --help (shadow/cli_options.py), and the run
options (one decorator, shadow/sim/options.py: shadow.sim.run.RunSpec's settings) on both
commands that run a trace."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from shadow.cli import COMMANDS, cli
from shadow.sim.options import run_options


def _run_params(many: bool) -> list[click.Option]:
    @run_options(many=many)
    def f(**_kw) -> None:
        pass
    return list(reversed(f.__click_params__))


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_subcommand_has_help(name):
    r = CliRunner().invoke(cli, [name, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"Usage: cli {name} ") or r.output.startswith(f"Usage: shadow {name} ")
    assert "Options:" in r.output and "--help" in r.output


@pytest.mark.parametrize("name,many", [("simulate", False), ("sweep", True)])
def test_run_commands_take_every_run_option(name, many):
    """simulate and sweep declare the run options through the one decorator: each of its options
    is in the command, with the same flags, multiplicity and default."""
    command = cli.get_command(click.Context(cli), name)
    mine = {tuple(p.opts): p for p in command.params}
    for opt in _run_params(many):
        got = mine.get(tuple(opt.opts))
        assert got is not None, opt.opts
        assert (got.name, got.multiple, got.default) == (opt.name, opt.multiple, opt.default)
    r = CliRunner().invoke(cli, [name, "--help"], terminal_width=200)
    for opt in _run_params(many):
        assert opt.opts[0] in r.output


def test_many_makes_cost_models_and_timings_repeatable():
    one = {p.opts[0]: p for p in _run_params(False)}
    many = {p.opts[0]: p for p in _run_params(True)}
    assert one.keys() == many.keys()
    for flag, name in (("--cost-model", "cost_model"), ("--timing", "timing")):
        assert not one[flag].multiple and one[flag].name == name
        assert many[flag].multiple and many[flag].name == name + "s"
        assert many[flag].default == (one[flag].default,)
    assert one["--tier"].multiple and many["--tier"].multiple
