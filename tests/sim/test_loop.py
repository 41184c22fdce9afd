"""The serve loop and the multi-cache stepper: counters, skip, holes, pins, live admission."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.trace.batch import Batch
from tests.sim._traces import SYNTHETIC, batches_of, next_access, random_trace, read_jsonl


def feed_all(sim, trace, size=None):
    if size is None:
        sim.feed(Batch.from_lists(trace, next_access=next_access(trace)))
    else:
        for b in batches_of(trace, size):
            sim.feed(b)
    return sim.results()


def test_gap_spanning_and_prefix_hits():
    sim = Simulator([CacheSpec("lru", 10)])
    trace = [[1, 2, 3, 4, 5], [6], [1, 2, 3, 4, 5]]
    sim.feed(Batch.from_lists(trace))
    r = sim.results()[0]
    assert (r.n_hits, r.n_prefix_hits, r.n_blocks) == (5, 5, 11)
    # now knock out block 2 from the middle and look again
    sim.runs[0].policy.py_remove(2)
    sim.feed(Batch.from_lists([[1, 2, 3, 4, 5]], first_request=3))
    r = sim.results()[0]
    assert r.n_hits == 5 + 4                 # 1, 3, 4, 5 hit past the gap
    assert r.n_prefix_hits == 5 + 1          # only 1 before the first miss
    assert (r.n_holes, r.max_hole_len) == (3, 5)


def test_skip_counts_and_touches_nothing(caplog):
    sim = Simulator([CacheSpec("lru", 3)])
    sim.feed(Batch.from_lists([[1, 2], [3, 4, 5, 6], [1, 2]]))
    r = sim.results()[0]
    assert (r.n_req, r.n_req_skipped, r.n_blocks, r.n_hits, r.n_eviction) == (2, 1, 4, 2, 0)
    assert "request 1 has 4 distinct blocks" in caplog.text


def test_raw_duplicate_ids_counted_once_for_allocation():
    sim = Simulator([CacheSpec("lru", 3)])
    sim.feed(Batch.from_lists([[7, 7, 8, 7]]))       # 2 distinct ids fit a 3-slot cache
    r = sim.results()[0]
    assert (r.n_req, r.n_blocks, r.n_hits, r.n_eviction) == (1, 4, 0, 0)
    assert sorted(sim.runs[0].policy.resident_ids()) == [7, 8]


def test_self_eviction_unpinned_vs_pinned():
    # cap 3 holding 1 2 3 (LRU order 3 2 1 after deepest-first replay: 1 most recent);
    # request [3, 4, 5] needs 2 slots: unpinned LRU evicts 3 (in the request) first.
    trace = [[1, 2, 3], [3, 4, 5]]
    unp = Simulator([CacheSpec("lru", 3)], pin=False)
    unp.feed(Batch.from_lists(trace))
    pin = Simulator([CacheSpec("lru", 3)], pin=True)
    pin.feed(Batch.from_lists(trace))
    u, p = unp.results()[0], pin.results()[0]
    assert (u.n_eviction, u.n_self_eviction) == (3, 1)
    assert (p.n_eviction, p.n_self_eviction) == (2, 0)
    assert u.n_hits == p.n_hits == 1                  # statistics come from the match phase


def test_batching_does_not_change_results():
    trace = read_jsonl(SYNTHETIC)[:800]
    specs = [CacheSpec("lru", 512), CacheSpec("clock", 1024), CacheSpec("sieve", 300)]
    one = feed_all(Simulator(specs), trace)
    many = feed_all(Simulator(specs), trace, size=37)
    assert [r.fields() for r in one] == [r.fields() for r in many]


def test_many_caches_equal_one_each():
    trace = read_jsonl(SYNTHETIC)[:600]
    specs = [CacheSpec(a, s) for a in ("lru", "fifo", "clock") for s in (256, 2048)]
    together = feed_all(Simulator(specs, cost_model="position"), trace, size=100)
    for spec, r in zip(specs, together):
        alone = feed_all(Simulator([spec], cost_model="position"), trace, size=100)[0]
        assert r.fields() == alone.fields()


def test_threads_regroup_by_measured_work_and_results_stay():
    """With 2 threads the caches are regrouped after each batch by the CPU time each took
    (``busy_ns``): every cache stays in exactly one group and the results equal one thread's."""
    trace = read_jsonl(SYNTHETIC)[:600]
    specs = [CacheSpec(a, s) for a in ("lru", "s3fifo", "random_compute") for s in (64, 2048)]
    one = feed_all(Simulator(specs, cost_model="position", threads=1), trace, size=100)
    sim = Simulator(specs, cost_model="position", threads=2)
    two = feed_all(sim, trace, size=100)
    assert [r.fields() for r in two] == [r.fields() for r in one]
    assert all(run.busy_ns > 0 for run in sim.runs)
    grouped = [id(r) for g in sim._groups for r in g]
    assert sorted(grouped) == sorted(id(r) for r in sim.runs) and len(sim._groups) == 2
    # the costliest cache (measured) leads a group of its own work
    top = max(sim.runs, key=lambda r: r.busy_ns)
    assert any(g[0] is top for g in sim._groups)


def test_lru_hits_never_fall_as_cache_grows():
    trace = read_jsonl(SYNTHETIC)[:1200]
    sizes = [64, 256, 512, 1024, 2048, 4096, 8192]
    res = feed_all(Simulator([CacheSpec("lru", s) for s in sizes], pin=False), trace, size=400)
    hits = [r.n_hits for r in res]
    assert hits == sorted(hits) and hits[0] < hits[-1]


def test_belady_at_least_every_online_policy():
    trace = read_jsonl(SYNTHETIC)[:1500]
    online = ["lru", "fifo", "clock", "sieve", "s3fifo", "arc", "twoq", "slru", "lfu", "gdsf",
              "vllm"]
    for size in (512, 2048):
        res = feed_all(Simulator([CacheSpec(a, size) for a in online + ["belady"]]), trace, 500)
        best = res[-1].block_hit_ratio
        assert all(r.block_hit_ratio <= best + 1e-12 for r in res[:-1])


def test_hole_lengths_add_up_to_misses_and_dump(tmp_path):
    trace = read_jsonl(SYNTHETIC)[:300]
    sim = Simulator([CacheSpec("lru", 512), CacheSpec("fifo", 512)], dump_holes_dir=tmp_path,
                    trace_name="x/mooncake_synthetic.jsonl")
    with sim:
        for b in batches_of(trace, 100):
            sim.feed(b)
    r = sim.results()[0]
    assert r.hole_len_sum == r.n_blocks - r.n_hits
    f = tmp_path / "holes_mooncake_synthetic_cache512_lru.txt"
    lines = f.read_text().splitlines()
    assert len(lines) == r.n_req
    assert lines[0].startswith("Request 0:")
    total = n = 0
    for line in lines:
        for part in line.split("(")[1:]:
            n += 1
            total += int(part.split("len:")[1].rstrip(") "))
    assert (n, total) == (r.n_holes, r.hole_len_sum)
    assert (tmp_path / "holes_mooncake_synthetic_cache512_fifo.txt").exists()
    assert not list(tmp_path.glob("*.tmp"))


def test_dump_holes_dir_must_exist(tmp_path):
    with pytest.raises(ShadowError, match="does not exist"):
        Simulator([CacheSpec("lru", 8)], dump_holes_dir=tmp_path / "nope")


def test_result_line_keys_in_prefixsim_order():
    sim = Simulator([CacheSpec("lru", 8)], trace_name="t.lcp.zst", cost_model="position")
    sim.feed(Batch.from_lists([[1, 2], [1, 2, 3]]))
    line = sim.results()[0].result_line()
    keys = [kv.split("=")[0] for kv in line.split()[1:]]
    assert keys == ["trace", "algo", "cache_size", "cost_model", "block_id", "n_req",
                    "n_req_skipped", "n_blocks", "block_hit_ratio", "compute_saving_ratio",
                    "n_eviction", "n_self_eviction", "n_unexpected_eviction", "prefix_hit_ratio",
                    "prefix_compute_saving_ratio", "holes_per_req", "mean_hole_len", "max_hole_len",
                    "pin", "replay_order"]
    assert "compute_saving_ratio=0.333333" in line     # position costs: hits 1+2 of 3+6
    assert sim.results()[0].summary_line().startswith("lru                      block hit ratio")


def test_live_admit_release_pins_and_anonymous():
    sim = Simulator([CacheSpec("lru", 6), CacheSpec("fifo", 6)])
    a = sim.admit([1, 2, 3], n_match=3, n_anonymous=1, timestamp_s=1.0)
    assert a.served == [True, True] and a.hits == [0, 0]
    b = sim.admit([1, 2, 9], n_match=2, timestamp_s=2.0)     # shares 1, 2 with a running request
    assert b.hits == [2, 2] and b.prefix_hits == [2, 2]
    # 6 slots: 1 2 3 9 + one anonymous + 1 free; a request of 3 new blocks must evict, but all
    # resident blocks are pinned by a or b: skipped in the shadow
    c = sim.admit([20, 21, 22])
    assert c.served == [False, False]
    sim.release(b, extra_block_ids=[10])
    sim.release(a)
    d = sim.admit([20, 21, 22])
    assert d.served == [True, True]
    r = sim.results()[0]
    assert r.n_req == 3 and r.n_req_skipped == 1
    with pytest.raises(ShadowError):
        sim.release(a)


def test_live_stats_only_over_n_match():
    sim = Simulator([CacheSpec("lru", 16)])
    sim.release(sim.admit([1, 2, 3, 4]))
    adm = sim.admit([1, 2, 3, 4, 5], n_match=2)
    assert adm.hits == [2] and adm.prefix_hits == [2]
    assert sim.results()[0].n_blocks == 4 + 2


def test_unknown_policy_and_bad_params_are_clear_errors():
    with pytest.raises(ShadowError, match="unknown policy"):
        Simulator([CacheSpec("nope", 8)])
    with pytest.raises(ShadowError, match="unknown parameter"):
        Simulator([CacheSpec("clock", 8, "bits=3")])
    with pytest.raises(ShadowError, match="bad value"):
        Simulator([CacheSpec("clock", 8, "n-bit-counter=two")])


@pytest.mark.parametrize("seed", range(3))
def test_prefix_order_replay_and_no_verify_run(seed):
    trace = random_trace(np.random.default_rng(seed), 200)
    for order in ("deepest-first", "prefix-order"):
        r = feed_all(Simulator([CacheSpec("lru", 12)], replay_order=order, verify=False), trace)[0]
        assert r.error is None and r.n_unexpected_eviction == 0


def test_prefetched_keeps_order_and_raises():
    from shadow.sim.core.simulator import prefetched

    assert list(prefetched(iter(range(50)), depth=3)) == list(range(50))

    def bad():
        yield 1
        raise ShadowError("broken trace at byte 7")

    with pytest.raises(ShadowError, match="byte 7"):
        list(prefetched(bad()))
    it = prefetched(iter(range(1000)), depth=1)
    assert next(it) == 0
    it.close()                                      # abandoning the iterator stops the thread


def test_twoq_spilled_eviction_is_unexpected_in_both_loops():
    # Found by search: with Ain = Am = 2 a ghost hit re-enters a full Am while the cache has room,
    # so 2Q (as libCacheSim's TwoQ) evicts Am's tail inside insert; both loops count it.
    from tests.sim.policy_mixin import run_both

    rng = np.random.default_rng(160)
    trace = random_trace(rng, 40, n_roots=2, max_len=int(rng.integers(3, 9)), n_raw=3)
    got, want, gc, wc, sim, ref = run_both("twoq", "Ain-size-ratio=0.5,Aout-size-ratio=1.0", 4,
                                           trace, pin=True)
    assert got == want and gc == wc
    assert gc["n_unexpected_eviction"] >= 1
    assert sim.runs[0].policy.n_resident == len(ref.policy)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["random_compute", "belady_compute", "partial_node_random_compute",
                                  "random_compute_small_queue"])
def test_reference_loop_batches_evict_n_like_the_cython_loop(name):
    # At their default (batched) settings the sampling policies draw one sample per evict_n call;
    # the reference loop asks for the same batches, so the two loops agree exactly.
    from tests.sim.policy_mixin import run_both

    for seed in range(4):
        trace = random_trace(np.random.default_rng(seed), 60, n_roots=3, max_len=8, n_raw=4)
        for pin in (False, True):
            got, want, gc, wc, _, _ = run_both(name, "", 10, trace, pin=pin)
            assert got == want and gc == wc


def test_batch_arrays_of_the_wrong_shape_are_value_errors():
    # NOTE: the loop reads these arrays without bounds checks; each bad shape must be caught
    # before it, in CacheRun.serve_batch and in serve_chunks alike.
    from shadow.sim.core.loop import CacheRun, serve_chunks
    from shadow.sim.registry import make_policy

    off = np.array([0, 2, 5], dtype=np.int64)
    ids = np.array([1, 2, 1, 3, 4], dtype=np.int64)
    nxt = np.full(5, -1, dtype=np.int64)
    ts = np.zeros(2)
    ce, ci = np.ones(3), np.ones(3, dtype=np.int64)
    two = np.array([2, 3], dtype=np.int64)
    good = dict(offsets=off, block_ids=ids, next_access=nxt, timestamps=ts, cost_exact=ce,
                cost_int=ci, n_match=two, n_anonymous=two * 0)
    bad = {
        "offsets span": dict(offsets=np.array([0, 2, 6], dtype=np.int64)),
        "offsets decrease": dict(offsets=np.array([0, 3, 2], dtype=np.int64),
                                 block_ids=ids[:3], next_access=nxt[:3]),
        "one timestamp per request": dict(timestamps=ts[:1]),
        "one match length": dict(n_match=two[:1]),
        "one anonymous-slot count": dict(n_anonymous=two[:1]),
        "cost arrays": dict(cost_exact=ce[:2]),
        "next-access array": dict(next_access=nxt[:4]),
    }

    def both(kw):
        run = CacheRun(make_policy("lru", 8), True, "deepest-first", True)
        run.reserve(8)
        yield lambda: run.serve_batch(kw["offsets"], kw["block_ids"], kw["next_access"],
                                      kw["timestamps"], kw["cost_exact"], kw["cost_int"], 0,
                                      n_match=kw["n_match"], n_anonymous=kw["n_anonymous"])
        run2 = CacheRun(make_policy("lru", 8), True, "deepest-first", True)
        run2.reserve(8)
        yield lambda: serve_chunks([run2], [kw["next_access"]], kw["offsets"], kw["block_ids"],
                                   kw["timestamps"], kw["cost_exact"], kw["cost_int"], 0,
                                   n_match=kw["n_match"], n_anonymous=kw["n_anonymous"])

    for call in both(good):
        call()
    for what, change in bad.items():
        for call in both({**good, **change}):
            with pytest.raises(ValueError, match=what):
                call()


_FULL_DISK_HOLES = r"""
import resource, signal, sys
from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.trace import Batch
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)         # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
sim = Simulator([CacheSpec("lru", 4)], dump_holes_dir=sys.argv[1], trace_name="t.lcp.zst")
try:
    with sim:
        sim.feed(Batch.from_lists([[10 * r + i for i in range(1, 9, 2)] for r in range(1, 2000)]))
except ShadowError as e:
    print(e)
    sys.exit(2)
"""


@pytest.mark.slow
def test_dump_holes_on_a_full_disk_is_an_error_and_leaves_no_file(tmp_path):
    """fprintf's failures (a full disk: a file-size limit here) surface when the file closes."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _FULL_DISK_HOLES, str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stdout.rstrip("\n").endswith("holes_t_cache4_lru.txt: cannot write: file too large "
                                           "(past the file-size limit, `ulimit -f`)")
    assert list(tmp_path.iterdir()) == []
