"""shadow: an engine-side shadow simulator for LLM prefix (KV block) caches.

Rooms (one concept each, data flows one way):

* :mod:`shadow.trace`     the lcp trace format, JSONL ingestion, convert and stat
* :mod:`shadow.sim`       the serve loop, eviction policies and cost models (never imports vLLM)
* :mod:`shadow.connector` the vLLM observer connector (the only place vLLM is imported)
* :mod:`shadow.cli`       the ``shadow`` command line
"""

__version__ = "0.1.0"
