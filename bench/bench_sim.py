"""Simulator throughput, end to end from .lcp.zst, with baselines measured in the same run.

    python bench/bench_sim.py [--min-accesses 10000000] [--policies lru,s3fifo,...] [--quick]

Measures (writes bench/out/bench_sim.json):
* decode   LcpReader alone over the tiled trace (the ceiling for anything end to end);
* loop     the serve loop alone: the whole trace decoded into arrays first, then one cache per
           policy stepped over them (``CacheRun.serve_batch``, best of 2): the simulator's own
           cost per access, without decoding;
* policy   each policy alone, one cache (default 8k blocks; ``--size 8k,128k,512k`` for several:
           a cache's state leaves the CPU's L2 around 32k blocks), decode included: block accesses/s;
* many     P policies x 4 sizes in one pass (threads, and one thread) vs one pass each;
* memory   RSS growth per cache slot of a 1M-slot cache per policy, filled with distinct ids, and
           again after a churn of 4M uniform ids over 4M (most gets miss: ghost lists fill to
           their bound and ring-ordered queues touch their whole ring), with the ghost count
           reached where a policy has ghosts;
* python   the pure-Python reference loop (LRU) and libcachesim driven from Python through the
           same reference loop, over a prefix of the trace, vs the Cython loop on that prefix.
Wall and CPU time are both reported: the machine is shared, so CPU time and ratios against the
decode-only baseline of the same run are the figures to read.  No thresholds here: the figures go
to docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

# NOTE: numpy's OpenBLAS worker threads can spin for a while after numpy starts, and process time
# counts every thread: keep them out of the CPU figures (nothing here uses BLAS).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shadow.sim import CacheSpec, Simulator  # noqa: E402
from shadow.sim.core.simulator import prefetched  # noqa: E402
from shadow.sim.registry import is_built, list_policies  # noqa: E402
from shadow.trace import convert_file, open_trace  # noqa: E402
from _common import load_arrays, loop_only, parse_size  # noqa: E402,F401


def tiled_trace(min_accesses: int) -> Path:
    lcp = OUT / f"tiled-{min_accesses}.lcp.zst"
    if not lcp.exists():
        jsonl = OUT / f"tiled-{min_accesses}.jsonl"
        if not jsonl.exists():
            from tile import tile
            tile(min_accesses, str(jsonl))
        convert_file(str(jsonl), str(lcp))
    return lcp


def decode_only(path: Path) -> tuple[float, int, float]:
    c = time.process_time()
    t = time.perf_counter()
    n = 0
    with open_trace(str(path)) as tr:
        for b in tr:
            n += b.n_blocks
    return time.perf_counter() - t, n, time.process_time() - c


def run(path: Path, specs: list[CacheSpec], limit: int | None = None,
        threads: int | None = None) -> tuple[float, int, float]:
    """Wall seconds, block accesses, CPU seconds (all threads) of one pass."""
    from shadow.sim.core.simulator import sim_decode_threads
    sim = Simulator(specs, threads=threads)
    n = 0
    c = time.process_time()
    t = time.perf_counter()
    # NOTE: decoded as `shadow simulate` decodes it (one decode thread unless overridden)
    with open_trace(str(path), decode_threads=sim_decode_threads()) as tr:
        for b in prefetched(tr):
            sim.feed(b)
            n += b.n_blocks
            if limit and n >= limit:
                break
    dt = time.perf_counter() - t
    cpu = time.process_time() - c
    sim.close()
    for r in sim.results():
        assert r.error is None, r.error
    return dt, n, cpu


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_per_slot(name: str, slots: int = 1 << 20, churn: int = 0) -> tuple[float, int]:
    """RSS growth per slot of one filled cache, measured in a fresh child process, and the ghost
    entries it ends with (-1: not known).  ``churn`` more gets of uniform ids over ``4 * slots``
    follow the fill (they fill the ghost lists)."""
    import subprocess
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import numpy as np
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) * 1024
from shadow.sim.registry import make_policy
from shadow.sim.core.loop import CacheRun
ids = np.random.default_rng(1).integers(1, 4 * {slots} + 1, {churn}).tolist()
before = rss()
p = make_policy({name!r}, {slots})
for i in range({slots}):
    p.py_get(i + 1, vtime=i + 1)
t = {slots}
for b in ids:
    t += 1
    p.py_get(b, vtime=t)
m = (rss() - before) / {slots}
g = -1
if hasattr(p, 'queues'):
    qs = {{k: v for k, v in p.queues().items() if k in ('ghost', 'b1', 'b2', 'aout')}}
    g = sum(len(v) for v in qs.values()) if qs else -1
elif hasattr(p, 'ghost_ids'):
    g = len(p.ghost_ids())
print(m, g)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    m, g = out.stdout.split()
    return float(m), int(g)


def python_baselines(path: Path, n_limit: int) -> dict:
    """Cython vs pure-Python reference vs libcachesim-from-Python, LRU 8k, unpinned, same prefix."""
    from shadow.sim.reference import make_reference
    from shadow.sim.reference.loop import RefCache
    reqs, n = [], 0
    with open_trace(str(path)) as tr:
        for b in tr:
            for i in range(b.n_requests):
                reqs.append(b.request_blocks(i).tolist())
                n += len(reqs[-1])
                if n >= n_limit:
                    break
            if n >= n_limit:
                break
    from shadow.trace.batch import Batch
    batch = Batch.from_lists(reqs)
    sim = Simulator([CacheSpec("lru", 8192)], pin=False)
    t = time.process_time()
    sim.feed(batch)
    t_cy = time.process_time() - t
    ref = RefCache(make_reference("lru", 8192), 8192, pin=False)
    t = time.process_time()
    for r in reqs:
        ref.serve(r)
    t_py = time.process_time() - t
    out = {"accesses": n, "cython_s": t_cy, "python_ref_s": t_py,
           "speedup_vs_python_ref": t_py / t_cy}
    try:
        import libcachesim as lcs
        sys.path.insert(0, str(ROOT))
        from tests.sim.test_vs_libcachesim import LibCacheSimAdapter

        class FastAdapter(LibCacheSimAdapter):
            def evict(self, acc, pinned):   # to_evict is exact for LRU: skip the O(n) re-probe
                victim = self.cache.to_evict(self._req(acc.block_id)).obj_id
                self.cache.evict(self._req(acc.block_id))
                self.resident.discard(victim)
                return victim
        lref = RefCache(FastAdapter(lcs.LRU(8192)), 8192, pin=False)
        t = time.process_time()
        for r in reqs:
            lref.serve(r)
        t_l = time.process_time() - t
        assert lref.n_hits == ref.n_hits
        out.update(libcachesim_s=t_l, speedup_vs_libcachesim=t_l / t_cy)
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-accesses", type=int, default=10_000_000)
    ap.add_argument("--policies", default=None, help="comma list (default: every built policy)")
    ap.add_argument("--size", default="8192",
                    help="cache size(s) in blocks for the loop and policy sections, comma list, "
                         "k/m suffixes (x1024)")
    ap.add_argument("--many-sizes", default="2048,8192,32768,131072")
    ap.add_argument("--many-limit", type=int, default=0,
                    help="block accesses for the one-pass-for-many comparison (0: whole trace)")
    ap.add_argument("--python-accesses", type=int, default=300_000)
    ap.add_argument("--skip", default="", help="comma list of sections to skip")
    a = ap.parse_args()
    skip = set(a.skip.split(","))
    sizes = [parse_size(x) for x in a.size.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    path = tiled_trace(a.min_accesses)
    policies = a.policies.split(",") if a.policies else [p for p in list_policies() if is_built(p)]
    res: dict = {"trace": str(path)}
    dt, n, cpu = decode_only(path)
    dec_cpu = n / cpu
    res["decode"] = {"accesses": n, "s": dt, "per_s": n / dt, "cpu_s": cpu, "per_cpu_s": dec_cpu}
    print(f"decode only            {n / dt / 1e6:8.1f} M accesses/s wall, {dec_cpu / 1e6:6.1f} M/s CPU"
          f" ({n} accesses)", flush=True)
    if "loop" not in skip:
        arrays = load_arrays(path)
        res["loop"] = {}
        for size in sizes:
            res["loop"][size] = {}
            for p in policies:
                cpu, n = loop_only(arrays, p, size)
                res["loop"][size][p] = {"cpu_s": cpu, "per_cpu_s": n / cpu,
                                        "vs_decode_cpu": (n / cpu) / dec_cpu}
                print(f"{p:<28s} {size:>8d} {n / cpu / 1e6:8.1f} M accesses/s CPU, loop only "
                      f"(arrays in memory; {(n / cpu) / dec_cpu:.2f} x decode-only CPU)", flush=True)
        del arrays
    if "policy" not in skip:
        res["policy"] = {}
        for size in sizes:
            res["policy"][size] = {}
            for p in policies:
                dt, n, cpu = run(path, [CacheSpec(p, size)])
                res["policy"][size][p] = {"s": dt, "per_s": n / dt, "cpu_s": cpu,
                                          "per_cpu_s": n / cpu, "vs_decode_cpu": (n / cpu) / dec_cpu}
                print(f"{p:<28s} {size:>8d} {n / dt / 1e6:8.1f} M accesses/s end to end wall, "
                      f"{n / cpu / 1e6:6.1f} M/s CPU ({(n / cpu) / dec_cpu:.2f} x decode-only CPU)",
                      flush=True)
    if "many" not in skip:
        sizes = [int(s) for s in a.many_sizes.split(",")]
        specs = [CacheSpec(p, s) for p in policies for s in sizes]
        lim = a.many_limit or None
        t_one, n, c_one = run(path, specs, lim)
        t_one1, _, c_one1 = run(path, specs, lim, threads=1)
        each = [run(path, [s], lim) for s in specs]
        t_each = sum(e[0] for e in each)
        c_each = sum(e[2] for e in each)
        res["many"] = {"caches": len(specs), "accesses": n, "one_pass_s": t_one,
                       "one_pass_cpu_s": c_one, "one_pass_1thread_s": t_one1,
                       "one_pass_1thread_cpu_s": c_one1, "one_pass_each_s": t_each,
                       "one_pass_each_cpu_s": c_each, "speedup": t_each / t_one,
                       "speedup_1thread": t_each / t_one1, "cpu_speedup": c_each / c_one1}
        print(f"{len(specs)} caches over {n} accesses: one pass {t_one:.1f} s wall "
              f"({c_one:.1f} s CPU), one pass on 1 thread {t_one1:.1f} s ({c_one1:.1f} s CPU), "
              f"one pass each {t_each:.1f} s ({c_each:.1f} s CPU): speed-up {t_each / t_one:.2f}x "
              f"wall, {t_each / t_one1:.2f}x on 1 thread, {c_each / c_one1:.2f}x CPU", flush=True)
    if "memory" not in skip:
        res["memory_bytes_per_slot"] = {}
        for p in policies:
            m, _ = memory_per_slot(p)
            res["memory_bytes_per_slot"][p] = m
            print(f"{p:<28s} {m:6.1f} bytes/slot (1M-slot cache, RSS)", flush=True)
        res["memory_bytes_per_slot_after_churn"] = {}
        for p in policies:
            m, g = memory_per_slot(p, churn=4 << 20)
            res["memory_bytes_per_slot_after_churn"][p] = {"bytes_per_slot": m, "ghosts": g}
            extra = f" ({g} ghost entries)" if g >= 0 else ""   # -1: the policy keeps no ghosts
            print(f"{p:<28s} {m:6.1f} bytes/slot after 4M churn gets{extra}", flush=True)
    if "python" not in skip:
        res["python"] = python_baselines(path, a.python_accesses)
        print(json.dumps(res["python"]), flush=True)
    (OUT / "bench_sim.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
