"""``--timing recorded`` against the serial replay, same trace, same cache, same run.

    python bench/bench_timing.py [--requests 135000] [--rounds 5]

Writes a synthetic recording (``bench/out/recording-<requests>.lcp``: shared prefixes, start and
completion times that overlap, 16-token blocks; 135,000 requests are ~1M block accesses), then
times ``run_trace`` (serial, ``--lookup vllm``) and ``run_trace_recorded`` on one lru cache of 8k
blocks, rounds alternated, CPU time (decode included in both).  Prints the medians and the ratio
of rates recorded / serial.  No thresholds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shadow.sim import CacheSpec, Simulator  # noqa: E402
from shadow.sim.core.simulator import run_trace  # noqa: E402
from shadow.sim.timing.run import run_trace_recorded  # noqa: E402
from shadow.trace import Batch, LcpWriter, open_trace  # noqa: E402
from shadow.trace.format import RECORD_DTYPE  # noqa: E402

B = 16


def make_recording(path: Path, n: int) -> int:
    """A synthetic recording of ``n`` requests; returns its block accesses."""
    rng = np.random.default_rng(1)
    starts = np.cumsum(rng.integers(100, 2000, n))
    durs = rng.integers(1000, 20000, n)
    reqs, nxt = [], 1000
    for _ in range(n):
        pre = list(range(1, 1 + int(rng.integers(0, 6))))
        k, g = int(rng.integers(1, 8)), int(rng.integers(0, 3))
        reqs.append(pre + list(range(nxt, nxt + k + g)))
        nxt += k + g
    rec = np.zeros(n, dtype=RECORD_DTYPE)
    for f in ("chat_id", "parent_chat_id", "session_id", "session_next_req"):
        rec[f] = -1
    lens = np.array([len(r) for r in reqs])
    gen = np.minimum(rng.integers(0, 3, n), lens - 1)
    rec["start_time_us"] = starts
    rec["complete_time_us"] = starts + durs
    rec["input_length"] = (lens - gen) * B + 5
    rec["output_length"] = gen * B + 1
    rec["n_blocks"] = lens
    order = np.argsort(rec["complete_time_us"], kind="stable")
    with LcpWriter(str(path), block_size_tokens=B) as w:
        w.write_batch(Batch.from_lists([reqs[i] for i in order], records=rec[order]))
    return int(lens.sum())


def one(path: Path, mode: str) -> float:
    with open_trace(str(path)) as tr:
        sim = Simulator([CacheSpec("lru", 8192)], lookup="vllm", block_size_tokens=B)
        t = time.process_time()
        if mode == "serial":
            run_trace(sim, tr, str(path))
        else:
            run_trace_recorded(sim, tr, str(path), B)
        return time.process_time() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=135_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"recording-{a.requests}.lcp"
    n_acc = make_recording(path, a.requests)
    res: dict[str, list[float]] = {"serial": [], "recorded": []}
    for i in range(a.rounds):
        for m in (("serial", "recorded") if i % 2 == 0 else ("recorded", "serial")):
            res[m].append(one(path, m))
    s, r = statistics.median(res["serial"]), statistics.median(res["recorded"])
    print(f"{n_acc} block accesses: serial {s:.3f} s CPU ({n_acc / s / 1e6:.1f} M/s), recorded "
          f"{r:.3f} s CPU ({n_acc / r / 1e6:.1f} M/s), recorded / serial rate x{s / r:.2f}")


if __name__ == "__main__":
    main()
