"""partial_node_random_freq reference: same decisions as ``policies/partial_node_random_freq.pyx``.

partial_node_random_compute's reference plus a per-node freq: 0 for a node a request's inserts
create, +1 per request whose path runs through the node (``on_request``), kept by a split-off
branch; the score is ``(freq + 1) * cost(tail) / max(1, now - stamp)``.
"""

from __future__ import annotations

from shadow.sim.reference.partial_node_random_compute import PartialNodeRandomCompute

DEFAULTS = "n-sample=128,eviction-mode=micro,micro-batch=64,seed=1"
HONOURS_PINS = True


class PartialNodeRandomFreq(PartialNodeRandomCompute):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.freq: dict[int, int] = {}

    def _new_node(self, ids: list[int], stamp: int, freq: int = 0) -> int:
        nd = super()._new_node(ids, stamp)
        self.freq[nd] = freq
        return nd

    def _free_node(self, nd: int) -> None:
        super()._free_node(nd)
        del self.freq[nd]

    def on_request(self, ctx) -> None:
        self.mark += 1
        deepest: dict[int, int] = {}      # insertion order = order of first touch
        for b in ctx.block_ids:
            nd = self.node_of.get(b)
            if nd is None:
                continue
            if nd not in deepest or self.pos[b] > self.pos[deepest[nd]]:
                deepest[nd] = b
        for nd, d in deepest.items():
            ch = self.chain[nd]
            k = ch.index(d)
            if k + 1 < len(ch):
                self._new_node(ch[k + 1:], self.stamp[nd], self.freq[nd])
                del ch[k + 1:]
            self.stamp[nd] = ctx.req_vtime
            self.freq[nd] += 1

    def score(self, nd: int, now: int) -> float:
        return (self.freq[nd] + 1) * self.cost[self.chain[nd][-1]] / max(1, now - self.stamp[nd])


def make(capacity: int, params: dict) -> PartialNodeRandomFreq:
    return PartialNodeRandomFreq(capacity, int(params["n-sample"]), params["eviction-mode"] == "drain",
                                 int(params["micro-batch"]), int(params["seed"]))
