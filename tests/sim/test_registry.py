"""The registry is the one list of policies, read from the files: every policy is a file
shadow/sim/policies/<family>/<name>.pyx in the folder of its spec's family, is built, declares a
valid spec, has a pure-Python reference with the same defaults, a test module and a section in
its family's document, docs/policies/<family>.md.  Adding a policy without any of these fails
here (it is never skipped)."""

from __future__ import annotations

import re
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from shadow.sim.params import parse_params
from shadow.sim.reference import reference_module
from shadow.sim.registry import (ALIASES, FAMILIES, ORDER, POLICIES, POLICY_FAMILIES, PolicySpec,
                                 family_package, policy_info, policy_specs, scan_policies)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_is_complete(name):
    info = policy_info(name)                       # raises PolicyNotBuilt when it is not built
    spec = info.spec
    assert isinstance(spec, PolicySpec) and spec.family in FAMILIES
    source = ROOT / (info.module.replace(".", "/") + ".pyx")
    assert source.is_file(), f"no {source.relative_to(ROOT)}"
    assert source.parent.name == family_package(spec.family) == family_package(POLICY_FAMILIES[name]), \
        f"{source.relative_to(ROOT)} is not in the folder of its family {spec.family!r}"
    ref = reference_module(name)                   # raises LookupError when it has none
    assert parse_params(None, getattr(ref, "DEFAULTS", "")) == parse_params(None, spec.defaults), \
        f"the reference's DEFAULTS differ from {name}'s spec"
    assert (ROOT / "tests" / "sim" / f"test_{name}.py").is_file(), f"no tests/sim/test_{name}.py"
    doc = ROOT / "docs" / "policies" / f"{family_package(spec.family)}.md"
    assert re.search(rf"^### `?{re.escape(name)}`?\s*$", doc.read_text(), re.M), \
        f"{doc.relative_to(ROOT)} has no section for {name}"


def test_the_order_names_every_policy_file_and_nothing_else():
    files = set(scan_policies())
    assert set(ORDER) - set(ALIASES) == files, (
        f"in ORDER without a file: {sorted(set(ORDER) - set(ALIASES) - files)}; "
        f"a file missing from ORDER: {sorted(files - set(ORDER))}")
    assert len(set(ORDER)) == len(ORDER) and list(POLICIES) == list(ORDER)
    assert all(target in files and alias not in files for alias, target in ALIASES.items())


def test_a_policy_file_is_found_built_or_not(tmp_path):
    (tmp_path / "recency").mkdir()
    (tmp_path / "cost_aware").mkdir()
    (tmp_path / "recency" / "mine.pyx").write_text("")
    (tmp_path / "recency" / "_helper.pyx").write_text("")
    (tmp_path / "recency" / "mine.pxd").write_text("")
    (tmp_path / "cost_aware" / f"built{EXTENSION_SUFFIXES[0]}").write_text("")
    (tmp_path / "cost_aware" / "built_c.c").write_text("")
    found = scan_policies(tmp_path)
    assert found == {"mine": "recency", "built": "cost-aware"}
    (tmp_path / "cost_aware" / "mine.pyx").write_text("")
    with pytest.raises(RuntimeError, match="two families"):
        scan_policies(tmp_path)


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


def test_the_families_table_of_docs_policies_md_is_the_registry():
    """docs/policies.md's table of families names each family's document and exactly its
    policies, in --list-algos order."""
    text = (ROOT / "docs" / "policies.md").read_text()
    rows = re.findall(r"^\| \[[^]]*\]\(policies/(\w+)\.md\) \| `([\w-]+)` \| ([^|]*) \|$", text, re.M)
    assert [fam for _, fam, _ in rows] == list(FAMILIES)
    for pkg, fam, names in rows:
        assert pkg == family_package(fam)
        assert (ROOT / "docs" / "policies" / f"{pkg}.md").is_file()
        want = [n for n in ORDER if POLICY_FAMILIES[ALIASES.get(n, n)] == fam]
        assert [n.strip() for n in names.split(",")] == want, fam
