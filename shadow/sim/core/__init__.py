"""The serve-loop core: the loop (``loop.pyx``), the policy interface (``policy.pxd``), the slot
and id tables (``idtable.pxd``), the multi-cache stepper (``simulator.py``) with its specs and
results (``results.py``), the oracles' next-access pass (``oracle.py``), ``--dump-holes``
(``holes.pyx``) and the request-context recorder of the tests (``ctxlog.pyx``)."""
