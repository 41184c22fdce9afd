"""A progress bar on stderr for the long-running commands (``convert``, ``stat``, ``simulate``).

Shown only when stderr is a terminal, so logs and pipes stay clean; otherwise the callback is
None and callers skip the call.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator

import click


@contextlib.contextmanager
def progress_bar(length: int | None, label: str, *, unit: str = "",
                 ) -> Iterator[Callable[..., None] | None]:
    """Yield ``update(done, *_)`` (``done``: absolute position out of ``length``), or None when
    stderr is no terminal or the length is unknown.  With ``unit``, the bar also shows the rate
    (``12.3 M <unit>/s``); click shows the ETA."""
    if not sys.stderr.isatty() or not length:
        yield None
        return
    t0 = time.monotonic()
    state = {"done": 0}

    def rate(_item) -> str | None:
        dt = time.monotonic() - t0
        if not unit or dt <= 0 or not state["done"]:
            return None
        return f"{state['done'] / dt / 1e6:.1f} M {unit}/s"

    with click.progressbar(length=length, label=label, file=sys.stderr, show_eta=True,
                           show_pos=True, item_show_func=rate if unit else None) as bar:

        def update(done: int, *_ignored) -> None:
            step = done - state["done"]
            state["done"] = done
            bar.update(step, done)

        yield update
