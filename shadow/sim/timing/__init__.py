"""``--timing recorded|model``: a trace served in time order through the live path (``run.py``),
its batch encoder (``wire.pyx``) and the service model of ``--timing model`` (``service.py``).

This package took the name of the module ``shadow.sim.timing`` (now ``run.py``); the names that
module held (:data:`MOVED_NAMES`) still read from here, as ``run.py``'s, with one
DeprecationWarning each (``shadow/sim/_moved.py`` does so for the other old module names).
"""

#: What ``shadow.sim.timing`` held as a module, now in ``shadow.sim.timing.run``.
MOVED_NAMES = ("TIMING_MODES", "BATCH_EVENTS", "SerialOrder", "FIELDS", "CTX_FIELDS",
               "load_fields", "run_trace_recorded")


def __getattr__(name: str):
    # NOTE: lazy, so the package imports without the built extensions and reading a submodule
    # (run, wire, service) never warns; once read, a name is bound here and warns no more
    if name not in MOVED_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    from shadow.sim.timing import run

    warnings.warn(f"shadow.sim.timing.{name} is now shadow.sim.timing.run.{name}; import it "
                  f"from there", DeprecationWarning, stacklevel=2)
    value = globals()[name] = getattr(run, name)
    return value
