"""partial_node_random_freq reference: same decisions as ``policies/partial_node/partial_node_random_freq.pyx``.

partial_node_random_compute's reference plus a per-node freq: 0 for a node a request's inserts
create, +1 per request whose path runs through the node (``_touch``), kept by a split-off branch
(``_new_node`` with a parent); the score is ``(freq + 1) * cost(tail) / max(1, now - stamp)``.
"""

from __future__ import annotations

from shadow.sim.reference.partial_node_random_compute import PartialNodeRandomCompute

DEFAULTS = "n-sample=128,eviction-mode=micro,micro-batch=64,seed=1"
HONOURS_PINS = True


class PartialNodeRandomFreq(PartialNodeRandomCompute):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.freq: dict[int, int] = {}

    def _new_node(self, ids: list[int], stamp: int, parent: int | None = None) -> int:
        nd = super()._new_node(ids, stamp, parent)
        self.freq[nd] = 0 if parent is None else self.freq[parent]
        return nd

    def _free_node(self, nd: int) -> None:
        super()._free_node(nd)
        del self.freq[nd]

    def _touch(self, nd: int, req_vtime: int) -> None:
        super()._touch(nd, req_vtime)
        self.freq[nd] += 1

    def score(self, nd: int, now: int) -> float:
        return (self.freq[nd] + 1) * self.cost[self.chain[nd][-1]] / max(1, now - self.stamp[nd])


def make(capacity: int, params: dict) -> PartialNodeRandomFreq:
    return PartialNodeRandomFreq(capacity, int(params["n-sample"]), params["eviction-mode"] == "drain",
                                 int(params["micro-batch"]), int(params["seed"]))
