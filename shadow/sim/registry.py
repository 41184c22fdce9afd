"""Every policy name of the simulator, mapped to the module that implements it.

The names come from the files: ``shadow/sim/policies/<family>/<name>.pyx`` is policy ``<name>`` of
``<family>`` (its package), listed even before its module is built (:func:`make_policy` then says
so clearly); by hand are only the ``--list-algos`` order (:data:`ORDER`) and other names of a
policy (:data:`ALIASES`).  A policy module provides ``make(capacity, params)``
and ``SPEC``, one :class:`PolicySpec`: the one place that says what the policy is (defaults,
pins, oracle, family, stepping weight, which libCacheSim class it equals, ...).  The CLI, the
stepper, the connector's checks, the benchmarks and the tests read their lists from here.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from shadow.errors import ShadowError
from shadow.sim.params import parse_params, split_modifiers

#: Families, in ``--list-algos`` order.
FAMILIES = ("recency", "frequency", "adaptive", "cost-aware", "oracle", "partial-node", "session",
            "engine-exact")

#: ``--list-algos`` order, by hand: single queue, multi-queue, cost-aware and oracles, partial-node,
#: then the engine-exact policies.  Every name is a file ``policies/<family>/<name>.pyx`` or an
#: alias (tests/sim/test_registry.py holds both ways).
ORDER: tuple[str, ...] = (
    "lru", "mru", "lru_prob", "fifo", "clock", "sieve", "random", "randomtwo", "randomlru", "lfu",
    "lfuda", "hyperbolic", "size", "fifo_merge", "s3fifo", "s3fifo_compute", "qdlp", "s3fifod",
    "lecar", "twoq", "cacheus", "lirs", "arc", "car", "slru", "wtinylfu", "gdsf", "gdsf_compute",
    "lhd", "lhd_compute", "workload_aware", "asym_cache", "asym_cache_time", "belady",
    "belady_compute", "random_compute", "random_compute_small_queue", "partial_node_random_compute",
    "partial_node_random_freq", "partial_node_random_compute_small_queue", "session_lru",
    "session_s3fifo", "session_arc", "session_belady", "session_random_compute", "vllm", "sglang",
)

#: Other names of a policy: the PrefixSim fork's older registration of asym_cache.
ALIASES: dict[str, str] = {"asym_cache_time": "asym_cache"}


#: The largest cache a policy holds: slot numbers are 31-bit (shadow/sim/core/policy.pxd).
MAX_CAPACITY = 2**31 - 2


#: libCacheSim policies that are left out, and why (listed by ``--list-algos``).
EXCLUDED: dict[str, str] = {
    "clockpro": "refuses admission (libCacheSim ClockPro's can_insert), which a prefix cache "
                "cannot express: every block of a served request is cached",
}


#: Where the policies are: one package per family (:func:`family_package`), one module per policy.
POLICY_ROOT = Path(__file__).resolve().parent / "policies"


def family_package(family: str) -> str:
    """The package of a family's policies: ``"cost-aware"`` -> ``"cost_aware"``."""
    return family.replace("-", "_")


def scan_policies(root: Path = POLICY_ROOT) -> dict[str, str]:
    """Name -> family of every policy file under ``root/<family>/``: a ``.pyx`` or a built
    extension (an installed package may hold only those), named after the policy.

    NOTE: a module whose name starts with ``_`` is not a policy (``session/_base``, ``_shared/``),
    so a family may keep its shared machinery beside its policies.
    """
    suffixes = (".pyx", *importlib.machinery.EXTENSION_SUFFIXES)
    found: dict[str, str] = {}
    for family in FAMILIES:
        folder = root / family_package(family)
        for path in sorted(folder.iterdir()) if folder.is_dir() else ():
            suffix = next((s for s in suffixes if path.name.endswith(s)), None)
            name = path.name[:-len(suffix)] if suffix else ""
            if not name.isidentifier() or name.startswith("_"):
                continue
            if found.setdefault(name, family) != family:
                raise RuntimeError(f"policy {name} is in two families: {found[name]} and {family} "
                                   f"({root})")
    return found


def _registered() -> tuple[dict[str, str], dict[str, str]]:
    families = scan_policies()
    for alias, name in ALIASES.items():
        if name in families:
            families[alias] = families[name]
    # NOTE: a policy file missing from ORDER is still listed (last): tests/sim/test_registry.py
    # fails for it, --list-algos does not hide it
    names = [n for n in ORDER if n in families] + sorted(set(families) - set(ORDER))
    modules = {n: f"shadow.sim.policies.{family_package(families[n])}.{ALIASES.get(n, n)}"
               for n in names}
    return modules, {n: families[n] for n in names}


#: Every policy name (``--list-algos`` order) -> its module, from the files under ``policies/``;
#: a policy whose module is not built yet is listed too (:class:`PolicyNotBuilt` when used).
#: ``POLICY_FAMILIES``: name -> family, the package its file is in (equal to its SPEC's).
POLICIES, POLICY_FAMILIES = _registered()


class PolicyNotBuilt(ShadowError):
    """The policy is registered but its extension module is missing."""


@dataclass(frozen=True)
class PolicySpec:
    """What a policy is, declared once in its module as ``SPEC`` (validated on creation).

    NOTE: ``strict_pins`` is a promise the serve loop relies on (it skips the "victim in the
    request" check): a pinned block is never the victim while an unpinned one exists.
    """

    description: str
    family: str
    #: parameters and their defaults, ``k=v,k=v`` (types inferred from the values)
    defaults: str = ""
    honours_pins: bool = True
    strict_pins: bool = False
    #: an oracle: reads each access's next-access time (``belady``)
    needs_future: bool = False
    #: the same trace gives the same decisions (no random draws, or draws from a fixed seed
    #: that the reference reproduces exactly)
    deterministic: bool = True
    #: relative cost of stepping one access (thread balancing), lru = 1
    weight: float = 1.0
    #: the class of the PyPI ``libcachesim`` package it equals with pins off, if any
    libcachesim: str | None = None
    #: parameters under which the pure-Python reference follows it event by event
    reference_params: str = ""
    #: its eviction counts equal PrefixSim's reference results (tests/data)
    prefixsim_evictions: bool = False
    #: its decisions depend on the id values themselves (wtinylfu's sketch hashes them, as
    #: libCacheSim's does): the same trace under other ids may differ, so tests/sim/test_slot_ids.py
    #: compares it with its reference only
    hashes_ids: bool = False
    #: evicts leaves only, always (a radix cache: ``sglang``); the ``leaf-only`` modifier is
    #: implied and cannot be turned off
    leaf_only: bool = False

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not one of {', '.join(FAMILIES)}")
        if not self.description:
            raise ValueError("a policy needs a description")
        if not self.weight > 0:
            raise ValueError(f"weight {self.weight} must be positive")
        if self.strict_pins and not self.honours_pins:
            raise ValueError("strict_pins needs honours_pins")
        if self.leaf_only and (not self.honours_pins or self.needs_future):
            raise ValueError("leaf_only needs honours_pins and no future")
        parse_params(None, self.defaults, where="PolicySpec.defaults")
        parse_params(self.reference_params or None, self.defaults,
                     where="PolicySpec.reference_params")


@dataclass(frozen=True)
class PolicyInfo:
    """A registered, built policy: its name, module and spec."""

    name: str
    module: str
    spec: PolicySpec

    @property
    def defaults(self) -> str:
        return self.spec.defaults

    @property
    def honours_pins(self) -> bool:
        return self.spec.honours_pins

    @property
    def needs_next_access(self) -> bool:
        return self.spec.needs_future

    @property
    def description(self) -> str:
        return self.spec.description


def list_policies() -> list[str]:
    """All registered policy names, built or not."""
    return list(POLICIES)


def _module(name: str) -> ModuleType:
    key = name.strip().lower()
    if key not in POLICIES:
        raise ShadowError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    modname = POLICIES[key]
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == modname or modname.startswith(exc.name + ".")):
            raise PolicyNotBuilt(
                f"policy {key!r} is not built yet (module {modname} is missing; run `make build`)"
            ) from None
        raise


def is_built(name: str) -> bool:
    try:
        _module(name)
    except PolicyNotBuilt:
        return False
    return True


def _spec(mod: ModuleType) -> PolicySpec:
    spec = getattr(mod, "SPEC", None)
    if not isinstance(spec, PolicySpec):
        raise ShadowError(f"{mod.__name__} declares no SPEC (a shadow.sim.registry.PolicySpec)")
    return spec


def policy_info(name: str) -> PolicyInfo:
    mod = _module(name)
    return PolicyInfo(name.strip().lower(), mod.__name__, _spec(mod))


def policy_specs(built_only: bool = True) -> dict[str, PolicySpec]:
    """Name -> spec of every registered policy (the built ones; all, raising, if not
    ``built_only``), in registry order."""
    out = {}
    for name in POLICIES:
        try:
            out[name] = _spec(_module(name))
        except PolicyNotBuilt:
            if not built_only:
                raise
    return out


def check_policy(name: str, params_text: str | None = None) -> PolicySpec:
    """Validate ``name`` with ``params_text`` as ``make_policy`` would (the spec's defaults and
    the policy's own range checks, on a small instance); the one validation that ``simulate``,
    ``sweep`` and the connector share.  Raises ShadowError naming the policy."""
    make_policy(name, 64, params_text)
    return policy_info(name).spec


def leaf_only_wanted(name: str, spec: PolicySpec, params_text: str | None) -> tuple[str, bool]:
    """Split the ``leaf-only`` modifier off ``params_text``: (the policy's own parameters, whether
    it evicts leaves only).  ShadowError, naming the policy, where the modifier cannot apply: a
    policy that does not honour pins (the holds are pins) or reads the future (an oracle's choice
    is not a recency order to restrict) or frees whole sessions (:func:`leaf_only_refusal`), or
    ``leaf-only=false`` on a policy that is a radix cache."""
    where = f"policy {name}"
    own, given = split_modifiers(params_text, where=where)
    leaf = bool(given.get("leaf-only", False))
    if spec.leaf_only:
        if given.get("leaf-only") is False:
            raise ShadowError(f"{where}: leaf-only cannot be turned off (it evicts leaves only)")
        return own, True
    refusal = leaf_only_refusal(spec)
    if leaf and refusal:
        raise ShadowError(f"{where}: leaf-only needs {refusal}")
    return own, leaf


def leaf_only_refusal(spec: PolicySpec) -> str | None:
    """Why ``leaf-only`` cannot apply to a policy (the end of a sentence), or None if it can."""
    if not spec.honours_pins or spec.needs_future:
        return "a policy that honours pins and reads no future"
    if spec.family == "session":
        # NOTE: the session family frees whole sessions (in on_request and in batches), which
        # no per-block hold can restrict
        return "a policy that evicts block by block (this one frees whole sessions)"
    return None


def make_policy(name: str, capacity: int, params_text: str | None = None):
    """A fresh policy instance of ``capacity`` slots with parameters ``params_text`` (``k=v,...``,
    the policy's own and the modifiers of :data:`shadow.sim.params.MODIFIERS`)."""
    mod = _module(name)
    spec = _spec(mod)
    params_text, leaf = leaf_only_wanted(name, spec, params_text)
    params = parse_params(params_text, spec.defaults, where=f"policy {name}")
    if capacity <= 0:
        raise ShadowError(f"policy {name}: cache size must be positive, got {capacity}")
    if capacity > MAX_CAPACITY:
        raise ShadowError(f"policy {name}: cache size {capacity} blocks is too large (at most "
                          f"{MAX_CAPACITY} = 2**31 - 2)")
    try:
        policy = mod.make(int(capacity), params)
    except (ValueError, OverflowError) as exc:
        # NOTE: a policy's own range checks (clock's n-bit-counter, ...) raise ValueError
        raise ShadowError(f"policy {name}: {exc}") from None
    # NOTE: the loop trusts strict_pins to skip the "victim in the request" check: such a policy
    # never evicts a pinned block while an unpinned one exists (honours_pins alone may be looser:
    # node- and sample-based policies can take a pinned block with the others).
    policy.strict_pins = spec.strict_pins
    if leaf:
        policy.enable_leaf_only()
    return policy
