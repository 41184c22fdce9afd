"""partial_node_random_compute reference: same decisions as ``policies/partial_node/partial_node_random_compute.pyx``.

Nodes are lists of block ids, head (shallow) to tail (deep); node ids come from the same
full-permutation free list as on the Cython side, so samples draw the same nodes.  Variants
(``partial_node_random_freq``) subclass :class:`PartialNodeRandomCompute` and override the same
hooks as on the Cython side: ``_new_node`` (with the parent a split came from), ``_touch`` and
``score``.
"""

from __future__ import annotations

from shadow.sim.reference.random_compute import DenseSet, SplitMix64, draw

DEFAULTS = "n-sample=128,eviction-mode=micro,micro-batch=64,seed=1"
HONOURS_PINS = True


class PartialNodeRandomCompute:
    def __init__(self, capacity: int, n_sample: int = 128, drain: bool = False, micro_batch: int = 64,
                 seed: int = 1) -> None:
        self.capacity = capacity
        self.n_sample = n_sample
        self.drain = drain
        self.micro_batch = micro_batch
        self.rng = SplitMix64(seed)
        self.nodes = DenseSet(capacity, full=True)
        self.chain: dict[int, list[int]] = {}     # node -> ids head to tail
        self.stamp: dict[int, int] = {}
        self.node_of: dict[int, int] = {}
        self.pos: dict[int, int] = {}
        self.cost: dict[int, int] = {}
        self.mark = 0
        self.last: tuple[int, int, int] | None = None   # (id, position, mark) of the previous insert

    def __len__(self) -> int:
        return len(self.node_of)

    def find(self, b: int) -> bool:
        return b in self.node_of

    def _new_node(self, ids: list[int], stamp: int, parent: int | None = None) -> int:
        nd = self.nodes.items[self.nodes.n]
        self.nodes.add(nd)
        self.chain[nd] = ids
        self.stamp[nd] = stamp
        for b in ids:
            self.node_of[b] = nd
        return nd

    def _free_node(self, nd: int) -> None:
        self.nodes.remove(nd)
        del self.chain[nd], self.stamp[nd]

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
                self._new_node(ch[k + 1:], self.stamp[nd], nd)
                del ch[k + 1:]
            self._touch(nd, ctx.req_vtime)

    def _touch(self, nd: int, req_vtime: int) -> None:
        """The arriving request's path runs through ``nd`` (after any split)."""
        self.stamp[nd] = req_vtime

    def hit(self, b: int, acc) -> None:
        self.cost[b] = acc.cost

    def insert(self, b: int, acc) -> None:
        self.pos[b] = acc.position
        self.cost[b] = acc.cost
        joined = False
        if self.last is not None and self.last[2] == self.mark and self.last[0] in self.node_of:
            prev, ppos, _ = self.last
            ch = self.chain[self.node_of[prev]]
            if acc.position == ppos - 1 and ch[0] == prev:
                ch.insert(0, b)
                joined = True
            elif acc.position == ppos + 1 and ch[-1] == prev:
                ch.append(b)
                joined = True
            if joined:
                self.node_of[b] = self.node_of[prev]
        if not joined:
            self._new_node([b], acc.req_vtime)
        self.last = (b, acc.position, self.mark)

    def score(self, nd: int, now: int) -> float:
        return self.cost[self.chain[nd][-1]] / max(1, now - self.stamp[nd])

    def _drop(self, b: int) -> None:
        del self.node_of[b], self.pos[b], self.cost[b]

    def evict_n(self, acc, n: int, pinned: set[int]) -> list[int]:
        out: list[int] = []
        while len(out) < n and self.nodes.n > 0:
            cands, forced = draw(self.rng, self.nodes, self.n_sample, lambda nd: self.chain[nd][-1] in pinned)
            scores = [self.score(c, acc.vtime) for c in cands]
            win = cands[min(range(len(cands)), key=lambda i: (scores[i], i))]
            take = n - len(out) if self.drain else min(n - len(out), self.micro_batch)
            ch = self.chain[win]
            got = 0
            while got < take:
                b = ch[-1]
                if b in pinned and not (forced and got == 0):
                    break
                ch.pop()
                self._drop(b)
                out.append(b)
                got += 1
                if not ch:
                    self._free_node(win)
                    break
            if got == 0:
                break
        return out

    def evict(self, acc, pinned: set[int]) -> int:
        got = self.evict_n(acc, 1, pinned)
        return got[0] if got else 0

    def remove(self, b: int) -> None:
        nd = self.node_of[b]
        ch = self.chain[nd]
        ch.remove(b)
        if not ch:
            self._free_node(nd)
        self._drop(b)
        if self.last is not None and self.last[0] == b:
            self.last = None


def make(capacity: int, params: dict) -> PartialNodeRandomCompute:
    return PartialNodeRandomCompute(capacity, int(params["n-sample"]), params["eviction-mode"] == "drain",
                                    int(params["micro-batch"]), int(params["seed"]))
