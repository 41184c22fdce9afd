"""The ``shadow`` command line: a thin layer over the library.

Subcommands live next to the code they drive and are imported lazily, so ``shadow --help`` stays
fast and a subcommand's heavy imports (matplotlib, ray) load only when it runs:

====================  =====================================
``shadow convert``    :mod:`shadow.trace.commands`
``shadow stat``       :mod:`shadow.trace.commands`
``shadow synth``      :mod:`shadow.trace.commands`
``shadow simulate``   :mod:`shadow.sim.commands`
``shadow mrc``        :mod:`shadow.sim.mrc.commands`
``shadow sweep``      :mod:`shadow.sweep.commands`
``shadow plot``       :mod:`shadow.sweep.commands`
====================  =====================================

Bad input raises :class:`shadow.errors.ShadowError`; :func:`main` prints it as one line and
exits with status 2.  No traceback reaches the user for bad input, an unwritable output or a
signal (docs/faults.md).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from shadow import __version__
from shadow.errors import ShadowError

COMMANDS: dict[str, str] = {
    "convert": "shadow.trace.commands:convert",
    "stat": "shadow.trace.commands:stat",
    "synth": "shadow.trace.commands:synth",
    "simulate": "shadow.sim.commands:simulate",
    "mrc": "shadow.sim.mrc.commands:mrc",
    "sweep": "shadow.sweep.commands:sweep",
    "plot": "shadow.sweep.commands:plot",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args, lazy: dict[str, str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, attr = self.lazy[name].split(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                if exc.name and exc.name.startswith(module.rsplit(".", 1)[0]):
                    return None  # that room is not built yet
                raise
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="shadow")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Shadow simulator for LLM prefix (KV block) caches: record, simulate, validate."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


def run_cli(command: click.Command, args: list[str] | None = None, prog: str = "shadow") -> None:
    """Run a click command; every way it can end is one line on stderr at most and an exit status.

    ShadowError (bad input, an unwritable output): ``PROG: error: ...``, 2.  SIGINT, SIGTERM,
    SIGHUP (:mod:`shadow.signals`): ``PROG: interrupted`` / ``PROG: terminated (SIGTERM)``,
    128 + the signal's number, after the cleanup the exception triggered on its way out.  An
    OSError that no layer named (a read error of the system): ``PROG: error: FILE: reason``, 2.
    """
    from shadow.signals import Interrupted, install

    restore = install()
    try:
        _run(command, args, prog)
    except Interrupted as exc:
        # NOTE: the handlers stay: a second signal while the interpreter exits (pool threads
        # joined at exit) is held back instead of printing a KeyboardInterrupt traceback.
        click.echo(f"{prog}: {exc.describe()}", err=True)
        sys.exit(exc.exit_status)
    except BaseException:
        restore()
        raise
    restore()


def _run(command: click.Command, args: list[str] | None, prog: str) -> None:
    try:
        command.main(args=args, prog_name=prog, standalone_mode=False)
    except ShadowError as exc:
        click.echo(f"{prog}: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo(f"{prog}: interrupted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        # NOTE: one line, as for every other bad input (click's own block is three)
        where = exc.ctx.command_path if exc.ctx is not None else prog
        click.echo(f"{prog}: error: {exc.format_message().rstrip('.')} (see `{where} --help`)",
                   err=True)
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo(f"{prog}: interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        # NOTE: the last resort: outputs are named by shadow.atomic, inputs by their readers
        logging.getLogger("shadow").debug("unnamed OSError", exc_info=True)
        where = f"{exc.filename}: " if exc.filename else _unnamed(exc)
        click.echo(f"{prog}: error: {where}{(exc.strerror or str(exc)).lower()}", err=True)
        sys.exit(2)


def _unnamed(exc: OSError) -> str:
    """Where an OSError without a file name happened: every output file is named by
    :mod:`shadow.atomic`, so a write error without one is standard output's (``> /dev/full``);
    stdout is then dropped, so the interpreter's own flush at exit does not fail again."""
    from shadow.atomic import WRITE_ERRNOS

    if exc.errno not in WRITE_ERRNOS:
        return ""
    sys.stdout = open(os.devnull, "w")
    return "standard output: "


def main(args: list[str] | None = None) -> None:
    # NOTE: numpy's OpenBLAS starts one worker thread per core at import, and they spin for a while
    # before sleeping: ~0.1 s of a core per command here, taken from the trace decoder's threads.
    # Nothing in shadow uses BLAS; a user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    run_cli(cli, args, "shadow")


if __name__ == "__main__":
    main()
