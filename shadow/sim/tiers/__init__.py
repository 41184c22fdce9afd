"""Offload tiers behind a shadow cache (docs/tiers.md): the model and ``--tier`` parsing
(``model.py``), its compiled form (``loop.pyx``) and ``shadow simulate --tier`` (``run.py``)."""
