"""The registry is the one list of policies: every registered policy is built, declares a valid
spec, has a pure-Python reference with the same defaults, a test module and a section in
docs/policies.md.  Adding a policy without any of these fails here (it is never skipped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shadow.sim.params import parse_params
from shadow.sim.reference import reference_module
from shadow.sim.registry import FAMILIES, POLICIES, PolicySpec, policy_info, policy_specs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_is_complete(name):
    info = policy_info(name)                       # raises PolicyNotBuilt when it is not built
    spec = info.spec
    assert isinstance(spec, PolicySpec) and spec.family in FAMILIES
    ref = reference_module(name)                   # raises LookupError when it has none
    assert parse_params(None, getattr(ref, "DEFAULTS", "")) == parse_params(None, spec.defaults), \
        f"the reference's DEFAULTS differ from {name}'s spec"
    assert (ROOT / "tests" / "sim" / f"test_{name}.py").is_file(), f"no tests/sim/test_{name}.py"
    doc = (ROOT / "docs" / "policies.md").read_text()
    assert re.search(rf"^#+ `?{re.escape(name)}`?\s*$", doc, re.M), \
        f"docs/policies.md has no section for {name}"


def test_specs_are_read_in_registry_order():
    assert list(policy_specs(built_only=False)) == list(POLICIES)


@pytest.mark.parametrize("bad,match", [
    (dict(description="x", family="nosuch"), "family"),
    (dict(description="", family="recency"), "description"),
    (dict(description="x", family="recency", weight=0), "weight"),
    (dict(description="x", family="recency", honours_pins=False, strict_pins=True),
     "strict_pins"),
    (dict(description="x", family="recency", defaults="a=1", reference_params="b=2"),
     "unknown"),
])
def test_a_bad_spec_is_refused(bad, match):
    with pytest.raises(Exception, match=match):
        PolicySpec(**bad)
