"""shadow.signals: SIGINT, SIGTERM and SIGHUP as one Interrupted each, held inside deferred(),
never a second one during cleanup; an ignored signal stays ignored; die_with_parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from shadow.signals import Interrupted, deferred, install
from tests.fault_support import ROOT, alive, wait_gone


@pytest.fixture
def handlers():
    # NOTE: a test run started under nohup (or by a runner that ignores SIGHUP) inherits an
    # ignored SIGHUP, which install() rightly leaves ignored: these tests need the default.
    ignored = [s for s in (signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) is signal.SIG_IGN]
    for s in ignored:
        signal.signal(s, signal.SIG_DFL)
    restore = install()
    yield
    restore()
    for s in ignored:
        signal.signal(s, signal.SIG_IGN)


def _wait_for_signal() -> None:
    # NOTE: the handler runs at the next bytecode of the main thread
    for _ in range(100):
        time.sleep(0.001)


@pytest.mark.slow
@pytest.mark.parametrize("sig, status, words", [(signal.SIGINT, 130, "interrupted"),
                                                (signal.SIGTERM, 143, "terminated (SIGTERM)"),
                                                (signal.SIGHUP, 129, "terminated (SIGHUP)")])
def test_a_signal_is_one_interrupted(handlers, sig, status, words) -> None:
    with pytest.raises(Interrupted) as info:
        os.kill(os.getpid(), sig)
        _wait_for_signal()
    assert info.value.exit_status == status and info.value.describe() == words
    os.kill(os.getpid(), sig)       # a second one, as during cleanup: held, not raised
    _wait_for_signal()


def test_deferred_holds_the_signal_to_the_end_of_the_block(handlers) -> None:
    done = []
    with pytest.raises(Interrupted):
        with deferred():
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                _wait_for_signal()
                done.append("inner")
            done.append("outer")
    assert done == ["inner", "outer"]


def test_an_ignored_signal_stays_ignored() -> None:
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        restore = install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        restore()
    finally:
        signal.signal(signal.SIGHUP, old)


CHILD = """
import os, subprocess, sys, time
sys.path.insert(0, {root!r})
grandchild = subprocess.Popen([sys.executable, "-c", {code!r}, str(os.getpid())])
print(grandchild.pid, flush=True)
time.sleep(600)
"""

GRANDCHILD = """
import sys, time
sys.path.insert(0, {root!r})
from shadow.signals import die_with_parent
assert die_with_parent(int(sys.argv[1]))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_die_with_parent_dies_when_its_parent_is_killed() -> None:
    code = GRANDCHILD.format(root=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), code=code)],
                            stdout=subprocess.PIPE, text=True)
    try:
        pid = int(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "ready"
        start = open(f"/proc/{pid}/stat").read().split(")")[1].split()[19]
        assert alive({pid: int(start)})
        proc.kill()
        proc.wait(timeout=10)
        assert wait_gone({pid: int(start)}, timeout=10) == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_die_with_parent_when_the_parent_is_already_gone() -> None:
    code = ("import os, sys; sys.path.insert(0, %r); from shadow.signals import die_with_parent; "
            "die_with_parent(os.getppid() + 1); print('not reached')" % str(ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    if sys.platform.startswith("linux"):
        assert r.returncode == -signal.SIGKILL and r.stdout == ""
