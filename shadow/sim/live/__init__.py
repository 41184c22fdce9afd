"""The live protocol: requests admitted and released one at a time (``batch``: :class:`Admission`,
:class:`LiveBatch`), encoded for the serve loop in one wire format (``wire.pxd``).

``from shadow.sim.live import Admission, LiveBatch`` is the public import.
"""

__all__ = ["Admission", "LiveBatch"]


def __getattr__(name: str):
    # NOTE: lazy, so `import shadow.sim.live.wire` does not pull the batch module (and the
    # package imports before the extension modules are built).
    if name in __all__:
        from shadow.sim.live import batch
        return getattr(batch, name)
    raise AttributeError(name)
