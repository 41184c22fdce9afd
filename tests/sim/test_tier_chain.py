"""A disk tier behind the host tier (shadow/sim/tiers/model.py's TierChain, vLLM's
TieringOffloadingManager): hand-traced rules (cascade, staged promotion with the host tier's
eviction, a disk tier smaller than the host tier, eviction in each tier, the lookup's retries)
and the chain grammar."""

from __future__ import annotations

import dataclasses

import pytest

from shadow.errors import ShadowError
from shadow.sim.tiers import model as T
from tests.sim.test_tier import Gpu, VllmTier, _streams
from tests.tiers import unit_rows


def _chain(cpu: int, disk: int, cpu_policy: str = "lru", disk_policy: str = "lru",
           threshold: int = 0, tracker: int = 64_000) -> T.TierChain:
    return T.TierChain(T.OffloadTier(cpu, cpu_policy, threshold, tracker),
                       T.OffloadTier(disk, disk_policy))


def _serve(c: T.TierChain, ids: list[int], gpu_hit: int = 0, k: int = 1) -> T.ChainOutcome:
    """A request whose prompt is exactly its blocks of 16 tokens."""
    return T.serve_chain(c, ids, 16 * len(ids), gpu_hit, 16, k)


def test_a_store_cascades_to_the_disk_tier():
    c = _chain(100, 100)
    assert _serve(c, [1, 2, 3]) == T.ChainOutcome(0, 0, 0, 0, 3, 3)
    assert all(c.cpu.holds(b) and c.disk.holds(b) for b in (1, 2, 3))
    # a reload from the host tier stores nothing new, so nothing cascades
    assert _serve(c, [1, 2, 3, 4]) == T.ChainOutcome(48, 0, 3, 0, 1, 1)
    assert c.n_cascaded == 4 and c.disk.n_stored == 4


def test_a_disk_hit_is_promoted_with_the_host_tiers_eviction_then_loaded():
    c = _chain(2, 10)
    _serve(c, [1, 2])
    _serve(c, [3, 4])                       # the host tier evicts 1 and 2; the disk keeps them
    assert list(c.cpu.policy.order) == [4, 3] and not c.cpu.holds(1)
    # scan 1: the disk tier's probes answer RETRY; scan 2: 1 and 2 are promoted (evicting 4,
    # then 3: the oldest outside the promotion and the promotions in flight), answering
    # HIT_PENDING; scan 3: both ready: 32 tokens, all the disk tier's
    assert _serve(c, [1, 2]) == T.ChainOutcome(32, 32, 2, 2, 0, 0)
    assert list(c.cpu.policy.order) == [2, 1] and c.cpu.n_evicted == 4
    assert c.n_promoted == 2 and c.cpu.n_stored == 4     # promotions are not GPU stores


def test_a_run_continues_through_both_tiers_and_splits_the_hit_by_source():
    c = _chain(3, 10)
    _serve(c, [3])
    _serve(c, [9])
    _serve(c, [1, 2])                        # the host tier evicts 3, its oldest
    assert list(c.cpu.policy.order) == [9, 2, 1] and c.disk.holds(3)
    # 1, 2 from the host tier, 3 promoted (evicting 9); 5 missing: stored (evicting 2, the
    # oldest outside the offer: the load does not refresh) and cascaded
    assert _serve(c, [1, 2, 3, 5]) == T.ChainOutcome(48, 16, 3, 1, 1, 1)
    assert c.disk.holds(5) and not c.cpu.holds(2)
    # the request's chunks in prefix order at its end, the head newest
    assert list(c.cpu.policy.order) == [5, 3, 1]
    # a GPU hit of half a chunk: the disk share is the promoted chunk's tokens past it
    c2 = _chain(4, 10)
    _serve(c2, [1, 2, 3, 4], k=2)
    _serve(c2, [5, 6, 7, 8], k=2)
    _serve(c2, [9, 10, 11, 12], k=2)         # the host tier (2 chunks) now holds 10, 12
    assert not c2.cpu.holds(2) and c2.disk.holds(2) and c2.disk.holds(4)
    # GPU holds block 1 (16 tokens): chunk 0 (blocks 1-2) from token 16, chunk 1: both promoted
    out = T.serve_chain(c2, [1, 2, 3, 4], 64, 1, 16, 2)
    assert out == T.ChainOutcome(48, 48, 2, 2, 0, 0)


def test_earlier_hits_of_the_run_are_not_protected_from_a_promotion():
    c = _chain(3, 10)
    _serve(c, [1, 2, 3])
    _serve(c, [4])                           # the host tier evicts 3 (deepest is oldest)
    assert list(c.cpu.policy.order) == [2, 1, 4]
    # scan 1: 1, 2 hit, 3 probed; scan 2: 3 promoted evicting 2 (vLLM pins a chunk only when
    # it loads it); scan 3: 2 probed; scan 4: 2 promoted back evicting 1; then 1 is probed,
    # promoted evicting 4, and all are ready.  Every chunk of the hit was promoted for this
    # request: all 48 tokens are the disk tier's
    assert _serve(c, [1, 2, 3, 5]) == T.ChainOutcome(48, 48, 3, 3, 1, 1)
    assert c.n_promoted == 3 and c.cpu.n_evicted == 1 + 3 + 1


def test_a_disk_tier_smaller_than_the_host_tier():
    c = _chain(4, 2)
    # three chunks cascade into two slots with nothing to evict: the cascade stores nothing
    assert _serve(c, [1, 2, 3]) == T.ChainOutcome(0, 0, 0, 0, 3, 0)
    assert c.disk.n_store_failed == 1 and len(c.disk.policy) == 0
    assert _serve(c, [4]) == T.ChainOutcome(0, 0, 0, 0, 1, 1)
    # 5 and 6: the host tier evicts 3 and 2 (its oldest), the disk tier 4 (room for one more)
    assert _serve(c, [5, 6]) == T.ChainOutcome(0, 0, 0, 0, 2, 2)
    assert list(c.disk.policy.order) == [6, 5] and c.disk.n_evicted == 1
    assert sorted(c.cpu.policy.order) == [1, 4, 5, 6]       # 3 and 2 went (deepest oldest)
    # 1 is only in the host tier (its cascade failed): a host hit; 3 is in neither: a miss
    assert _serve(c, [1]) == T.ChainOutcome(16, 0, 1, 0, 0, 0)
    assert _serve(c, [3]) == T.ChainOutcome(0, 0, 0, 0, 1, 1)


def test_eviction_in_each_tier_and_a_promotion_is_a_disk_reuse():
    c = _chain(1, 3)
    for b in (1, 2, 3):
        _serve(c, [b])
    assert list(c.disk.policy.order) == [1, 2, 3] and list(c.cpu.policy.order) == [3]
    assert c.cpu.n_evicted == 2 and c.disk.n_evicted == 0
    assert _serve(c, [1]) == T.ChainOutcome(16, 16, 1, 1, 0, 0)   # promoted: evicts 3 from cpu
    assert list(c.disk.policy.order) == [2, 3, 1]                  # the read made 1 newest
    _serve(c, [4])                             # host evicts 1; the disk tier evicts 2, its oldest
    assert list(c.disk.policy.order) == [3, 1, 4] and c.disk.n_evicted == 1
    assert list(c.cpu.policy.order) == [4] and c.cpu.n_evicted == 4


def test_a_run_longer_than_the_host_tier_cycles_and_the_lookup_gives_up():
    c = _chain(1, 10)
    for b in (1, 2, 3):
        _serve(c, [b])
    # scan 1: the disk tier's probes (RETRY); scan 2: 1 promoted (evicting 3), 2 finds no room
    # (1 in flight): a miss; scan 3: 1 ready, 2 promoted evicting 1; scan 4: 1 promoted
    # evicting 2, 2 no room; ... (vLLM retries forever); after 3 * 2 + 4 scans the request
    # loads nothing, then its store finds no room
    assert _serve(c, [1, 2]) == T.ChainOutcome(0, 0, 0, 0, 0, 0)
    assert c.n_gave_up == 1 and c.n_promote_failed == 5 and c.n_promoted == 9
    assert c.cpu.n_store_failed == 1


def test_arc_host_tier_keeps_a_promoted_chunk_in_t1_and_learns_from_its_ghost():
    c = _chain(2, 10, cpu_policy="arc")
    for b in (1, 2, 3):
        _serve(c, [b])
    assert list(c.cpu.policy.t1) == [2, 3] and list(c.cpu.policy.b1) == [1]
    # the promotion is the host tier's store of 1: its ghost in B1 raises p to 1, then T1
    # (2 >= p) gives its oldest, 2; the load of a chunk this request inserted is no reuse
    assert _serve(c, [1]) == T.ChainOutcome(16, 16, 1, 1, 0, 0)
    assert list(c.cpu.policy.t1) == [3, 1] and not c.cpu.policy.t2
    assert c.cpu.policy.p == 1.0 and list(c.cpu.policy.b1) == [2]


def test_the_store_threshold_defers_a_promotion_until_offered_often_enough():
    c = _chain(1, 10, threshold=2, tracker=1)
    for b in (1, 1, 2, 2):
        _serve(c, [b])                        # each stored on its second offer
    assert c.cpu.holds(2) and c.disk.holds(1) and 1 not in c.cpu.counts   # 1 aged out
    # (the model's rule; vLLM's tiering refuses a store threshold) scan 1: probed; scan 2: the
    # promotion's offer counts 1 (< 2): skipped, HIT_PENDING; scan 3: stored (evicting 2), in
    # flight; scan 4: a hit
    assert _serve(c, [1]) == T.ChainOutcome(16, 16, 1, 1, 0, 0)
    assert c.n_promoted == 1 and c.cpu.n_store_skipped == 3


# --- grammar -----------------------------------------------------------------------------------

def test_parse_a_chain_pairs_sizes_and_shares_the_chunk():
    specs = T.parse_tiers("cpu:64g,128g:arc:chunk=2,threshold=1>disk:1t,4t:lru:bw=3")
    assert [(s.first.size_text, s.second.size_text) for s in specs] == \
        [("64g", "1t"), ("64g", "4t"), ("128g", "1t"), ("128g", "4t")]
    s = specs[0]
    assert (s.first.policy, s.first.store_threshold, s.second.policy) == ("arc", 1, "lru")
    assert s.second.blocks_per_chunk == 2 and s.second.store_threshold == 0
    assert s.second.bandwidth_gbps == 3.0 and s.first.bandwidth_gbps == T.MEDIA["cpu"][0]
    assert s.label == "cpu:64g:arc>disk:1t:lru"
    assert s.n_chunks(1 << 20) == 32 << 10
    # one tier still parses as before
    assert T.parse_tiers("disk:1t:lru") == T.parse_tier("disk:1t:lru")


@pytest.mark.parametrize("text,msg", [
    ("disk:1t:lru>cpu:1g:lru", "a chain starts with the cpu tier"),
    ("cpu:1g:lru>cpu:2g:lru", "tier 2 of a chain is disk, not cpu"),
    ("cpu:1g:lru>tape:1t:lru", "unknown medium 'tape'"),
    ("cpu:1g:lru>disk:1t:lru>disk:2t:lru", "at most 2 tiers"),
    ("cpu:1g:lru:chunk=2>disk:1t:lru:chunk=4", "chunk=4 on the disk tier differs"),
    ("cpu:1g:lru>disk:1t:lru:threshold=2", "threshold= is the cpu tier's"),
    ("cpu:1g:lru>disk:1t:lfu", "unknown tier policy 'lfu'"),
    ("cpu:1g:lru:threshold=2>disk:1t:lru", "refuses store_threshold"),
    ("cpu:1g:lru>disk:1t", "not MEDIUM:SIZES:POLICY"),
    ("cpu:1g:lru>", "not MEDIUM:SIZES:POLICY"),
])
def test_parse_chain_errors_are_one_line(text, msg):
    with pytest.raises(ShadowError, match=msg) as e:
        T.parse_tiers(text)
    assert "\n" not in str(e.value) and str(e.value).startswith(f"--tier {text}:")


def test_a_chain_disk_tier_smaller_than_a_chunk_is_refused():
    with pytest.raises(ShadowError, match="smaller than one offload chunk"):
        T.parse_tiers("cpu:8blk:lru:chunk=4>disk:3blk:lru")[0].n_chunks(None)


# --- vLLM's TieringOffloadingManager with its file-system tier, request by request -----------

class VllmChain(VllmTier):
    """vLLM 0.32's TieringOffloadingManager: a CPUPrimaryTierOffloadingManager over a real
    shared-memory region and a FileSystemTierManager writing chunk files under ``root``,
    driven with the scheduler's calls (``begin``, ``load``: test_tier's adapter); each step ends
    with ``on_schedule_end`` and waits for the tier's I/O threads (its file writes and reads,
    its asynchronous lookups), so every transfer completes between steps as in the model."""

    def __init__(self, n_chunks: int, policy: str, root: str) -> None:
        import mmap
        import types
        import uuid
        from vllm.v1.kv_offload.cpu.shared_offload_region import SharedOffloadRegion
        from vllm.v1.kv_offload.tiering.fs.manager import FileSystemTierManager
        from vllm.v1.kv_offload.tiering.manager import (CPUPrimaryTierOffloadingManager,
                                                       TieringOffloadingManager)
        region = SharedOffloadRegion(uuid.uuid4().hex, n_chunks, None, mmap.PAGESIZE,
                                     mmap.PAGESIZE)
        self.primary = CPUPrimaryTierOffloadingManager(n_chunks, region, policy)
        # NOTE: the parts of an OffloadingSpec the file-system tier reads (its file names)
        ns = types.SimpleNamespace
        config = ns(groups=[ns(tokens_per_block=16, layer_names=["layer0"])],
                    parallel=ns(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, rank=0,
                                is_parallelism_agnostic=True),
                    canonical_layout=False, kv_cache_layout=None, replicated_layout=False,
                    model=ns(name="shadow-test", dtype="bfloat16"),
                    cache=ns(tokens_per_hash=16))
        spec = ns(config=config, blocks_per_chunk=1,
                  kv_events_config=ns(enable_kv_cache_events=False))
        self.fs = FileSystemTierManager(spec, self.primary.get_kv_memoryview(), "fs", root,
                                        n_read_threads=2, n_write_threads=2)
        self.m = TieringOffloadingManager(self.primary, [self.fs])
        self.ctx = None
        self.cascaded = 0
        self.n_gave_up = 0
        self.retry_slack = 0

    def lookup(self, k: int) -> int:
        from vllm.v1.kv_offload.base import LookupResult
        r = self.m.lookup(self.key(k), self.ctx)
        return {LookupResult.HIT: T.LOOKUP_HIT, LookupResult.MISS: T.LOOKUP_MISS,
                LookupResult.RETRY: T.LOOKUP_RETRY}.get(r, T.LOOKUP_PENDING)

    def step_end(self) -> None:
        import time
        from vllm.v1.kv_offload.base import ScheduleEndContext
        from vllm.v1.kv_offload.tiering.async_lookup import LookupPhase
        end = ScheduleEndContext(new_req_ids=(), preempted_req_ids=())
        self.m.on_schedule_end(end)
        self.fs.drain_jobs()
        lm = self.fs._lookup_manager
        while any(s.phase is LookupPhase.IN_FLIGHT for s in lm._lookup_state.values()):
            lm.drain_results()
            time.sleep(1e-4)
        self.m.on_schedule_end(end)           # takes in the finished transfers

    def source_is_disk(self, k: int) -> bool:
        from vllm.v1.metrics.cache_hit_source import CacheHitSource
        return self.m.get_load_source(self.key(k), self.ctx) == CacheHitSource.DISK

    def load(self, keys, acc=None) -> None:
        super().load(keys, acc)

    def store(self, keys, acc=None):
        out = self.m.prepare_store([self.key(k) for k in keys], self.ctx)
        if out is None:
            return None
        if out.keys_to_store:
            self.m.complete_store(out.keys_to_store, self.ctx)
        self.cascaded = 0                     # NOTE: vLLM writes every cascaded chunk's file
        return out.keys_to_store

    def finish(self, acc=None) -> None:
        self.m.on_request_finished(self.ctx)
        self.step_end()                       # the cascades land before the next request

    def close(self) -> None:
        self.m.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("policy", T.TIER_POLICIES)
def test_equals_vllm_tiering_manager_per_request(policy, tmp_path):
    pytest.importorskip("vllm.v1.kv_offload.tiering.fs.manager")
    promoted = 0
    for name, reqs in _streams():
        for gpu_cap, n_chunks in [(16, 64), (64, 200)]:
            ours = T.TierChain(T.OffloadTier(n_chunks, policy), T.OffloadTier(10**9))
            theirs = VllmChain(n_chunks, policy, str(tmp_path / f"{name}-{gpu_cap}"))
            g = Gpu(gpu_cap)
            try:
                for i, (ids, P) in enumerate(reqs):
                    h = g.serve(ids, P, 16)
                    a = T.serve_chain(ours, ids, P, h, 16, 1)
                    b = T.serve_chain(theirs, ids, P, h, 16, 1)
                    assert dataclasses.replace(a, cascaded_chunks=0) == b, (name, gpu_cap, n_chunks, i)
                    promoted += a.promoted_loaded_chunks
            finally:
                theirs.close()
            assert ours.n_gave_up == theirs.n_gave_up
    assert promoted > 500           # the streams do reach the disk tier


# --- the compiled chain (shadow/sim/tiers/loop.pyx) against this reference ----------------------

@pytest.mark.parametrize("cpu_policy,disk_policy", unit_rows([("lru", "lru"), ("arc", "lru"),
                                                    ("lru", "arc"), ("arc", "arc")], 4))
@pytest.mark.parametrize("k", unit_rows([1, 2], 2))
def test_compiled_chain_equals_the_reference_per_request(cpu_policy, disk_policy, k):
    from shadow.sim.tiers.loop import ChunkChain, ChunkTier
    gave_up = 0
    for name, reqs in _streams():
        # a host tier too small for some runs (the give-up), a disk tier smaller than the host
        # tier, and both roomy
        for gpu_cap, n_cpu, n_disk in [(8, 3, 40), (16, 40, 8), (64, 40, 300), (256, 300, 900)]:
            ref = _chain(n_cpu, n_disk, cpu_policy, disk_policy)
            fast = ChunkChain(ChunkTier(n_cpu, cpu_policy), ChunkTier(n_disk, disk_policy))
            g = Gpu(gpu_cap)
            for i, (ids, P) in enumerate(reqs):
                h = g.serve(ids, P, 16)
                a = T.serve_chain(ref, ids, P, h, 16, k)
                assert dataclasses.astuple(a) == fast.serve(ids, P, h, 16, k), \
                    (name, gpu_cap, n_cpu, n_disk, i)
            for ours, theirs in ((ref.cpu, fast.cpu), (ref.disk, fast.disk)):
                assert (ours.n_stored, ours.n_evicted, ours.n_store_failed) == \
                    (theirs.n_stored, theirs.n_evicted, theirs.n_store_failed)
                assert len(ours.policy) == len(theirs)
                if isinstance(ours.policy, T.ArcChunks):
                    assert ours.policy.p == theirs.p
            assert (ref.n_promoted, ref.n_promote_failed, ref.n_cascaded, ref.n_gave_up) == \
                (fast.n_promoted, fast.n_promote_failed, fast.n_cascaded, fast.n_gave_up)
            gave_up += ref.n_gave_up
    assert gave_up > 0              # the small host tier does reach the give-up


# --- shadow simulate --tier CPU>DISK -----------------------------------------------------------

def test_simulate_chain_keys_and_a_hand_traced_run(tmp_path):
    from shadow.sim.core.results import EXTRA_KEYS, RESULT_KEYS
    from shadow.sim.tiers.run import TIER2_KEYS, TIER_KEYS
    from tests.sim.test_tier_cli import ABC, _lines
    from tests.sim.test_timing import _recording, _simulate
    t = _recording(tmp_path / "t.lcp", ABC)
    code, out, _ = _simulate(t, "-a", "lru", "-c", "5", "--tier", "cpu:4blk:lru",
                             "--tier", "cpu:4blk:lru>disk:8blk,2blk:lru")
    assert code == 0
    single, chain, small = _lines(out)
    assert list(single) == list(RESULT_KEYS + EXTRA_KEYS + TIER_KEYS)
    assert list(chain) == list(RESULT_KEYS + EXTRA_KEYS + TIER_KEYS + TIER2_KEYS)
    # the cache's own keys and the host tier's stores are the single tier's
    for k in RESULT_KEYS + EXTRA_KEYS + ("tier", "tier_chunks", "tier_stored_bytes"):
        assert chain[k] == single[k], k
    assert chain["tier2"] == "disk:8blk:lru" and chain["tier2_chunks"] == "8"
    # A's 4 chunks go to both tiers; B's evict them from the 4-chunk host tier only; C finds
    # them on disk: promoted (evicting B's) and loaded, 16 tokens, all the disk tier's
    assert single["tier_hit_tokens"] == "0"
    assert (chain["tier_hit_tokens"], chain["tier2_hit_tokens"]) == ("0", "16")
    assert float(chain["tier2_hit_ratio"]) == pytest.approx(4 / int(chain["n_blocks"]))
    assert (chain["tier_evictions"], chain["tier2_evictions"]) == ("8", "0")
    assert chain["tier2_promotion_failures"] == "0" and chain["tier2_loaded_bytes"] == "na"
    # a 2-chunk disk tier: every request's cascade of 4 chunks fails: C finds nothing
    assert (small["tier2_hit_tokens"], small["tier2_store_failures"]) == ("0", "3")


def test_simulate_chain_bytes_and_two_hop_load_time(tmp_path):
    from tests.sim.test_tier_cli import ABC, _lines
    from tests.sim.test_timing import _recording, _simulate
    t = _recording(tmp_path / "t.lcp", ABC)
    _, out, _ = _simulate(t, "-a", "lru", "-c", "5", "--bytes-per-block", "1000",
                          "--tier", "cpu:4000:lru:bw=2>disk:8000:lru:bw=1")
    (kv,) = _lines(out)
    # A and B store 4 chunks each, both tiers; C loads its 4 (promoted): nothing to store
    assert kv["tier_stored_bytes"] == "8000" and kv["tier2_stored_bytes"] == "8000"
    assert kv["tier2_loaded_bytes"] == "4000" and kv["tier_loaded_bytes"] == "0"
    # 4000 bytes from disk at 1 GB/s, then to the GPU at 2 GB/s
    assert float(kv["tier2_load_s"]) == pytest.approx(4000 / 1e9 + 4000 / 2e9)


@pytest.mark.parametrize("text,words", unit_rows([
    ("disk:8blk:lru>cpu:4blk:lru", "a chain starts with the cpu tier"),
    ("cpu:4blk:lru>cpu:8blk:lru", "tier 2 of a chain is disk"),
    ("cpu:4blk:lru>ssd:8blk:lru", "unknown medium 'ssd'"),
    ("cpu:4blk:lru>disk:8blk:lru>disk:9blk:lru", "at most 2 tiers"),
    ("cpu:4blk:lru>disk:1blk:lru:chunk=2", "differs from the cpu tier's"),
    ("cpu:8blk:lru:chunk=2>disk:1blk:lru", "smaller than one offload chunk"),
    ("cpu:4blk:lru>disk:1g:lru", "needs the bytes of a KV block"),
], 4))
def test_simulate_bad_chain_is_one_line(tmp_path, text, words):
    import subprocess
    import sys
    from tests.sim.test_tier_cli import ABC
    from tests.sim.test_timing import _recording
    t = _recording(tmp_path / "t.lcp", ABC)
    out = tmp_path / "out.txt"
    r = subprocess.run([sys.executable, "-m", "shadow", "simulate", "-t", t, "-c", "4", "-a",
                        "lru", "--tier", text, "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and not r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and words in r.stderr, r.stderr
    assert "--tier " in r.stderr and not out.exists()


# --- shadow sweep --tier CPU>DISK --------------------------------------------------------------

@pytest.mark.slow
def test_sweep_chain_cells_equal_simulate_and_plot(tmp_path):
    import csv
    from shadow.sim.tiers.run import TIER2_KEYS, TIER_KEYS
    from shadow.sweep.store import parse_result_line
    from tests.sim.test_timing import _overlapping, _recording
    from tests.sweep.test_sweep_timing import shadow
    trace = _recording(tmp_path / "r.lcp", _overlapping(200, 7))
    chain = "cpu:8blk,32blk:lru>disk:64blk:arc"
    proc = shadow("sweep", "-t", trace, "-a", "lru", "-c", "8", "--tier", chain,
                  "--tier", "cpu:8blk:lru", "--timing", "recorded",
                  "--out", str(tmp_path / "s"), "-j", "2")
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "s" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    sim = shadow("simulate", "-t", trace, "-a", "lru", "-c", "8", "--tier", chain,
                 "--tier", "cpu:8blk:lru", "--timing", "recorded")
    assert sim.returncode == 0, sim.stderr
    want = {(d["tier"], d.get("tier2", "")): d for d in
            (parse_result_line(x) for x in sim.stdout.splitlines() if x.startswith("RESULT"))}
    assert len(want) == 3
    for r in rows:
        ref = want[(r["tier"], r["tier2"])]
        for key in ("prefix_hit_ratio",) + TIER_KEYS + (TIER2_KEYS if r["tier2"] else ()):
            assert r[key] == ref[key], (r["tier"], key)
    assert any(float(r["tier2_hit_ratio"] or 0) > 0 for r in rows)
    plot = shadow("plot", str(tmp_path / "s"))
    assert plot.returncode == 0, plot.stderr
    pngs = sorted(p.split("/")[-1] for p in plot.stdout.split() if "__tier-" in p)
    assert len(pngs) == 2 and any("disk" in p for p in pngs), pngs


def test_sweep_bad_chain_refused_before_any_cell(tmp_path):
    from tests.sim.test_timing import _overlapping, _recording
    from tests.sweep.test_sweep_timing import shadow
    trace = _recording(tmp_path / "r.lcp", _overlapping(20, 7))
    proc = shadow("sweep", "-t", trace, "-c", "8", "-a", "lru", "--tier",
                  "cpu:8blk:lru>cpu:8blk:lru", "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "tier 2 of a chain is disk" in proc.stderr and not (tmp_path / "s").exists()


def test_the_connectors_tier_entries_refuse_a_chain_in_one_line():
    with pytest.raises(ShadowError, match="runs offline only") as e:
        T.parse_tier_entry("cpu:1g:lru>disk:1t:lru", "tiers[0]", 16)
    assert str(e.value).startswith("tiers[0]: ") and "\n" not in str(e.value)
