"""Fixtures of the sweep tests: the bundled trace converted to lcp once per session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "shadow" / "data" / "mooncake_synthetic.jsonl"


@pytest.fixture(scope="session")
def trace(tmp_path_factory) -> str:
    """The bundled Mooncake synthetic trace as .lcp.zst (made by `shadow convert`)."""
    pytest.importorskip("shadow.sim.core.loop")
    out = tmp_path_factory.mktemp("trace") / "synthetic.lcp.zst"
    proc = subprocess.run([sys.executable, "-m", "shadow", "convert", str(BUNDLED), str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return str(out)
