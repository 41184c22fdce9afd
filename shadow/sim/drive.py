"""Drive a :class:`~shadow.sim.simulator.Simulator` over an open trace, start to finish.

One place for what every offline run does (``shadow simulate``, a sweep cell): refuse an oracle
on a trace without next-access times, plan the oracles without skipped requests, feed every batch
(decoded one batch ahead), then close; on any failure, or Ctrl-C, the simulator is aborted so no
partial output (hole files) is left behind.
"""

from __future__ import annotations

import os

from shadow.errors import ShadowError
from shadow.sim.oracle import attach_next_access
from shadow.sim.registry import policy_info
from shadow.sim.simulator import Simulator, prefetched


def run_trace(sim: Simulator, tr, path: str | os.PathLike[str]) -> None:
    """Feed the whole trace ``tr`` (opened from ``path``) to ``sim`` and close it."""
    try:
        if sim.needs_next_access and not tr.header.has_next_access:
            oracles = sorted({s.policy for s in sim.specs if policy_info(s.policy).needs_next_access})
            raise ShadowError(f"{path}: the trace has no next-access times, which {', '.join(oracles)} "
                              f"need{'s' if len(oracles) == 1 else ''} (convert it with `shadow convert`)")
        if sim.needs_next_access:
            # NOTE: a pre-pass over the trace, only when some request is skipped by an oracle
            # smaller than the largest request (it must plan without the requests it skips).
            attach_next_access(sim, tr)
        for batch in prefetched(tr):
            sim.feed(batch)
    except BaseException:
        sim.abort()
        raise
    sim.close()
