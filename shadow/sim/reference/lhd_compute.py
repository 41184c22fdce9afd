"""lhd_compute reference: the lhd reference (reference/lhd.py) with each rank that has not
overflowed times the cost of the block's last access, ``f32(rank * cost)``, the identity
transform of the PrefixSim fork's ``LHD_compute`` (LauYeeYu/libCacheSim,
libCacheSim/cache/eviction/LHD/lhd_compute.cpp); the same decisions as
``policies/cost_aware/lhd_compute.pyx``, which says where it departs from the fork."""

from __future__ import annotations

from shadow.sim.reference.lhd import LHD

DEFAULTS = "seed=1,reconfigure-interval=1048576"
HONOURS_PINS = True


class LHDCompute(LHD):
    """``cost[b]``: the cost of b's last access (set by ``update`` before its draws)."""

    def __init__(self, capacity: int, seed: int = 1, interval: int = 1 << 20) -> None:
        super().__init__(capacity, seed, interval)
        self.cost = {}


def make(capacity: int, params: dict) -> LHDCompute:
    return LHDCompute(capacity, int(params["seed"]), int(params["reconfigure-interval"]))
