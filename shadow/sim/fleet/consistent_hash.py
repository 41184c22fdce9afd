"""``consistent_hash``: a hash ring of the replicas' names, keyed by the request's session, else
its user, else the request itself.

vllm-router 0.1.17 ``src/policies/consistent_hash.rs``: 160 virtual nodes per worker
(line 21), each at ``fbi_hash("{url}:{i}")`` (line 263; a later node on the same position
replaces an earlier one), a request at the first node at or after ``fbi_hash(key)``, wrapping
to the smallest (line 298).  ``fbi_hash`` (line 230) is mcrouter's FurcHash into 2**23 - 1
buckets, spread to 64 bits by MurmurHash64A (lines 44-243), ported exactly below.  The key
(``src/policies/hash_key.rs:31-55``): headers first (``x-session-id``, then ``x-user-id``:
``header:x-session-id:<id>``), then body fields (``session:<id>``, ``user:<id>``), else a hash
of the request's text.  ``key=header`` (default) names the session and user as headers,
``key=body`` as body fields.  A request with neither has no text here: its key is
``request:<file index>``, so such requests spread over the ring as the text's hash would, but
not onto the replica the real router would pick.  The replicas' names are the router's
worker URLs (a merged recording's replica names; ``r0`` .. otherwise).
"""

from __future__ import annotations

import bisect

from shadow.errors import ShadowError
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="a hash ring by session, else user (160 virtual nodes per replica)",
    source="vllm-router 0.1.17 src/policies/consistent_hash.rs:21,230-310; hash_key.rs:31-55",
    defaults="key=header",
)

#: virtual nodes per replica (``VIRTUAL_NODES_PER_WORKER``)
VIRTUAL_NODES = 160

_M = 0xC6A4A7935BD1E995
_R = 47
_MASK = (1 << 64) - 1
_SEED = 4193360111
_FURC_SHIFT = 23
_FURC_TRIES = 32
_FURC_BUCKETS = (1 << 23) - 1


def murmur_hash_64a(key: bytes, seed: int) -> int:
    """MurmurHash64A (mcrouter ``lib/fbi/hash.c``): 64 bits of ``key`` under ``seed``."""
    h = (seed ^ ((len(key) * _M) & _MASK)) & _MASK
    n8 = len(key) // 8 * 8
    for i in range(0, n8, 8):
        k = int.from_bytes(key[i:i + 8], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h ^= k
        h = (h * _M) & _MASK
    rest = key[n8:]
    if rest:
        for j, byte in enumerate(rest):
            h ^= byte << (8 * j)
        h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


def _rehash(k: int) -> int:
    """MurmurHash64A of one 64-bit word (``murmur_rehash_64a``)."""
    h = (_SEED ^ ((8 * _M) & _MASK)) & _MASK
    k = (k * _M) & _MASK
    k ^= k >> _R
    k = (k * _M) & _MASK
    h ^= k
    h = (h * _M) & _MASK
    h ^= h >> _R
    h = (h * _M) & _MASK
    h ^= h >> _R
    return h


def furc_hash(key: str, m: int) -> int:
    """FurcHash: a bucket of ``0 .. m-1`` for ``key``, stable as ``m`` grows."""
    if m <= 1:
        return 0
    data = key.encode("utf-8")
    cache: list[int] = []

    def bit(idx: int) -> int:
        order = idx >> 6
        while len(cache) <= order:
            cache.append(murmur_hash_64a(data, _SEED) if not cache else _rehash(cache[-1]))
        return (cache[order] >> (idx & 63)) & 1

    d = 0
    while m > (1 << d):
        d += 1
    a = d
    for _ in range(_FURC_TRIES):
        while not bit(a):
            if d == 0:
                return 0
            d -= 1
            a = d
        a += _FURC_SHIFT
        num = 1
        for _ in range(max(d - 1, 0)):
            num = (num << 1) | bit(a)
            a += _FURC_SHIFT
        if num < m:
            return num
    return 0


def fbi_hash(key: str) -> int:
    """vllm-router's ``ConsistentHashPolicy::fbi_hash``: FurcHash into 2**23 - 1 buckets, the
    bucket's 4 little-endian bytes through MurmurHash64A."""
    return murmur_hash_64a(furc_hash(key, _FURC_BUCKETS).to_bytes(4, "little"), _SEED)


def hash_key(q: Query, style: str) -> str:
    """The string the real router hashes for ``q`` (module docstring)."""
    if style == "header":
        if q.session >= 0:
            return f"header:x-session-id:{q.session}"
        if q.user >= 0:
            return f"header:x-user-id:{q.user}"
    else:
        if q.user >= 0:
            return f"user:{q.user}"
        if q.session >= 0:
            return f"session:{q.session}"
    return f"request:{q.index}"


class Ring:
    """The hash ring of ``names`` (sorted positions, the replica at each)."""

    def __init__(self, names: list[str]) -> None:
        ring: dict[int, int] = {}
        for r, url in enumerate(names):
            for i in range(VIRTUAL_NODES):
                ring[fbi_hash(f"{url}:{i}")] = r
        self.positions = sorted(ring)
        self.owner = [ring[p] for p in self.positions]

    def lookup(self, key: str) -> int:
        i = bisect.bisect_left(self.positions, fbi_hash(key))
        return self.owner[i if i < len(self.positions) else 0]


class ConsistentHash(Router):
    def __init__(self, names: list[str], style: str) -> None:
        self.ring = Ring(names)
        self.style = style
        self.memo: dict[str, int] = {}

    def route(self, q: Query, view: FleetView) -> int:
        key = hash_key(q, self.style)
        r = self.memo.get(key)
        if r is None:
            r = self.ring.lookup(key)
            if not key.startswith("request:"):
                self.memo[key] = r
        return r


def check(params: dict) -> None:
    if params["key"] not in ("header", "body"):
        raise ShadowError(f"router consistent_hash: key must be header or body, got "
                          f"{params['key']!r}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return ConsistentHash(list(ctx.names), str(params["key"]))
