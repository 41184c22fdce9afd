"""Arrival timing: when each request is sent, relative to the start of the run.

Three schedules, all deterministic for a given seed:

* ``trace``:  the trace's own arrival times divided by ``speedup``;
* ``rate``:   a renewal process at ``rate`` requests/s; inter-arrival gaps are gamma distributed
  with shape ``burstiness`` and mean ``1/rate`` (``burstiness == 1`` is Poisson, smaller is
  burstier); the first request goes at 0;
* ``closed``: every request is ready at 0 and the concurrency limit alone paces the run
  (``--concurrency 1`` sends one request at a time, each after the previous one finished).

``--concurrency`` also caps the requests in flight under the other two schedules (a request whose
time has come waits for a free slot), and ``--duration`` stops sending new requests after that many
seconds of the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shadow.errors import ShadowError


@dataclass(frozen=True)
class Timing:
    mode: str  # "trace" | "rate" | "closed"
    speedup: float = 1.0
    rate: float = math.inf
    burstiness: float = 1.0
    concurrency: int | None = None
    duration_s: float | None = None
    seed: int = 0

    def describe(self) -> str:
        parts = {"trace": f"trace times / {self.speedup:g}",
                 "rate": f"rate {self.rate:g}/s, burstiness {self.burstiness:g}",
                 "closed": "back to back"}[self.mode]
        if self.concurrency:
            parts += f", concurrency {self.concurrency}"
        if self.duration_s:
            parts += f", duration {self.duration_s:g} s"
        return parts


def make_timing(*, speedup: float | None, rate: float | None, burstiness: float,
                concurrency: int | None, duration_s: float | None, seed: int = 0) -> Timing:
    """Choose the schedule from the options given (``--rate`` wins over ``--speedup``)."""
    if speedup is not None and speedup <= 0:
        raise ShadowError(f"bad --speedup {speedup:g}: must be positive")
    if rate is not None and rate <= 0:
        raise ShadowError(f"bad --rate {rate:g}: must be positive")
    if burstiness <= 0:
        raise ShadowError(f"bad --burstiness {burstiness:g}: must be positive")
    if concurrency is not None and concurrency <= 0:
        raise ShadowError(f"bad --concurrency {concurrency}: must be positive")
    if duration_s is not None and duration_s <= 0:
        raise ShadowError(f"bad --duration {duration_s:g}: must be positive")
    if rate is not None and speedup is not None:
        raise ShadowError("--rate and --speedup exclude each other: one schedule per run")
    if rate is not None:
        mode = "rate" if math.isfinite(rate) else "closed"
        return Timing(mode, rate=rate, burstiness=burstiness, concurrency=concurrency,
                      duration_s=duration_s, seed=seed)
    if speedup is None and concurrency is not None:
        return Timing("closed", concurrency=concurrency, duration_s=duration_s, seed=seed)
    return Timing("trace", speedup=speedup or 1.0, concurrency=concurrency,
                  duration_s=duration_s, seed=seed)


def send_times(timing: Timing, trace_arrivals: list[float] | np.ndarray) -> np.ndarray:
    """Planned send time (seconds from the run's start) of each request, non-decreasing."""
    arr = np.asarray(trace_arrivals, dtype=np.float64)
    n = arr.shape[0]
    if n == 0:
        return np.zeros(0)
    if timing.mode == "closed":
        return np.zeros(n)
    if timing.mode == "trace":
        t = (arr - arr[0]) / timing.speedup
        return np.maximum.accumulate(np.maximum(t, 0.0))
    rng = np.random.default_rng(timing.seed)
    theta = 1.0 / (timing.rate * timing.burstiness)
    gaps = rng.gamma(shape=timing.burstiness, scale=theta, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)
