"""``asym_cache_time``: another name of :mod:`shadow.sim.reference.asym_cache` (the PrefixSim fork's
older registration of the wall-clock variant, which the newest fork keeps as ``asym_cache``)."""

from shadow.sim.reference.asym_cache import DEFAULTS, HONOURS_PINS, AsymCache, make

__all__ = ["DEFAULTS", "HONOURS_PINS", "AsymCache", "make"]
