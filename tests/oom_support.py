"""Real allocation failures for tests: a child process lowers its own address-space limit.

A test runs its case in a child process (:func:`run_child`); the child builds what it needs, then
calls :func:`squeeze` to lower its ``RLIMIT_AS`` to what it uses plus :data:`HEADROOM`, so the next
allocation larger than that fails for real (no fault injection), and :func:`relax` to lift it
again.  The child prints ``RESULT <json>`` as its last such line; an abort would kill it
(SIGABRT), which fails the test.
"""

from __future__ import annotations

import ctypes
import json
import resource
import subprocess
import sys
from pathlib import Path

#: Room left for Python itself once squeezed; every allocation a test expects to fail is larger.
HEADROOM = 8 << 20

REPO_ROOT = Path(__file__).resolve().parent.parent


def fix_mmap_threshold() -> None:
    """A fixed mmap threshold (glibc's ``M_MMAP_THRESHOLD`` = -3): glibc would otherwise raise
    it as large blocks are freed and serve later ones from freed heap space, which the squeeze
    cannot see.  Call it first thing in the child."""
    ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)


def vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def squeeze() -> tuple[int, int]:
    """Limit the address space to its current size + :data:`HEADROOM`; returns the old limit."""
    saved = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + HEADROOM, saved[1]))
    return saved


def relax(saved: tuple[int, int]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, saved)


def result(out: object) -> None:
    """What the child reports (call once, at its end)."""
    print("RESULT " + json.dumps(out), flush=True)


def run_child(code: str, case: object, timeout_s: float = 300.0) -> dict:
    """Run ``code`` (``sys.argv[1]`` holds ``case`` as JSON) in a fresh interpreter from the
    repository root; its :func:`result`."""
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(case)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])
