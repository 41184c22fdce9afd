"""Executors: run a cell function over many cells, yielding each outcome as it completes.

A cell function takes a :class:`~shadow.sweep.plan.Cell` and returns the simulator's output text
(its RESULT lines); it must be a module-level function (it is pickled by reference).  Every
executor wraps it in :func:`guarded`, so a cell that raises becomes an :class:`Outcome` with a
one-line error and the other cells go on.

* :class:`SerialExecutor`  in this process, one cell after another (the baseline, ``--jobs 1``)
* :class:`LocalExecutor`   a process pool on this machine (``--executor local --jobs N``)
* :class:`RayExecutor`     Ray tasks on a cluster (``--executor ray --address ...``); ``ray`` is
  imported only here, only when used

Invariant: an executor yields exactly one outcome per cell it was given, whatever happens to the
worker that ran it (an exception, a crashed process, a lost Ray node).

Invariant (local pool): no worker outlives the sweep.  Workers ignore SIGINT (a terminal's Ctrl-C
reaches the whole process group; the driver alone handles it, so no worker prints a traceback) and
get SIGKILL from the kernel when the driver dies, even by SIGKILL (``PR_SET_PDEATHSIG``, Linux);
a driver stopped by an exception or a signal kills its workers before it goes on.  The
multiprocessing resource tracker then exits by itself (its pipe closes with the last of them).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

from shadow.errors import ShadowError
from shadow.signals import blocked, deferred, die_with_parent, ignore_interrupts
from shadow.sweep.plan import Cell

logger = logging.getLogger(__name__)

CellFn = Callable[[Cell], str]


@dataclass(frozen=True)
class Outcome:
    """What became of one cell: its output text, or a one-line error."""

    cell: Cell
    text: str | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def one_line_error(exc: BaseException) -> str:
    """An exception as one line: the message alone for ShadowError, else 'Type: message'."""
    msg = " ".join(str(exc).split())
    if isinstance(exc, ShadowError):
        return msg or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def guarded(fn: CellFn, cell: Cell) -> Outcome:
    """Run ``fn(cell)``; an exception becomes a failed outcome (it never escapes)."""
    try:
        return Outcome(cell, fn(cell))
    except Exception as exc:  # NOTE: one bad cell must not stop the sweep
        logger.debug("cell %s failed", cell.label(), exc_info=True)
        return Outcome(cell, None, one_line_error(exc))


class Executor(Protocol):
    """Runs cells.  An executor may also have ``start()`` (connect before the sweep writes
    anything; a failure there leaves nothing) and then closes what it opened when ``run`` ends."""

    def run(self, fn: CellFn, cells: Sequence[Cell]) -> Iterator[Outcome]: ...


class SerialExecutor:
    """Every cell in this process, in order."""

    def run(self, fn: CellFn, cells: Sequence[Cell]) -> Iterator[Outcome]:
        for cell in cells:
            yield guarded(fn, cell)


def _mp_context() -> multiprocessing.context.BaseContext:
    # NOTE: not 'fork': the parent may hold threads (Ray's, a logging handler's) whose locks a
    # forked child would inherit held.  Not 'forkserver' either: its server is started once per
    # interpreter and its children inherit the environment of that moment, not of this sweep.
    # 'spawn' costs an interpreter start and the imports per worker, once per sweep.
    return multiprocessing.get_context("spawn")


def _worker_init(driver_pid: int) -> None:
    """Pool worker start-up: ignore SIGINT, die with the driver."""
    ignore_interrupts()
    die_with_parent(driver_pid)


#: Longest the driver's main thread blocks waiting for cells.  NOTE: a signal the kernel hands
#: to another thread (the pool's manager thread) only sets a flag that the main thread reads when
#: it runs Python code: it must not sleep until a cell that takes minutes ends.
WAKE_S = 0.25

#: The resource tracker's warning when a driver killed by SIGKILL could not release its queues'
#: semaphores (the tracker releases them; the line would land on the terminal after the kill).
_TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker now, with its leak warning off (it inherits the
    environment of this moment; nothing else does)."""
    from multiprocessing import resource_tracker

    old = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = f"{old},{_TRACKER_QUIET}" if old else _TRACKER_QUIET
    try:
        resource_tracker.ensure_running()
    finally:
        if old is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = old


def _new_pool(jobs: int, ctx: multiprocessing.context.BaseContext) -> ProcessPoolExecutor:
    _start_resource_tracker()
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_worker_init,
                               initargs=(os.getpid(),))


def _submit(pool: ProcessPoolExecutor, fn: CellFn, cells: Sequence[Cell]) -> dict[Future, Cell]:
    """Submit every cell; the workers start here (fork + exec, in this thread).

    NOTE: SIGINT blocked, so a worker begins with it blocked and a Ctrl-C cannot reach it
    before its initializer ignores it; signals deferred, so the driver is not stopped halfway
    through starting a worker (which would then fail on its half-sent start-up data).  The
    driver's signal is raised when the workers are all started and known to the pool.
    """
    with blocked(signal.SIGINT), deferred():
        return {pool.submit(guarded, fn, c): c for c in cells}


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now: drop the queued cells and kill the workers (a cell in flight may run for
    minutes; shutdown alone would wait for it at interpreter exit)."""
    # NOTE: _processes is the pool's own table; shutdown() drops it, so it is read first.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.join(timeout=5)
        except (OSError, ValueError, AssertionError):
            pass


class LocalExecutor:
    """A pool of ``jobs`` worker processes on this machine.

    A worker that dies (a crash in native code, the OOM killer) breaks the pool; the cells it had in
    flight are then run again, each alone in a fresh one-worker pool, so only the cell that really
    crashes is reported failed.
    """

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)

    def run(self, fn: CellFn, cells: Sequence[Cell]) -> Iterator[Outcome]:
        if not cells:
            return
        retry: list[Cell] = []
        ctx = _mp_context()
        pool = _new_pool(min(self.jobs, len(cells)), ctx)
        try:
            pending = _submit(pool, fn, cells)
            while pending:
                done, _ = wait(pending, timeout=WAKE_S, return_when=FIRST_COMPLETED)
                for fut in done:
                    cell = pending.pop(fut)
                    try:
                        outcome = fut.result()
                    except BrokenProcessPool:
                        retry.append(cell)
                        continue
                    yield outcome
        except BaseException:
            # NOTE: Ctrl-C, SIGTERM or the consumer stopped: drop the queued cells, kill the
            # workers, do not wait for the cells in flight.
            _stop(pool)
            raise
        pool.shutdown(wait=True)
        for cell in retry:
            yield self._run_alone(fn, cell, ctx)

    @staticmethod
    def _run_alone(fn: CellFn, cell: Cell, ctx: multiprocessing.context.BaseContext) -> Outcome:
        pool = _new_pool(1, ctx)
        try:
            (fut,) = _submit(pool, fn, [cell])
            while not wait([fut], timeout=WAKE_S).done:
                pass
            outcome = fut.result()
        except BrokenProcessPool:
            outcome = Outcome(cell, None, "the worker process died while running this cell")
        except BaseException:
            _stop(pool)
            raise
        pool.shutdown(wait=True)
        return outcome


class RayExecutor:
    """One Ray task per cell.  Connects to ``address`` (None: a running local instance, or a new one).

    The trace paths in the cells must name the same file on every node, and ``shadow`` (with its
    built extensions) must be importable there.  An already initialised Ray (``ray.init`` in the
    caller) is used as it is and left running.
    """

    def __init__(self, address: str | None = None, *, num_cpus_per_cell: float = 1.0) -> None:
        # NOTE: imported here, before the sweep directory is made, so a missing Ray leaves nothing
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ShadowError("--executor ray needs Ray: pip install 'shadow-kv[ray]'") from None
        self.address = address
        self.num_cpus_per_cell = num_cpus_per_cell
        self._started = False

    def start(self) -> None:
        """Connect to Ray (or start a local instance) unless Ray is already initialised here.

        NOTE: the sweep calls this before it makes its directory, so an unreachable cluster leaves
        nothing behind.
        """
        import ray

        if self._started or ray.is_initialized():
            return
        _probe(self.address)
        try:
            ray.init(address=self.address, include_dashboard=False, logging_level=logging.WARNING,
                     log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ShadowError(f"cannot connect to Ray at {self.address or 'a local instance'}: "
                              f"{one_line_error(exc)}") from None
        self._started = True

    def close(self) -> None:
        """Shut down the Ray connection this executor opened (one opened by the caller stays)."""
        if self._started:
            import ray

            ray.shutdown()
            self._started = False

    def run(self, fn: CellFn, cells: Sequence[Cell]) -> Iterator[Outcome]:
        if not cells:
            self.close()
            return
        import ray

        self.start()
        try:
            remote = ray.remote(num_cpus=self.num_cpus_per_cell, max_retries=1)(guarded)
            refs = {remote.remote(fn, c): c for c in cells}
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        yield ray.get(ref)
                    except Exception as exc:  # a lost worker or node: the task itself never raises
                        yield Outcome(refs[ref], None, one_line_error(exc))
        finally:
            self.close()


#: Seconds to wait for a Ray head's port before refusing the address.
PROBE_TIMEOUT_S = 5.0


def _probe(address: str | None) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) address whose port does not answer.

    NOTE: ``ray.init`` retries an unreachable head for minutes before it raises; a TCP connect
    answers at once (refused) or within :data:`PROBE_TIMEOUT_S`.  Other forms (``auto``,
    ``local``, None) go to Ray unchanged.
    """
    if not address or address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        raise ShadowError(f"--address {address!r}: expected HOST:PORT, ray://HOST:PORT, auto or local")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ShadowError(f"cannot connect to Ray at {address}: {why.lower()}") from None


def make_executor(kind: str, *, jobs: int | None = None, address: str | None = None) -> Executor:
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address)
    if kind == "serial":
        return SerialExecutor()
    raise ShadowError(f"unknown executor {kind!r}: expected local or ray")


def is_tty(stream=None) -> bool:
    stream = stream or sys.stderr
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
