# cython: language_level=3
"""randomlru: draw ``n-samples`` resident blocks, evict the least recently used of them (libCacheSim
``RandomLRU``, libCacheSim/cache/eviction/RandomLRU.c).

Per slot the vtime of the block's last get (libCacheSim's ``last_access_vtime``, its ``n_req``:
set by an insert and by a hit).  Eviction makes ``n-samples`` draws with replacement over the
resident slots, as ``random`` draws (policies/recency/random.pyx: a dense array of resident slots,
splitmix64 seeded with ``seed``), and evicts the drawn block of the lowest stamp; equal stamps go
to the earliest draw.  It is randomtwo's class (policies/recency/randomtwo.pyx) with ``n-samples`` draws
and that tie rule; the pure-Python reference (reference/randomlru.py) makes the same draws.

NOTE: libCacheSim's RandomLRU parses ``n-samples`` (default 16) but its eviction always draws 64
(a constant ``N = 64``; the parameter only names the cache, ``RandomLRU-16``), sorts them by
stamp with ``qsort`` and evicts the first.  So the default here is ``n-samples=64``, what it
does.  Its distinct blocks never share a stamp (one ``n_req`` per get), so its only ties are a
block drawn twice; the earliest draw wins them here.

Pins: honoured strictly (``strict_pins``), as ``random``: while some but not all resident blocks
are pinned only unpinned draws count (pinned ones are drawn again, at most 64 draws per
candidate wanted) and the least recent of those found goes; none found: the first unpinned
block in population order.  Every block pinned: the plain draws (best effort).

Memory: base 22 B/slot + dense set 8 + stamp 8 = 38 B/slot (the draws' scratch is 4 B a sample).
"""

from shadow.errors import ShadowError
from shadow.sim.policies.recency.randomtwo cimport RandomTwo
from shadow.sim.policies.recency.random import check_seed
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="draw n-samples resident blocks, evict the least recently used (libCacheSim RandomLRU)",
    family="recency",
    defaults="n-samples=64,seed=1",
    strict_pins=True,
    weight=8.0,
)


cdef class RandomLRU(RandomTwo):
    """See the module docstring: ``k`` = n-samples draws, equal stamps to the earliest draw."""


def make(capacity: int, params: dict) -> RandomLRU:
    n = int(params["n-samples"])
    if not 1 <= n <= (1 << 30):
        raise ShadowError(f"policy randomlru: n-samples must be in 1..2**30, got {n}")
    return RandomLRU(capacity, check_seed("randomlru", params), n, False)
