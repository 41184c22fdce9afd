"""``cache_aware``: vllm-router's approximate radix tree of what it routed where, on blocks.

vllm-router 0.1.17 (SGLang's router has the same rules): ``src/policies/cache_aware.rs:338-393``
(``select_prepared``, the regular HTTP router's path, ``routers/http/router.rs:1365``):

* per replica, the match rate is the share of the prompt's tokens that the tree holds for it as
  a prefix (``tree.rs:653`` walks from the root while each node holds the replica);
* the fleet is *imbalanced* when ``max - min > balance_abs_threshold`` and
  ``max > min * balance_rel_threshold`` over the replicas' in-flight counts (line 443);
* balanced and the best rate ``> cache_threshold``: among the replicas at the best rate, the one
  with the fewest in flight; otherwise the one with the fewest in flight of all (the first
  among equals: ``min_by_key``, line 368); the prompt is then inserted for it (line 371);
* every ``eviction_interval_secs`` a background pass (``cache_aware.rs:128-140``,
  ``tree.rs:710``) evicts, per replica over ``max_tree_size`` characters, the least recently
  stamped leaves until it fits; an insert stamps the node where the prompt ends and a new leaf
  (``get_epoch``), a node a replica newly passes through gets stamp 0 (``tree.rs:362-527``).

On blocks instead of characters: the tree's keys are the prompt's token ids, 8 hex characters
a token (``protocols/spec.rs:2799``), so a block of B tokens is 8*B characters and
``max_tree_size`` (characters, the CLI's default 2**25: ``main.rs:177-195``) allows
``max_tree_size // (8 * B)`` blocks per replica.  A node of the tree is a run of blocks here,
so a match ends on a block boundary (the real one may match part of a block; the rate counts
matched blocks times B over the prompt's tokens), and eviction removes a block at a time where
the real one removes a whole node (at most one node's worth less).  The 6 namespace characters
every key starts with and LoRA/cache-salt scopes are left out.  The eviction clock is the
trace's (arrival times); ``eviction_interval_secs=0`` turns eviction off, as in the real router
(a trace without times needs it).  Ties among the oldest leaves: lower replica, then lower block.
"""

from __future__ import annotations

import heapq

from shadow.errors import ShadowError
from shadow.sim.fleet.router import FleetContext, FleetView, Query, Router, RouterSpec

SPEC = RouterSpec(
    description="vllm-router's approximate prefix tree of routed prompts, load-balanced",
    source="vllm-router 0.1.17 src/policies/cache_aware.rs:338-453; src/tree.rs:362-527,653-808; "
           "src/main.rs:177-195",
    defaults="cache_threshold=0.3,balance_abs_threshold=64,balance_rel_threshold=1.5,"
             "eviction_interval_secs=120.0,max_tree_size=33554432",
    needs_block_size="it sizes its tree in tokens",
)

#: characters of the tree's key per token (``cache_routing::TOKEN_WIDTH``)
CHARS_PER_TOKEN = 8


class BlockTree:
    """The approximate tree on blocks: per block the replicas that hold it, each with a stamp.

    Invariant: a block holds a replica only if its parent does (inserts go root first, eviction
    takes leaves first); ``size[t]`` is the blocks replica ``t`` holds; ``nchild[(b, t)]`` the
    children of ``b`` that hold ``t`` (``b`` is a leaf for ``t`` when it is 0).
    """

    def __init__(self, replicas: int) -> None:
        self.owners: dict[int, dict[int, int]] = {}
        self.parent: dict[int, int] = {}
        self.nchild: dict[tuple[int, int], int] = {}
        self.size = [0] * replicas
        self.epoch = 0

    def _stamp(self) -> int:
        self.epoch += 1
        return self.epoch

    def match(self, blocks, t: int) -> int:
        """Leading blocks of ``blocks`` that ``t`` holds."""
        owners = self.owners
        n = 0
        for b in blocks:
            own = owners.get(b)
            if own is None or t not in own:
                break
            n += 1
        return n

    def insert(self, blocks, t: int) -> None:
        owners, nchild = self.owners, self.nchild
        prev = 0
        for i, b in enumerate(blocks):
            own = owners.get(b)
            if own is None:
                # NOTE: a new leaf node: the rest of the prompt, one stamp for all of it
                e = self._stamp()
                for b2 in blocks[i:]:
                    owners[b2] = {t: e}
                    self.parent[b2] = prev
                    nchild[(prev, t)] = nchild.get((prev, t), 0) + 1
                    self.size[t] += 1
                    prev = b2
                return
            if t not in own:
                own[t] = 0
                self.size[t] += 1
                nchild[(prev, t)] = nchild.get((prev, t), 0) + 1
            prev = b
        if prev:
            owners[prev][t] = self._stamp()

    def evict(self, max_blocks: int) -> None:
        """``evict_tenant_by_size``: oldest leaves first until each replica holds at most
        ``max_blocks``."""
        over = {t for t, s in enumerate(self.size) if s > max_blocks}
        if not over:
            return
        owners, nchild, parent = self.owners, self.nchild, self.parent
        heap = [(stamp, t, b) for b, own in owners.items() for t, stamp in own.items()
                if t in over and not nchild.get((b, t))]
        heapq.heapify(heap)
        while heap:
            _, t, b = heapq.heappop(heap)
            if self.size[t] <= max_blocks:
                continue
            own = owners.get(b)
            if own is None or t not in own or nchild.get((b, t)):
                continue
            del own[t]
            self.size[t] -= 1
            p = parent[b]
            if not own:
                del owners[b]
                del parent[b]
            left = nchild[(p, t)] - 1
            if left:
                nchild[(p, t)] = left
            else:
                del nchild[(p, t)]
                pown = owners.get(p)
                if pown is not None and t in pown:
                    heapq.heappush(heap, (pown[t], t, p))


class CacheAware(Router):
    def __init__(self, replicas: int, params: dict, block_size: int) -> None:
        self.n = replicas
        self.threshold = float(params["cache_threshold"])
        self.abs = int(params["balance_abs_threshold"])
        self.rel = float(params["balance_rel_threshold"])
        self.interval = float(params["eviction_interval_secs"])
        self.block_size = block_size
        self.max_blocks = int(params["max_tree_size"]) // (CHARS_PER_TOKEN * max(block_size, 1))
        self.tree = BlockTree(replicas)
        self.next_evict: float | None = None

    def needs_clock(self) -> str | None:
        return ("its tree is evicted every eviction_interval_secs (0 turns that off)"
                if self.interval > 0 else None)

    def _maybe_evict(self, t: float) -> None:
        if self.interval <= 0 or t < 0:
            return
        if self.next_evict is None:
            self.next_evict = t + self.interval
        while t >= self.next_evict:
            self.tree.evict(self.max_blocks)
            self.next_evict += self.interval

    def route(self, q: Query, view: FleetView) -> int:
        self._maybe_evict(q.t)
        loads = [view.in_flight(r) for r in range(self.n)]
        lo, hi = min(loads), max(loads)
        imbalanced = hi - lo > self.abs and hi > lo * self.rel
        blocks = q.blocks.tolist()
        if not blocks:
            return loads.index(lo)
        tokens = q.input_tokens if q.input_tokens > 0 else len(blocks) * self.block_size
        rates = [min(self.tree.match(blocks, r) * self.block_size, tokens) / tokens
                 for r in range(self.n)]
        best = max(rates)
        use_prefix = not imbalanced and best > self.threshold
        pick = min((r for r in range(self.n) if not use_prefix or rates[r] == best),
                   key=lambda r: loads[r])
        self.tree.insert(blocks, pick)
        return pick

    def index_size(self, view: FleetView) -> int:
        return sum(self.tree.size)


def check(params: dict) -> None:
    if not 0.0 <= params["cache_threshold"] <= 1.0:
        raise ShadowError(f"router cache_aware: cache_threshold must be in [0, 1], got "
                          f"{params['cache_threshold']}")
    for key in ("balance_abs_threshold", "max_tree_size"):
        if params[key] < 0:
            raise ShadowError(f"router cache_aware: {key} must be >= 0, got {params[key]}")
    for key in ("balance_rel_threshold", "eviction_interval_secs"):
        if not params[key] >= 0:
            raise ShadowError(f"router cache_aware: {key} must be >= 0, got {params[key]}")


def make(replicas: int, params: dict, ctx: FleetContext) -> Router:
    return CacheAware(replicas, params, ctx.block_size)
