"""asym_cache_time: another name of asym_cache (the PrefixSim fork's older registration of the
wall-clock variant): the same module, spec and reference, and the shared checks under this name."""

from __future__ import annotations

from shadow.sim.reference import reference_module
from shadow.sim.registry import make_policy, policy_info
from tests.sim.policy_mixin import PolicyMixin


class TestAsymCacheTime(PolicyMixin):
    NAME = "asym_cache_time"


def test_an_alias_of_asym_cache():
    assert policy_info("asym_cache_time").spec is policy_info("asym_cache").spec
    assert type(make_policy("asym_cache_time", 4)) is type(make_policy("asym_cache", 4))
    assert reference_module("asym_cache_time").make is reference_module("asym_cache").make
