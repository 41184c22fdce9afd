"""Shadow caches in lockstep with one live engine: every kind of live cache behind one interface
(``caches.py``: :class:`~shadow.sim.lockstep.caches.LiveCache`; vLLM's pools, the Simulator's
caches, offload tiers behind either; ``curve.py``: the sampled miss-ratio curve, a kind without
a cache row), which the connector's worker drives event by event."""
