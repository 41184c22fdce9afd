"""``shadow simulate`` reports its progress: the driver calls back after every batch (accesses
and requests fed, ending at the trace's totals), and on a terminal a bar shows position, rate
and ETA on stderr (nothing when stderr is not a terminal)."""

from __future__ import annotations

import sys

from shadow.progress import progress_bar
from shadow.sim import CacheSpec, Simulator
from shadow.sim.core.simulator import run_trace
from shadow.trace import open_trace


def test_run_trace_reports_every_batch_up_to_the_totals(synthetic_lcp):
    calls = []
    sim = Simulator([CacheSpec("lru", 1024)])
    with open_trace(str(synthetic_lcp), batch_entries=1 << 14) as tr:    # several batches
        h = tr.header
        run_trace(sim, tr, synthetic_lcp, progress=lambda a, r: calls.append((a, r)))
    assert len(calls) > 1
    assert calls == sorted(calls)
    assert calls[-1] == (h.n_block_accesses, h.n_requests)


def test_progress_bar_only_on_a_terminal(monkeypatch, capsys):
    with progress_bar(100, "simulating", unit="accesses") as cb:
        assert cb is None                         # pytest's stderr is no terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with progress_bar(100, "simulating", unit="accesses") as cb:
        cb(40)
        cb(100)
    err = capsys.readouterr().err
    assert "simulating" in err and "100/100" in err and "M accesses/s" in err
