"""The simulator: serve loop, eviction policies, cost models, the multi-cache stepper.

Never imports vLLM.  See docs/design.md "Simulator API" and shadow/sim/README.md.
"""

from __future__ import annotations

from shadow.sim import _moved
from shadow.sim.cost.models import CostModel, parse_cost_model
from shadow.sim.registry import list_policies, make_policy

_moved.install()

__all__ = ["Simulator", "CacheSpec", "Result", "Admission", "LiveBatch", "list_policies", "make_policy",
           "parse_cost_model", "CostModel"]


def __getattr__(name: str):
    # NOTE: lazy, so `import shadow.sim` works before the extension modules are built.
    if name == "Simulator":
        from shadow.sim.core import simulator
        return simulator.Simulator
    if name in ("CacheSpec", "Result"):
        from shadow.sim.core import results
        return getattr(results, name)
    if name in ("Admission", "LiveBatch"):
        from shadow.sim.live import batch as live
        return getattr(live, name)
    raise AttributeError(name)
