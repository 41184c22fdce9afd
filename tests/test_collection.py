"""The root conftest leaves out, uncollected, a module whose ``pytestmark`` the ``-m`` expression
rules out for every test in it (so ``make test-unit`` never imports vLLM)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import _deselects_every_test, _module_marks


def _unit_expression() -> str:
    """The ``-m`` expression of the Makefile's test-unit recipe (the one place it is written)."""
    make = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    m = re.search(r'^test-unit:.*\n\t.*?-m "([^"]+)"', make, re.M)
    assert m, "the Makefile's test-unit recipe has no -m expression"
    return m.group(1)


UNIT = _unit_expression()


@pytest.mark.parametrize("expr, marks, out", [
    (UNIT, {"vllm"}, True),
    (UNIT, {"slow", "ray"}, True),
    (UNIT, set(), False),
    ("not slow", {"vllm"}, False),          # make test-fast keeps the vLLM-importing modules
    ("vllm or slow", {"ray"}, False),       # a test in it may be marked slow itself
    ("vllm and not slow", {"vllm"}, False),
    ("vllm and not slow", {"slow"}, True),
    ("not (vllm or ray)", {"ray"}, True),
])
def test_deselects_every_test(expr, marks, out):
    assert _deselects_every_test(expr, frozenset(marks)) is out


def test_module_marks_are_read_from_the_source(tmp_path):
    p = tmp_path / "test_x.py"
    p.write_text("import pytest\nimport vllm_not_installed\n"
                 "pytestmark = [pytest.mark.vllm, pytest.mark.slow,\n"
                 "              pytest.mark.skipif(True, reason='x')]\n")
    assert _module_marks(p) == {"vllm", "slow", "skipif"}
    p.write_text("import pytest\npytestmark = pytest.mark.prometheus\n")
    assert _module_marks(p) == {"prometheus"}
    p.write_text("def broken(:\n")
    assert _module_marks(p) == frozenset()


@pytest.mark.slow
def test_collecting_the_unit_tier_imports_no_vllm(request):
    """Collecting every test under the unit tier's expression leaves vLLM unimported (a module
    that imports it at its top must be marked ``vllm``)."""
    import subprocess
    import sys

    code = ("import sys, pytest\n"
            "rc = pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', '-p', 'no:xdist',"
            " '-m', %r, 'tests'])\n"
            "print('VLLM-IMPORTED' if 'vllm' in sys.modules else 'VLLM-NOT-IMPORTED', rc)\n" % UNIT)
    out = subprocess.run([sys.executable, "-c", code], cwd=request.config.rootpath,
                         capture_output=True, text=True, timeout=300).stdout
    assert "VLLM-NOT-IMPORTED 0" in out, out[-3000:]
