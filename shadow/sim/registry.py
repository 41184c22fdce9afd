"""Every policy name of the simulator, mapped to the module that implements it.

A name is registered here even before its module is built; :func:`make_policy` then says so
clearly.  A policy module ``shadow/sim/policies/<name>.pyx`` provides ``make(capacity, params)``,
``DEFAULTS`` (``k=v,k=v``), ``HONOURS_PINS``, ``NEEDS_NEXT_ACCESS`` and ``DESCRIPTION``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from shadow.errors import ShadowError
from shadow.sim.params import parse_params

# NOTE: order is the order of --list-algos: single queue, multi-queue, cost-aware and oracles,
# partial-node, then the engine-exact policy.
POLICIES: dict[str, str] = {
    "lru": "shadow.sim.policies.lru",
    "fifo": "shadow.sim.policies.fifo",
    "clock": "shadow.sim.policies.clock",
    "sieve": "shadow.sim.policies.sieve",
    "lfu": "shadow.sim.policies.lfu",
    "s3fifo": "shadow.sim.policies.s3fifo",
    "twoq": "shadow.sim.policies.twoq",
    "arc": "shadow.sim.policies.arc",
    "slru": "shadow.sim.policies.slru",
    "gdsf": "shadow.sim.policies.gdsf",
    "belady": "shadow.sim.policies.belady",
    "belady_compute": "shadow.sim.policies.belady_compute",
    "random_compute": "shadow.sim.policies.random_compute",
    "random_compute_small_queue": "shadow.sim.policies.random_compute_small_queue",
    "partial_node_random_compute": "shadow.sim.policies.partial_node_random_compute",
    "partial_node_random_freq": "shadow.sim.policies.partial_node_random_freq",
    "vllm": "shadow.sim.policies.vllm",
}


class PolicyNotBuilt(ShadowError):
    """The policy is registered but its extension module is missing."""


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    module: str
    defaults: str
    honours_pins: bool
    needs_next_access: bool
    description: str


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


def policy_info(name: str) -> PolicyInfo:
    mod = _module(name)
    return PolicyInfo(name.strip().lower(), mod.__name__, getattr(mod, "DEFAULTS", ""),
                      bool(getattr(mod, "HONOURS_PINS", False)),
                      bool(getattr(mod, "NEEDS_NEXT_ACCESS", False)),
                      getattr(mod, "DESCRIPTION", ""))


def make_policy(name: str, capacity: int, params_text: str | None = None):
    """A fresh policy instance of ``capacity`` slots with parameters ``params_text`` (``k=v,...``)."""
    mod = _module(name)
    params = parse_params(params_text, getattr(mod, "DEFAULTS", ""), where=f"policy {name}")
    if capacity <= 0:
        raise ShadowError(f"policy {name}: cache size must be positive, got {capacity}")
    policy = mod.make(int(capacity), params)
    # NOTE: the loop trusts STRICT_PINS to skip the "victim in the request" check: such a policy
    # never evicts a pinned block while an unpinned one exists (HONOURS_PINS alone may be looser:
    # node- and sample-based policies can take a pinned block with the others).
    policy.strict_pins = bool(getattr(mod, "STRICT_PINS", False))
    return policy
