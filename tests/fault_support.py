"""Support for the fault suite (tests/test_faults.py): shadow as a child process, stopped at a
chosen point, a signal sent there; the processes it started, found and watched through /proc.

A point is a predicate over the running command (its temporary exists, it has the input open, it
printed a line); :func:`stop_at` polls it, freezes the process with SIGSTOP and looks again, so a
signal sent then lands at that point, not a moment later.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from shadow.sweep.plan import Cell

ROOT = Path(__file__).resolve().parent.parent

#: The shadow command line of a child process.
SHADOW = [sys.executable, "-m", "shadow"]

#: A cell function for sweeps whose cells must still be running when the signal comes: cells of
#: capacity 1024 return at once, the others sleep this long (the driver must not wait for them).
SLOW_CELL_S = 120.0

#: Runs ``shadow`` with :func:`slow_cell` as the sweep's cell function (argv: the sweep's).
SLOW_SWEEP = [sys.executable, "-c",
              "import sys, shadow.sweep.cell as c, tests.fault_support as f; "
              "c.run_cell = f.slow_cell; from shadow.cli import main; main(sys.argv[1:])"]


def slow_cell(cell: Cell) -> str:
    """A stand-in cell: capacity 1024 completes at once, every other one sleeps SLOW_CELL_S."""
    if cell.capacity != 1024:
        time.sleep(SLOW_CELL_S)
    return (f"RESULT trace={cell.trace_name} algo={cell.algo} cache_size={cell.capacity} "
            f"cost_model={cell.cost_model} n_req=1 block_hit_ratio=0.5\n")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    extra = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + extra if extra else "")
    env.pop("SHADOW_DEBUG", None)
    return env


def _child_setup(fsize: int | None) -> Callable[[], None]:
    def setup() -> None:
        # NOTE: a test runner started in the background may ignore SIGINT; shadow keeps an
        # ignored SIGINT ignored (nohup), so the child gets the default back, as from a shell
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, resource.RLIM_INFINITY))
    return setup


def start(argv: Sequence[str], *, cwd: Path | str, fsize: int | None = None) -> subprocess.Popen:
    """Start ``argv`` in a new session (its own process group), stdout and stderr piped.
    ``fsize``: RLIMIT_FSIZE in bytes (writes past it fail with EFBIG; Python ignores SIGXFSZ)."""
    return subprocess.Popen(list(argv), cwd=str(cwd), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_child_setup(fsize))


def run(argv: Sequence[str], *, cwd: Path | str, fsize: int | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end (see :func:`start`)."""
    proc = start(argv, cwd=cwd, fsize=fsize)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


#: Runs a command as root without the capabilities that let root write anywhere, so that a
#: read-only directory stops it as it stops any user.
_NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@functools.cache
def without_dac_override() -> list[str] | None:
    """The argv prefix that runs a command without CAP_DAC_OVERRIDE (for root), or None where
    that cannot be done (no setpriv, or no right to drop capabilities: a container)."""
    if shutil.which("setpriv") is None:
        return None
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o555)
        try:
            probe = subprocess.run([*_NO_DAC, sys.executable, "-c", "import os, sys; "
                                    "sys.exit(1 if os.access(sys.argv[1], os.W_OK) else 0)", d],
                                   capture_output=True, timeout=60)
        finally:
            os.chmod(d, 0o755)
    return list(_NO_DAC) if probe.returncode == 0 else None


# -- processes, through /proc ------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, parent pid, start time) of ``pid``, None when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[19])


def descendants(pid: int) -> dict[int, int]:
    """Every process below ``pid`` now: {pid: start time} (the start time tells a reused pid)."""
    table: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and st[0] != "Z":
                table[int(entry)] = (st[1], st[2])
    out: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start_time) in table.items():
            if ppid == parent and child not in out:
                out[child] = start_time
                frontier.append(child)
    return out


def alive(procs: dict[int, int]) -> list[int]:
    """The processes of ``procs`` still running (a zombie counts as gone)."""
    out = []
    for pid, start_time in procs.items():
        st = _stat(pid)
        if st is not None and st[0] != "Z" and st[2] == start_time:
            out.append(pid)
    return out


def wait_gone(procs: dict[int, int], timeout: float = 10.0) -> list[int]:
    """Wait until every process of ``procs`` is gone; the ones left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = alive(procs)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.02)


def open_files(pid: int) -> list[str]:
    """The paths ``pid`` has open (its /proc/PID/fd links)."""
    out = []
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
            except OSError:
                pass
    except OSError:
        pass
    return out


def stop_at(proc: subprocess.Popen, point: Callable[[], bool], timeout: float = 60.0) -> bool:
    """Freeze ``proc`` (SIGSTOP) at a moment when ``point()`` holds; False if it ended first.

    Polls ``point``; when it holds, stops the process and checks again (it may have moved on
    between the two), resuming and polling on if not.  The caller sends its signal, then
    SIGCONT (:func:`signal_at`).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if point():
            os.kill(proc.pid, signal.SIGSTOP)
            _wait_stopped(proc.pid)
            if point():
                return True
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.001)
    return False


def _wait_stopped(pid: int) -> None:
    for _ in range(2000):
        st = _stat(pid)
        if st is None or st[0] in ("T", "t", "Z"):
            return
        time.sleep(0.0005)


def signal_at(proc: subprocess.Popen, point: Callable[[], bool], sig: int, *,
              group: bool = False, timeout: float = 60.0) -> dict[int, int]:
    """Send ``sig`` to ``proc`` (``group``: its whole process group, as a terminal's Ctrl-C)
    at ``point`` (see :func:`stop_at`); returns the processes it had started by then."""
    assert stop_at(proc, point, timeout), "the command ended before the point was reached"
    kids = descendants(proc.pid)
    if group:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    if sig != signal.SIGKILL:
        os.kill(proc.pid, signal.SIGCONT)
    return kids


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[str, str]:
    """Wait for ``proc``; (stdout, stderr).  Kills its group if it outlives ``timeout``."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"still running after {timeout} s; stderr: {err[-2000:]}") from None


def stray_files(directory: Path, keep: Sequence[str] = ()) -> list[str]:
    """Names in ``directory`` (recursively) that are temporaries or partial files, or not in
    ``keep`` when ``keep`` is given."""
    out = []
    for p in sorted(directory.rglob("*")):
        rel = str(p.relative_to(directory))
        if p.name.startswith(".tmp-") or p.name.endswith((".partial", ".tmp")):
            out.append(rel)
        elif keep and p.is_file() and rel not in keep:
            out.append(rel)
    return out
