"""The unpinned serve loop over the PyPI package ``libcachesim`` (an independent implementation of
the libCacheSim policies) gives the same per-request hits as our policies on small traces.

libcachesim is driven from the pure-Python reference loop through an adapter: ``find`` is
``find(update_cache=False)``, a hit or an insert is ``get``, and the victim of ``evict`` is
identified by re-probing the ids the adapter knows to be resident (``evict`` returns nothing).
The policies compared are those whose registry spec names a libcachesim class.
"""

from __future__ import annotations

import numpy as np
import pytest

lcs = pytest.importorskip("libcachesim")

from shadow.sim.reference.loop import RefCache  # noqa: E402
from shadow.sim.registry import policy_specs  # noqa: E402
from tests.sim._traces import next_access, random_trace  # noqa: E402
from tests.sim.policy_mixin import run_both  # noqa: E402
from tests.tiers import unit_rows

def _make(cls_name: str):
    cls = getattr(lcs, cls_name)

    def make(cap: int):
        # NOTE: libCacheSim aborts the process for an S3FIFO small queue of 0 blocks (C < 10)
        if cls_name == "S3FIFO" and cap < 20:
            pytest.skip("S3FIFO needs C >= 20")
        # NOTE: shadow's slru covers C % n-seg != 0 with uneven segments (docs/policies/frequency.md)
        if cls_name == "SLRU" and cap % 4:
            pytest.skip("C % 4 != 0 differs")
        # NOTE: shadow's wtinylfu keeps a window of at least one block and gives probation the
        # remainder of main (docs/policies/frequency.md): equal when libCacheSim's sizes are the same
        if cls_name == "WTinyLFU":
            main = cap - int(cap * 0.01)
            if main == cap or int(0.2 * main) + int(0.8 * main) != main:
                pytest.skip("WTinyLFU: C < 100 or inexact segments differ (test_wtinylfu.py)")
        return cls(cap)
    return make


#: name -> libcachesim constructor, for every policy whose spec names a libcachesim class
LIBCACHESIM = {n: _make(s.libcachesim) for n, s in policy_specs(built_only=False).items()
               if s.libcachesim}


class LibCacheSimAdapter:
    """The reference-policy interface over a libcachesim cache object (unpinned only)."""

    def __init__(self, cache) -> None:
        self.cache = cache
        self.resident: set[int] = set()
        #: victims of evictions libcachesim made inside ``get`` (twoq's Am spill): the reference
        #: loop drains them as unexpected evictions, as the Cython loop counts a drop in residents
        self.spilled: list[int] = []
        self.pinned: set[int] = set()     # set by the reference loop; libcachesim ignores pins

    def _req(self, b: int, acc=None):
        r = lcs.Request()
        r.obj_id = b
        r.obj_size = 1
        if acc is not None:
            r.next_access_vtime = acc.next_access if acc.next_access >= 0 else 2**62
        return r

    def __len__(self) -> int:
        return len(self.resident)

    def find(self, b: int) -> bool:
        return self.cache.find(self._req(b), False) is not None

    def hit(self, b: int, acc) -> None:
        assert self.cache.get(self._req(b, acc))

    def insert(self, b: int, acc) -> None:
        assert not self.cache.get(self._req(b, acc))
        self.resident.add(b)
        if self.cache.get_n_obj() < len(self.resident):
            gone = [x for x in self.resident if not self.find(x)]
            self.resident.difference_update(gone)
            self.spilled.extend(gone)

    def evict(self, acc, pinned: set[int]) -> int:
        assert not pinned, "libcachesim cannot honour pins"
        # NOTE: libCacheSim's S3FIFO evict may only promote small-queue blocks to main and
        # evict nothing; shadow's evict always removes one block, so loop until one leaves.
        before = self.cache.get_n_obj()
        for _ in range(len(self.resident) + 8):
            self.cache.evict(self._req(acc.block_id, acc))
            if self.cache.get_n_obj() < before:
                break
        gone = [b for b in self.resident if not self.find(b)]
        assert len(gone) == 1, gone
        self.resident.discard(gone[0])
        return gone[0]

    def remove(self, b: int) -> None:
        raise NotImplementedError

    def on_request(self, ctx) -> None:
        pass


class OwnVictimAdapter(LibCacheSimAdapter):
    """A sampling policy's own victim: libcachesim's ``to_evict`` names its draw and ``remove``
    takes it (its ``evict`` would draw again, and finding the victim by probing every resident
    id is slow)."""

    def evict(self, acc, pinned: set[int]) -> int:
        assert not pinned, "libcachesim cannot honour pins"
        victim = self.cache.to_evict(self._req(acc.block_id, acc)).obj_id
        assert self.cache.remove(victim)
        self.resident.discard(victim)
        return victim


def own_victim_hit_ratio(cache, capacity: int, trace: list[list[int]],
                         adapter: type = OwnVictimAdapter, verify: bool = True) -> float:
    """Block hit ratio of the libcachesim ``cache`` (its own victims) over ``trace``: the
    unpinned reference loop, prefix order, next-access times given; ``adapter`` wraps the cache
    (another way of naming its victims), ``verify=False`` for a policy whose spilled evictions
    may take the request's own blocks."""
    ref = RefCache(adapter(cache), capacity, pin=False, replay_order="prefix-order",
                   verify=verify)
    for req, nxt in zip(trace, next_access(trace)):
        ref.serve(req, nxt)
    s = ref.stats()
    return s["n_hits"] / s["n_blocks"]


def _lcs_hits(name: str, capacity: int, trace):
    ref = RefCache(LibCacheSimAdapter(LIBCACHESIM[name](capacity)), capacity, pin=False)
    nxt = next_access(trace)
    return [(s.n_hits, s.n_prefix_hits, int(s.status == "skipped"))
            for s in (ref.serve(r, n) for r, n in zip(trace, nxt))], ref.stats()


@pytest.mark.parametrize("seed", unit_rows(range(6), 6))
@pytest.mark.parametrize("capacity", unit_rows([4, 9, 23], 3, first=1))
@pytest.mark.parametrize("name", sorted(LIBCACHESIM))
def test_same_per_request_hits_as_libcachesim(name, capacity, seed):
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, 120, n_roots=3, max_len=10, n_raw=4)
    want, want_stats = _lcs_hits(name, capacity, trace)
    got, _, got_c, _, _, _ = run_both(name, "", capacity, trace, pin=False, cost_model="uniform")
    assert got == want
    assert got_c["n_eviction"] == want_stats["n_eviction"]
    assert got_c["n_self_eviction"] == want_stats["n_self_eviction"]
    assert sum(h for h, _, _ in got) > 0      # the trace exercises hits
