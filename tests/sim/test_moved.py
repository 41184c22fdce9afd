"""The module names of shadow.sim before its sub-packages (shadow/sim/_moved.py): each imports as
the module that now holds the code, warning once; the documented public imports still work."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from shadow.sim._moved import MOVED
from tests.tiers import unit_rows

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "shadow" / "sim"


@pytest.mark.parametrize("old", unit_rows(sorted(MOVED), 6))
def test_an_old_name_is_the_new_module_and_warns_once(old):
    code = ("import importlib, sys, warnings\n"
            "warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            f"    a = importlib.import_module('shadow.sim.{old}')\n"
            f"    b = importlib.import_module('shadow.sim.{old}')\n"
            f"new = importlib.import_module('shadow.sim.{MOVED[old]}')\n"
            "assert a is b is new, (a, new)\n"
            "dep = [x for x in w if issubclass(x.category, DeprecationWarning)]\n"
            "assert len(dep) == 1, [str(x.message) for x in w]\n"
            f"assert 'shadow.sim.{MOVED[old]}' in str(dep[0].message)\n")
    # NOTE: a fresh interpreter: the warning fires on the first import of a process only
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_old_names_left_no_file_behind():
    # an old name is only an alias: no module, package or built extension of that name remains
    for old in MOVED:
        stem = SIM / old.replace(".", "/")
        assert not stem.with_suffix(".py").exists() and not stem.is_dir(), old
        assert not list(stem.parent.glob(f"{stem.name}.*.so")), f"stale extension of {old}"
        assert (SIM / (MOVED[old].replace(".", "/"))).parent.is_dir(), MOVED[old]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_documented_imports_still_work():
    from shadow.sim import Admission, CacheSpec, LiveBatch, Result, Simulator
    from shadow.sim.cost import CostModel, parse_cost_model
    from shadow.sim.live import Admission as A2, LiveBatch as L2
    from shadow.sim.results import CacheSpec as C2
    from shadow.sim.simulator import Simulator as S2
    from shadow.sim.vllm_pool import VllmBlockPool
    assert (A2, L2, C2, S2) == (Admission, LiveBatch, CacheSpec, Simulator)
    assert Result.__module__ == "shadow.sim.core.results"
    assert VllmBlockPool.__module__ == "shadow.sim.engine.pool"
    assert parse_cost_model("uniform").name == "uniform" and CostModel


def test_an_unknown_name_is_still_missing():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("shadow.sim.no_such_module")


def test_the_old_timing_module_names_read_from_the_package_warning_once():
    # shadow.sim.timing was a module before it was a package: its names read from the package
    from shadow.sim.timing import MOVED_NAMES
    code = ("import warnings, shadow.sim.timing as t\n"
            "warnings.simplefilter('always')\n"
            "for name in t.MOVED_NAMES:\n"
            "    with warnings.catch_warnings(record=True) as w:\n"
            "        a = getattr(t, name)\n"
            "        exec(f'from shadow.sim.timing import {name} as b')\n"
            "        import shadow.sim.timing.run, shadow.sim.timing.service\n"
            "    assert a is b is getattr(shadow.sim.timing.run, name), name\n"
            "    dep = [str(x.message) for x in w if issubclass(x.category, DeprecationWarning)]\n"
            "    assert dep == [f'shadow.sim.timing.{name} is now shadow.sim.timing.run.{name}; '\n"
            "                   f'import it from there'], dep\n"
            "try:\n"
            "    from shadow.sim.timing import no_such_name\n"
            "except ImportError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('an unknown name imported')\n")
    # NOTE: a fresh interpreter: each name warns on its first read in a process only
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "run_trace_recorded" in MOVED_NAMES
