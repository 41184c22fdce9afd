"""Prefill seconds per cache from a profile: what each cache's first-miss hits save in time.

For every request a cache served, with ``N`` its prompt tokens (the record's ``input_length``)
and ``h`` its first-miss hit blocks in that cache (``prefix_hits``: what vLLM or SGLang would
reuse from the same contents), the prefill skips ``c = min(h * B, N - 1)`` tokens
(:func:`shadow.sim.engine.rules.prefill_cached_tokens`) and computes ``N - c``; the profile
(:class:`shadow.sim.cost.profile.Profile`) gives

* ``t(c, N - c)``: the request's prefill seconds with the cache's hit;
* ``t(0, N)``: with no hit.

Per cache, over the requests it served (``n_req``; a skipped request is in neither sum, as in
``compute_saving_ratio``): ``prefill_s`` is the sum of the first, ``prefill_s_saved`` the sum
of the second minus ``prefill_s``, ``ttft_saving_ratio`` their ratio.  At concurrency 1, with
the profile measured as the engine's TTFT, ``t(c, N - c)`` is the request's TTFT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.cost.profile import Profile
from shadow.sim.engine.rules import prefill_cached_tokens

#: The RESULT keys a profile adds, in order, after every other key of a cache's line.
PREFILL_KEYS = ("prefill_s", "prefill_s_saved", "ttft_saving_ratio")


@dataclass
class PrefillTotals:
    """One cache's prefill seconds over the requests it served."""

    prefill_s: float = 0.0
    no_hit_s: float = 0.0
    n_req: int = 0

    @property
    def saved_s(self) -> float:
        return self.no_hit_s - self.prefill_s

    @property
    def ratio(self) -> float:
        return self.saved_s / self.no_hit_s if self.no_hit_s else 0.0

    def fields(self) -> dict[str, str]:
        return {"prefill_s": f"{self.prefill_s:.6f}", "prefill_s_saved": f"{self.saved_s:.6f}",
                "ttft_saving_ratio": f"{self.ratio:.6f}"}

    def suffix(self) -> str:
        f = self.fields()
        return " ".join(f"{k}={f[k]}" for k in PREFILL_KEYS)


def request_seconds(profile: Profile, input_length: np.ndarray, hit_blocks: np.ndarray,
                    block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request, ``(t(c, N - c), t(0, N))`` (module docstring) for ``hit_blocks`` >= 0."""
    N = np.asarray(input_length, dtype=np.int64)
    c = prefill_cached_tokens(N, np.asarray(hit_blocks, dtype=np.int64), int(block_tokens))
    return profile.seconds(c, N - c), profile.seconds(np.zeros_like(N), N)


def admission_seconds(profile: Profile, num_tokens: Sequence[int], engine_hit_tokens: Sequence[int],
                      hit_blocks: Sequence[Sequence[int]], block_tokens: int
                      ) -> list[tuple[float, float, list[float]]]:
    """A live batch's admissions: per admission ``k`` with ``num_tokens[k]`` prompt tokens, its
    prefill seconds with no hit, with the engine's own hit of ``engine_hit_tokens[k]`` tokens,
    and with each first-miss hit of ``hit_blocks[k]`` (blocks, one per cache that counted it),
    in one profile lookup for the batch (the connector's worker)."""
    N = np.asarray(num_tokens, dtype=np.int64)
    # NOTE: the engine's hit is in tokens (never past N - 1 in vLLM; capped the same way)
    c_eng = np.minimum(np.asarray(engine_hit_tokens, dtype=np.int64), np.maximum(N - 1, 0))
    reps = [len(h) for h in hit_blocks]
    t, _t0 = request_seconds(profile, np.repeat(N, reps),
                             np.fromiter((x for h in hit_blocks for x in h), dtype=np.int64,
                                         count=sum(reps)), block_tokens)
    t_no = profile.seconds(np.zeros_like(N), N).tolist()
    t_eng = profile.seconds(c_eng, N - c_eng).tolist()
    tl = t.tolist()
    out, j = [], 0
    for k, m in enumerate(reps):
        out.append((t_no[k], t_eng[k], tl[j:j + m]))
        j += m
    return out


class PrefillMeter:
    """Adds up :class:`PrefillTotals` per cache from per-request first-miss hits, batch by batch.

    ``add(input_length, hits)``: ``hits[k]`` the first-miss hit blocks of each request in cache
    ``k``, -1 where that cache did not serve it.  A request without a prompt length (0) is
    refused in one line: the profile needs it.
    """

    def __init__(self, profile: Profile, block_tokens: int, n_caches: int,
                 path: str = "") -> None:
        if block_tokens < 1:
            raise ShadowError(f"{path or 'the trace'}: a profile cost model needs the block size "
                              f"in tokens, which the trace's header does not give")
        self.profile = profile
        self.block_tokens = int(block_tokens)
        self.path = path
        self.totals = [PrefillTotals() for _ in range(n_caches)]
        self._seen = 0

    def add(self, input_length: np.ndarray, hits) -> None:
        N = np.asarray(input_length, dtype=np.int64)
        bad = np.flatnonzero(N < 1)
        if bad.shape[0]:
            raise ShadowError(f"{self.path or 'the trace'}: request {self._seen + int(bad[0])} "
                              f"has no prompt length (input_length {int(N[bad[0]])}), which the "
                              f"profile cost model needs")
        self._seen += int(N.shape[0])
        no_hit = None
        for tot, h in zip(self.totals, hits):
            h = np.asarray(h, dtype=np.int64)
            served = h >= 0
            if not served.any():
                continue
            if no_hit is None:
                no_hit = self.profile.seconds(np.zeros_like(N), N)
            Ns, hs = N[served], h[served]
            c = prefill_cached_tokens(Ns, hs, self.block_tokens)
            tot.prefill_s += float(self.profile.seconds(c, Ns - c).sum())
            tot.no_hit_s += float(no_hit[served].sum())
            tot.n_req += int(served.sum())
