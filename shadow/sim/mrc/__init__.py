"""Miss-ratio curves: every capacity of a stack policy (lru, vllm) in one pass (docs/mrc.md).

``stack.pyx`` (the pass: stack distances at each request's match), ``curve.py`` (ratios at any
capacity, change points, capacity for a target), ``offline.py`` (a whole trace), ``commands.py``
(``shadow mrc``), ``reference.py`` (the pure-Python references the tests hold it to);
``shards.pyx`` (SHARDS: a sampled curve of bounded memory, which the connector keeps live as
``shadow.sim.lockstep.curve``).
"""
