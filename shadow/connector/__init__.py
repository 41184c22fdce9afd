"""The live shadow inside vLLM: an observer KV connector, its worker, recorder and metrics.

``shadow.connector.ShadowConnector`` is imported lazily, so ``import shadow.connector`` (and the
pure-Python parts: config, interner, worker, recorder) work without vLLM.  All vLLM imports of
the project live in this package.  See docs/connector.md.
"""

from __future__ import annotations

__all__ = ["ShadowConnector", "ShadowConnectorMetadata"]


def __getattr__(name: str):
    # NOTE: vLLM's factory does getattr(import_module("shadow.connector"), "ShadowConnector").
    if name in __all__:
        from shadow.connector import connector

        return getattr(connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
