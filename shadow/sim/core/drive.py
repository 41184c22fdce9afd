"""Drive a :class:`~shadow.sim.core.simulator.Simulator` over an open trace, start to finish.

The serial driver of :func:`shadow.sim.run.run` (which checks the run against the trace first: an
oracle needs next-access times): plan the oracles without skipped requests, feed every batch
(decoded one batch ahead), then close; on any failure, or Ctrl-C, the simulator is aborted so no
partial output (hole files) is left behind.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from shadow.sim.core.oracle import attach_next_access
from shadow.sim.core.simulator import Simulator, prefetched
from shadow.trace.reader import default_decode_threads

#: Frame-decoding threads of an offline simulation (``$SHADOW_DECODE_THREADS`` overrides it).
#: NOTE: one is enough: a decode thread (~80-100 M entries/s here; parsing has its own thread)
#: outruns the fastest cache's serve loop (~50 M/s); a second one takes turns on the serve loop's
#: core and keeps twice the frames (4 MiB each) in flight through the L3 that the caches' state
#: lives in.  End to end one thread is never slower than two (docs/performance.md, "One decode
#: thread when simulating").
SIM_DECODE_THREADS = 1


def sim_decode_threads() -> int:
    """Decode threads for :func:`~shadow.trace.open_trace` in an offline simulation."""
    return default_decode_threads(prefer=SIM_DECODE_THREADS)


def run_trace(sim: Simulator, tr, path: str | os.PathLike[str],
              progress: Callable[[int, int], None] | None = None) -> None:
    """Feed the whole trace ``tr`` (opened from ``path``) to ``sim`` and close it.

    ``progress(block accesses fed, requests fed)`` is called after each batch.
    """
    try:
        if sim.needs_next_access:
            # NOTE: a pre-pass over the trace, only when some request is skipped by an oracle
            # smaller than the largest request (it must plan without the requests it skips).
            attach_next_access(sim, tr)
        accesses = requests = 0
        for batch in prefetched(tr):
            sim.feed(batch)
            if progress is not None:
                accesses += len(batch.block_ids)
                requests += batch.n_requests
                progress(accesses, requests)
    except BaseException:
        sim.abort()
        raise
    sim.close()
