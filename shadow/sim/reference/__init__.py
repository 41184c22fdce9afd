"""Pure-Python reference policies (differential oracles), one module per policy name.

Every name of :data:`shadow.sim.registry.POLICIES` is registered; a missing module means the
reference is not written yet (:func:`make_reference` raises :class:`LookupError`).
"""

from __future__ import annotations

import importlib

from shadow.sim.params import parse_params
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
    mod = reference_module(name)
    params = parse_params(params_text, getattr(mod, "DEFAULTS", ""), where=f"reference {name}")
    return mod.make(capacity, params)
