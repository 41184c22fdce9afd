"""What one simulated cache is (:class:`CacheSpec`) and what it reported (:class:`Result`,
PrefixSim's summary and ``RESULT`` lines).
"""

from __future__ import annotations

from dataclasses import dataclass


#: PrefixSim's RESULT keys, in its order; this project's extra keys follow them.
RESULT_KEYS = ("trace", "algo", "cache_size", "cost_model", "block_id", "n_req", "n_req_skipped",
               "n_blocks", "block_hit_ratio", "compute_saving_ratio", "n_eviction",
               "n_self_eviction", "n_unexpected_eviction")
EXTRA_KEYS = ("prefix_hit_ratio", "prefix_compute_saving_ratio", "holes_per_req", "mean_hole_len",
              "max_hole_len", "pin", "replay_order")


@dataclass(frozen=True)
class CacheSpec:
    """One simulated cache: a registered policy name, its capacity in blocks, its ``k=v`` params."""

    policy: str
    capacity: int
    params: str = ""

    @property
    def label(self) -> str:
        return self.policy if not self.params else f"{self.policy}({self.params})"


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


@dataclass
class Result:
    """Statistics of one cache after a run (ratios are 0 when their denominator is)."""

    spec: CacheSpec
    trace: str
    cost_model: str
    block_id: str
    pin: bool
    replay_order: str
    n_req: int
    n_req_skipped: int
    n_blocks: int
    n_hits: int
    n_prefix_hits: int
    total_cost: float
    saved_cost: float
    prefix_saved_cost: float
    n_eviction: int
    n_self_eviction: int
    n_unexpected_eviction: int
    n_holes: int
    hole_len_sum: int
    max_hole_len: int
    error: str | None = None

    @property
    def block_hit_ratio(self) -> float:
        return _ratio(self.n_hits, self.n_blocks)

    @property
    def compute_saving_ratio(self) -> float:
        return _ratio(self.saved_cost, self.total_cost)

    @property
    def prefix_hit_ratio(self) -> float:
        return _ratio(self.n_prefix_hits, self.n_blocks)

    @property
    def prefix_compute_saving_ratio(self) -> float:
        return _ratio(self.prefix_saved_cost, self.total_cost)

    @property
    def holes_per_req(self) -> float:
        return _ratio(self.n_holes, self.n_req)

    @property
    def mean_hole_len(self) -> float:
        return _ratio(self.hole_len_sum, self.n_holes)

    def fields(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "algo": self.spec.policy,
            "cache_size": self.spec.capacity,
            "cost_model": self.cost_model,
            "block_id": self.block_id,
            "n_req": self.n_req,
            "n_req_skipped": self.n_req_skipped,
            "n_blocks": self.n_blocks,
            "block_hit_ratio": f"{self.block_hit_ratio:.6f}",
            "compute_saving_ratio": f"{self.compute_saving_ratio:.6f}",
            "n_eviction": self.n_eviction,
            "n_self_eviction": self.n_self_eviction,
            "n_unexpected_eviction": self.n_unexpected_eviction,
            "prefix_hit_ratio": f"{self.prefix_hit_ratio:.6f}",
            "prefix_compute_saving_ratio": f"{self.prefix_compute_saving_ratio:.6f}",
            "holes_per_req": f"{self.holes_per_req:.4f}",
            "mean_hole_len": f"{self.mean_hole_len:.4f}",
            "max_hole_len": self.max_hole_len,
            "pin": "on" if self.pin else "off",
            "replay_order": self.replay_order,
        }

    def summary_line(self) -> str:
        """PrefixSim's summary line (``%-24s block hit ratio %.4f   compute saving %.4f``)."""
        return (f"{self.spec.policy:<24s} block hit ratio {self.block_hit_ratio:.4f}   "
                f"compute saving {self.compute_saving_ratio:.4f}")

    def result_line(self) -> str:
        """``RESULT k=v ...``: PrefixSim's keys in its order, then this project's extra keys."""
        f = self.fields()
        parts = [f"{k}={f[k]}" for k in RESULT_KEYS + EXTRA_KEYS]
        if self.spec.params:
            parts.append(f"params={self.spec.params}")
        return "RESULT " + " ".join(parts)
