"""The module names of ``shadow.sim`` before its sub-packages, each an alias of the module that
holds the code now.

``import shadow.sim.simulator`` (and every other name in :data:`MOVED`) keeps working: it warns
once (DeprecationWarning: the import runs once a process) and binds the module that now holds
the code, the same object under both names (``shadow.sim.simulator is shadow.sim.core.simulator``).
``shadow.sim.live`` and ``shadow.sim.cost`` need no alias: they are packages that re-export their
old contents.

NOTE: the finder sits first on ``sys.meta_path`` and answers only for these names, so an old
name is an alias even where a stale ``.so`` of it is left in a source tree (a built extension
would otherwise win over anything else of its name).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

#: old name -> new name, both under ``shadow.sim.``
MOVED: dict[str, str] = {
    "simulator": "core.simulator", "results": "core.results", "drive": "core.simulator",
    "core.drive": "core.simulator",
    "oracle": "core.oracle", "loop": "core.loop", "policy": "core.policy",
    "idtable": "core.idtable", "holes": "core.holes", "ctxlog": "core.ctxlog",
    "livewire": "live.wire",
    "vllm_pool": "engine.pool", "vllm_rules": "engine.rules",
    "tier": "tiers.model", "tiered": "tiers.run", "tierloop": "tiers.loop",
    "timewire": "timing.wire", "service": "timing.service",
    "cost_arch": "cost.arch",
}

_PREFIX = "shadow.sim."


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of :data:`MOVED` and loads each as its new module."""

    def find_spec(self, fullname: str, path=None, target=None):
        if not fullname.startswith(_PREFIX) or fullname[len(_PREFIX):] not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        new = _PREFIX + MOVED[old[len(_PREFIX):]]
        # NOTE: stacklevel 2 names the importing line: warnings skips importlib's own frames
        warnings.warn(f"{old} is now {new}; import it from there", DeprecationWarning, stacklevel=2)
        # NOTE: the import system returns what sys.modules holds after exec_module, so the
        # placeholder module is dropped and the old name binds the new module itself
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
