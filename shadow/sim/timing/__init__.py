"""``--timing recorded|model``: a trace served in time order through the live path (``run.py``),
its batch encoder (``wire.pyx``) and the service model of ``--timing model`` (``service.py``)."""
