"""vLLM's side of a cache: its block rules (``rules.py``: how many blocks a request looks up, holds
and caches) and its physical block pool (``pool.pyx``; reference ``reference/vllm_pool.py``)."""
