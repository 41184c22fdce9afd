"""``vllm.general_plugins`` entry point: makes ``"kv_connector": "ShadowConnector"`` resolvable.

vLLM loads general plugins in every process (frontend, engine core, workers), so registering the
name here lets the connector be named without ``kv_connector_module_path``, which is what
MultiConnector needs: it rebuilds its children's stats by class name.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

CONNECTOR_NAME = "ShadowConnector"


def register() -> None:
    """Register ``ShadowConnector`` with vLLM's KVConnectorFactory (idempotent, never raises)."""
    try:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    except ImportError:  # NOTE: vLLM without the KV connector API: nothing to register
        return
    registry = getattr(KVConnectorFactory, "_registry", {})
    if CONNECTOR_NAME in registry:
        return
    try:
        KVConnectorFactory.register_connector(CONNECTOR_NAME, "shadow.connector.connector",
                                              CONNECTOR_NAME)
    except ValueError:  # already registered by another process path
        pass
    except Exception:  # noqa: BLE001 - a plugin must never stop vLLM from starting
        logger.exception("shadow connector: could not register %s", CONNECTOR_NAME)
