"""The live sampled miss-ratio curve: one more live cache kind beside the shadow caches.

(The curve itself is :mod:`shadow.sim.mrc.shards`; this module follows the engine's events.)

:class:`LiveCurve` follows one engine's requests through the same calls as every live cache
kind (:class:`shadow.sim.lockstep.caches.LiveCache`) and keeps a
:class:`~shadow.sim.mrc.shards.SampledCurve` of the engine's hit definition: the blocks vLLM looks
up (``req.n_match``, the prompt's ``(num_tokens - 1) // block_size`` full blocks), a re-admission
after a preemption moved but not counted (vLLM's statistics leave it out), matched at the
admission and moved to the top again at the release, tail first, with the generated blocks and
the final partial block's slot (vLLM's free queue ranks blocks by release).  It has no cache row:
its values are the two gauge families of :data:`TARGETS` and :data:`FRACTIONS`
(``shadow.connector.schema``: ``shadow_mrc_capacity_blocks{target}``,
``shadow_mrc_hit_ratio{capacity_fraction}``).

What it is not: the pool's concurrency (a running request's blocks cannot be evicted; the curve
ranks them by their last admission until they are released), nor reuse past the interner's
horizon (a forgotten hash comes back under a new id, as in the recording).  Its tracked ids are
held (:meth:`LiveCurve.holds`), so the interner keeps them.  docs/mrc.md, "The live curve".
"""

from __future__ import annotations

import numpy as np

from shadow.sim.lockstep.caches import LiveCache, LiveRequest, Served
from shadow.sim.mrc.shards import SampledCurve

#: The shares of the infinite cache's hit ratio whose smallest capacity is exported, in order
#: (the label values of ``shadow_mrc_capacity_blocks{target}``).
TARGETS = (0.5, 0.8, 0.9, 0.95, 0.99)
#: The capacities, as multiples of the engine's, at which the hit ratio is exported (the label
#: values of ``shadow_mrc_hit_ratio{capacity_fraction}``); 1 is the engine's own.
FRACTIONS = (0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0, 8.0)
#: Bins per engine capacity, and how far the bins reach (multiples of the engine's capacity):
#: past it a capacity for a target is +Inf.
BINS_PER_CAPACITY = 128
REACH = 16
#: The default bound on tracked ids (SHARDS fixed-size): about 1 MiB (docs/mrc.md).
DEFAULT_MAX_IDS = 16384


def label(x: float) -> str:
    """A TARGETS or FRACTIONS value as its label: ``0.9``, ``1``, ``0.125``."""
    return f"{x:g}"


class LiveCurve(LiveCache):
    """The sampled curve of one engine (module docstring); ``max_ids`` > 0 bounds the ids
    tracked (the rate falls as needed), else ``rate`` is fixed."""

    rows: tuple[int, ...] = ()

    def __init__(self, engine_blocks: int, *, max_ids: int = DEFAULT_MAX_IDS, rate: float = 1.0,
                 seed: int = 0) -> None:
        self.engine_blocks = max(1, int(engine_blocks))
        self.max_ids, self.rate0, self.seed = int(max_ids), float(rate), int(seed)
        self._pending: list[Served] = []
        self._new()

    def _new(self) -> None:
        width = self.engine_blocks / BINS_PER_CAPACITY
        self.curve = SampledCurve(width, BINS_PER_CAPACITY * REACH, self.rate0, self.max_ids,
                                  self.seed)

    # -- events --------------------------------------------------------------------------------
    def admit(self, req: LiveRequest) -> None:
        ids = np.asarray(req.prompt, dtype=np.int64)
        self.curve.admit(ids, req.n_match if req.count else 0)
        self._pending.append((req, []))

    def release(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int,
                end: int) -> None:
        self.curve.release(np.asarray(req.ids, dtype=np.int64),
                           np.asarray(decode_ids, dtype=np.int64), n_anon_final)

    def preempt(self, req: LiveRequest, decode_ids: list[int], n_anon_final: int) -> None:
        self.release(req, decode_ids, n_anon_final, req.end)

    def flush(self) -> list[Served]:
        # NOTE: no cache row, so no hits; every admission is listed (the driver merges the
        # kinds' answers by position when each lists them all)
        out, self._pending = self._pending, []
        return out

    def holds(self, block_id: int) -> bool:
        return self.curve.tracks(block_id)

    def reset(self) -> None:
        """vLLM's prefix-cache reset: an empty cache, so an empty stack and a new curve."""
        self._new()

    # -- values --------------------------------------------------------------------------------
    def capacities(self) -> list[float]:
        """Per :data:`TARGETS`, the smallest capacity (blocks) reaching that share of the
        infinite cache's estimated ratio; ``inf`` past the bins or before any lookup."""
        return [self.curve.capacity_for(t) for t in TARGETS]

    def ratios(self) -> list[float]:
        """Per :data:`FRACTIONS`, the estimated hit ratio at that multiple of the engine's
        capacity."""
        return [self.curve.ratio_at(f * self.engine_blocks) for f in FRACTIONS]

    def counters(self, out: dict[str, list]) -> None:
        out["mrc_capacity"][:] = self.capacities()
        out["mrc_ratio"][:] = self.ratios()


def keys() -> dict[str, tuple[str, ...]]:
    """The label values of the curve's gauge families, by Snapshot keys field (the schema's
    ``part_keys``)."""
    return {"mrc_targets": tuple(label(t) for t in TARGETS),
            "mrc_fractions": tuple(label(f) for f in FRACTIONS)}
