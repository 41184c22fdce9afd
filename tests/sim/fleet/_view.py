"""A hand-set :class:`~shadow.sim.fleet.router.FleetView` for router tests: loads and resident
sets given per replica, queries built from block lists."""

from __future__ import annotations

import numpy as np

from shadow.sim.fleet.router import Query


class FakeView:
    def __init__(self, replicas: int, *, in_flight=None, waiting=None, prefill=None,
                 decode=None, usage=None, resident=None) -> None:
        self.replicas = replicas
        self.flight = list(in_flight or [0] * replicas)
        self.wait = list(waiting or [0] * replicas)
        self.pre = list(prefill or [0] * replicas)
        self.dec = list(decode or [0] * replicas)
        self.use = list(usage or [0.0] * replicas)
        self.sets = [set(s) for s in (resident or [()] * replicas)]

    def in_flight(self, r):
        return self.flight[r]

    def waiting(self, r):
        return self.wait[r]

    def prefill_tokens(self, r):
        return self.pre[r]

    def decode_blocks(self, r):
        return self.dec[r]

    def kv_usage(self, r):
        return self.use[r]

    def resident(self, r, b):
        return int(b) in self.sets[r]

    def resident_mask(self, r, blocks):
        return np.array([int(b) in self.sets[r] for b in blocks], dtype=np.uint8)

    def resident_blocks(self):
        return sum(len(s) for s in self.sets)

    def prefix(self, q):
        out = np.zeros(self.replicas, dtype=np.int64)
        for r in range(self.replicas):
            k = 0
            for b in q.blocks.tolist():
                if b not in self.sets[r]:
                    break
                k += 1
            out[r] = k
        return out


def query(blocks, *, index=0, tokens=None, session=-1, user=-1, t=0.0, B=16) -> Query:
    blocks = np.asarray(blocks, dtype=np.int64)
    return Query(index, blocks, len(blocks) * B if tokens is None else tokens, 10, session,
                 user, t)
