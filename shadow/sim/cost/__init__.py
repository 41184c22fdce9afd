"""Cost models: what recomputing a block costs (``models``: the ``--cost-model`` names and their
parser; ``arch``: ``model:CONFIG`` and ``fit:REPORT`` from a model's architecture or replay's fit;
``modelcfg``: the one reader of a model's ``config.json``; ``report``: the one reader of replay's
fitted prefill model in ``report.json``, which ``--service fit:`` reads too).

``from shadow.sim.cost import parse_cost_model, CostModel`` is the public import.
"""

from shadow.sim.cost.models import COST_MODELS, CostModel, parse_cost_model

__all__ = ["COST_MODELS", "CostModel", "parse_cost_model"]
