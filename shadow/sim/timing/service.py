"""``--timing model``'s service model: start and completion times for a trace of arrivals.

A trace with arrival times only (Mooncake, Qwen's JSONL) says when each request came, not when an
engine ran it.  This model says, so that ``--timing model`` can serve the trace as ``--timing
recorded`` serves a recording (shadow/sim/timing/run.py):

* requests start in arrival order (first come, first served; equal arrivals in file order), at
  their arrival while fewer than ``concurrency`` requests run, else when the earliest running one
  completes (a completion frees its slot for a start at the same microsecond);
* a request runs for ``prefill_s + decode_s``:

      prefill_s = a + L / prefill + d * L * L / 2        (L = input_length tokens)
      decode_s  = max(output_length, 1) / decode

  and completes at ``start + prefill_s + decode_s`` (microseconds, rounded to the nearest);
* the arrival is ``start_time_us``, else ``complete_time_us`` (a trace converted from Mooncake's
  JSONL carries its ``timestamp`` there), as replay's workload reads it.

Parameters (``--service``, a ``k=v,k=v`` list; defaults: ``prefill=8000,decode=40,
concurrency=64``, ``a`` and ``d`` 0): ``prefill`` tokens/s of one request's prefill, ``decode``
tokens/s of one request's decode, ``concurrency`` requests running at once; ``fit:REPORT`` takes
``a``, ``1/prefill`` and ``d`` from replay's fitted prefill model (``report.json``'s
``prefill_model``: ``TTFT = a + b*u + d*u*(c + u/2)`` with nothing cached, ``c = 0``), after which
``decode`` and ``concurrency`` still apply.

Left out: batching (a running request's speed does not depend on how many others run: an
engine's step time grows with its batch), the cache (prefill time counts every prompt token, hit
or not, so every cache sees one order of events), preemptions, chunked prefill and the engine's
token budget per step.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.cost.report import read_prefill_fit

#: ``--service``'s defaults, as its parameters are spelled.
SERVICE_DEFAULTS = "prefill=8000,decode=40,concurrency=64"


@dataclass(frozen=True)
class ServiceModel:
    """The service model's parameters (module docstring); every rate > 0, ``a``, ``d`` >= 0."""

    prefill: float = 8000.0     # tokens/s
    decode: float = 40.0        # tokens/s per request
    concurrency: int = 64
    a: float = 0.0              # seconds per request (fit: the fixed overhead)
    d: float = 0.0              # seconds/token^2 (fit: attention)

    def durations_us(self, input_length: np.ndarray, output_length: np.ndarray) -> np.ndarray:
        """Each request's ``prefill_s + decode_s`` in microseconds (float)."""
        L = np.asarray(input_length, dtype=np.float64)
        out = np.maximum(np.asarray(output_length, dtype=np.float64), 1.0)
        return (self.a + L / self.prefill + self.d * L * L / 2 + out / self.decode) * 1e6

    def schedule(self, arrival_us: np.ndarray, input_length: np.ndarray,
                 output_length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, completion) microseconds per request (int64, the inputs' order)."""
        arr = np.asarray(arrival_us, dtype=np.int64)
        dur = self.durations_us(input_length, output_length)
        n = arr.shape[0]
        start = np.empty(n, dtype=np.int64)
        done = np.empty(n, dtype=np.int64)
        running: list[int] = []     # completion times of the requests running, a heap
        k = self.concurrency
        # NOTE: first come, first served: a request never starts before an earlier arrival, and
        # in arrival order the next start is the arrival or the earliest completion, whichever
        # is later (the heap holds at most `concurrency` completions)
        for i in np.argsort(arr, kind="stable").tolist():
            t = int(arr[i])
            if len(running) >= k:
                t = max(t, heapq.heappop(running))
            end = t + int(round(float(dur[i])))
            start[i], done[i] = t, end
            heapq.heappush(running, end)
        return start, done


def _positive(key: str, value: str, *, integer: bool = False) -> float:
    try:
        v = int(value) if integer else float(value)
    except ValueError:
        v = -1
    if not (math.isfinite(v) and v > 0):
        kind = "a positive integer" if integer else "a positive number"
        raise ShadowError(f"--service: {key} must be {kind}, got {value!r}")
    return v


def parse_service(spec: str | None) -> ServiceModel:
    """``--service``'s value (module docstring) as a :class:`ServiceModel`; a bad one is a
    :class:`ShadowError` naming the parameter."""
    kv: dict[str, str] = {}
    fit: str | None = None
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("fit:"):
            if fit is not None:
                raise ShadowError("--service: fit: given twice")
            fit = part[len("fit:"):]
            continue
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("prefill", "decode", "concurrency"):
            raise ShadowError(f"--service: unknown parameter {part!r} (prefill=TOKENS_PER_S, "
                              f"decode=TOKENS_PER_S, concurrency=N, fit:REPORT)")
        if key in kv:
            raise ShadowError(f"--service: {key} given twice")
        kv[key] = value.strip()
    if fit is not None and "prefill" in kv:
        raise ShadowError("--service: prefill and fit: both set the prefill speed; give one")
    m = {}
    for key in ("prefill", "decode"):
        if key in kv:
            m[key] = _positive(key, kv[key])
    if "concurrency" in kv:
        m["concurrency"] = int(_positive("concurrency", kv["concurrency"], integer=True))
    if fit is not None:
        f = read_prefill_fit(fit, f"--service fit:{fit}", overhead=True)
        m.update(a=f.a, prefill=1.0 / f.b, d=f.d)
    return ServiceModel(**m)
