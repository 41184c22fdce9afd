"""Signals end a command the way Ctrl-C does: an exception, the cleanup it triggers, one line.

:func:`install` (called by :func:`shadow.cli.run_cli`) makes SIGINT, SIGTERM and SIGHUP raise
:class:`Interrupted` in the main thread, so every ``except BaseException`` / ``finally`` on the way
out runs (temporaries removed, sweep workers stopped, the sweep CSV rebuilt) and the CLI prints one
line and exits with 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).

Invariants:

* At most one :class:`Interrupted` is raised per :func:`install`: a second signal while the cleanup
  runs is held back, so the cleanup is never cut short; a third ends the process at once by the
  signal's default action (the way out of a cleanup that hangs).
* Inside :func:`deferred` a signal is held until the block ends and raised there: creating a
  temporary and handing it to the code that removes it, or a rename, happen as one step.
* A signal the parent process ignores (``nohup``, a shell's background job) stays ignored.

Also here, for worker processes: :func:`blocked` (a signal mask that children inherit) and
:func:`die_with_parent` (``PR_SET_PDEATHSIG`` on Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

#: The signals that :func:`install` turns into :class:`Interrupted`.
HANDLED: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: prctl(2) option: the signal this process gets when its parent thread exits (Linux).
PR_SET_PDEATHSIG = 1


class Interrupted(BaseException):
    """A command stopped by a signal.  A BaseException, like KeyboardInterrupt, so that only
    cleanup code (``except BaseException`` and ``finally``) sees it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process killed by it."""
        return 128 + self.signum

    def describe(self) -> str:
        """``interrupted`` for SIGINT, ``terminated (SIGTERM)`` for the others."""
        if self.signum == signal.SIGINT:
            return "interrupted"
        try:
            name = signal.Signals(self.signum).name
        except ValueError:
            name = f"signal {self.signum}"
        return f"terminated ({name})"


class _State:
    seen = 0              # signals received since install()
    pending: int | None = None
    depth = 0             # nesting of deferred() in the main thread


_state = _State()


def _handler(signum: int, _frame: FrameType | None) -> None:
    _state.seen += 1
    if _state.seen == 1:
        if _state.depth:
            _state.pending = signum
            return
        raise Interrupted(signum)
    if _state.seen >= 3:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def install() -> Callable[[], None]:
    """Turn SIGINT, SIGTERM and SIGHUP into :class:`Interrupted`; returns a function that puts
    the previous handlers back.  Does nothing outside the main thread (Python runs signal handlers
    there only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _state.seen, _state.pending, _state.depth = 0, None, 0
    previous: dict[int, object] = {}
    for sig in HANDLED:
        old = signal.getsignal(sig)
        if old is signal.SIG_IGN:
            continue
        previous[sig] = old
        signal.signal(sig, _handler)

    def restore() -> None:
        for sig, old in previous.items():
            if signal.getsignal(sig) is _handler:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)

    return restore


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal that arrives inside the block; raise its :class:`Interrupted` when the
    outermost block ends.  Only the main thread's blocks count (the handler runs there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1
        if _state.depth == 0 and _state.pending is not None:
            signum, _state.pending = _state.pending, None
            raise Interrupted(signum)


@contextlib.contextmanager
def blocked(*signals: int) -> Iterator[None]:
    """Block ``signals`` in this thread for the block: a process started inside it (fork + exec)
    begins with them blocked, so a Ctrl-C cannot reach it before it has set its own handling.
    A signal that arrives meanwhile is delivered when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def ignore_interrupts() -> None:
    """In a worker process: ignore SIGINT (the driver handles Ctrl-C and stops the workers), and
    unblock it, dropping one that arrived while it was blocked (see :func:`blocked`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))


def die_with_parent(parent_pid: int) -> bool:
    """Have the kernel send SIGKILL to this process when its parent dies (Linux
    ``PR_SET_PDEATHSIG``); True when set.  If the parent (``parent_pid``) is already gone, this
    process kills itself now.

    NOTE: the kernel ties this to the parent *thread* that started the process: start workers
    from a thread that lives as long as they should (the sweep starts them from the main thread).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    return True
