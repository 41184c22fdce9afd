# cython: language_level=3
"""SGLang's RadixCache eviction (its default, ``--radix-eviction-policy lru``) on the block level.

SGLang (python/sglang/srt/mem_cache/radix_cache.py) evicts *evictable leaves*: tree nodes with no
child in the cache and ``lock_ref == 0`` (no running request holds the node or a node below it),
the least recent ``last_access_time`` first (``LRUStrategy.get_priority``); a parent that becomes
an evictable leaf joins the candidates (``RadixCache.evict``).  ``last_access_time`` is set on
every node of the path a ``match_prefix`` walks and of the path an ``insert`` walks
(``cache_unfinished_req`` after a prefill chunk, ``cache_finished_req`` when the request ends).

Here (docs/policies/engine_exact.md, ``### sglang``, for the mapping and what is not modelled): one recency
ring as ``lru``'s; a hit and an insert move the block to the most recent end (the match and the
insert of the serve loop), and so does a release (``cache_finished_req``'s insert of the whole
path, tail first as the loop releases); the victim is the least recent block that is neither
pinned by a request (``lock_ref``) nor held as a parent (leaf-only eviction, always on: the
base's ``leaf`` state, core/policy.pxd).  All blocked: the least recent block (best effort; the serve
loop never asks for it with pins on and distinct prefix ids, see docs).

Memory: lru's 34 B/slot + the leaf state 40 B/slot = 74 B/slot.
"""

from libc.stdint cimport int64_t

from shadow.sim.policies.recency.lru cimport LRU
from shadow.sim.registry import PolicySpec

SPEC = PolicySpec(
    description="SGLang RadixCache (lru): least recent evictable leaf, touched on match, insert "
                "and release",
    family="engine-exact",
    strict_pins=True,
    leaf_only=True,
    weight=2.0,
)


cdef class SGLang(LRU):
    """LRU's ring and operations (lru.pxd), with releases as touches (sglang.pxd) and leaf-only
    eviction."""

    def __cinit__(self, int64_t capacity, *args, **kwargs):
        self.wants_release = True
        self._enable_leaf()

    cdef void on_release(self, int64_t slot) noexcept nogil:
        self.fast_release(slot)


def make(capacity: int, params: dict) -> SGLang:
    return SGLang(capacity)
