"""Pure-Python reference policies (differential oracles), one module per policy name.

Every name of :data:`shadow.sim.registry.POLICIES` is registered; a missing module means the
reference is not written yet (:func:`make_reference` raises :class:`LookupError`).
"""

from __future__ import annotations

import importlib

from shadow.sim.params import parse_params, split_modifiers
from shadow.sim.registry import POLICIES

REFERENCES: dict[str, str] = {name: f"shadow.sim.reference.{name}" for name in POLICIES}


def reference_module(name: str):
    modname = REFERENCES[name]
    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        if exc.name == modname:
            raise LookupError(f"no pure-Python reference for {name!r} yet ({modname})") from None
        raise


def make_reference(name: str, capacity: int, params_text: str | None = None):
    """A reference policy; the ``leaf-only`` modifier sets its ``leaf_only`` attribute, which
    :class:`~shadow.sim.reference.loop.RefCache` reads (a radix-cache reference sets it itself)."""
    mod = reference_module(name)
    own, given = split_modifiers(params_text, where=f"reference {name}")
    params = parse_params(own, getattr(mod, "DEFAULTS", ""), where=f"reference {name}")
    policy = mod.make(capacity, params)
    if given.get("leaf-only"):
        policy.leaf_only = True
    return policy
