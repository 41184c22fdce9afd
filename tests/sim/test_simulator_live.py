"""The live API: admit / release (the final partial block at release) and LiveBatch.

Hand-traced: a request whose prompt ended on a block boundary reserved no anonymous slot at
admission, but finishes holding a final partial block (vLLM allocated it during decode, after
the generated blocks); the release must take a slot for it, evicting when the cache is full.
"""

from __future__ import annotations

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim import CacheSpec, Simulator
from shadow.sim.live.batch import LiveBatch

from shadow.sim.registry import policy_specs

#: every deterministic policy that needs no future (the registry's list)
POLICIES = [n for n, s in policy_specs(built_only=False).items()
            if s.deterministic and not s.needs_future]


def _warm(sim):
    """Blocks 10, 11 cached and unpinned; 11 is the next victim (released deepest first)."""
    sim.release(sim.admit([10, 11], n_match=1))


def test_release_takes_a_slot_for_a_final_partial_block_not_reserved_at_admission():
    sim = Simulator([CacheSpec("vllm", 4)], verify=False)
    _warm(sim)
    pol, run = sim.runs[0].policy, sim.runs[0]
    assert pol.free_queue() == [11, 10]
    a = sim.admit([1, 2], n_match=1, n_anonymous=0)        # 8 tokens, B = 4: no partial block
    assert sorted(pol.resident_ids()) == [1, 2, 10, 11] and run.n_eviction == 0
    sim.release(a, [3], n_anonymous_final=1)               # 13 tokens computed: 3 full + 1 partial
    # 3 evicts 11, the partial block evicts 10; its slot is free again after the release
    assert sorted(pol.resident_ids()) == [1, 2, 3]
    assert pol.free_queue() == [3, 2, 1]
    assert run.n_eviction == 2 and run.reserved == 0


def test_without_the_final_partial_block_one_block_fewer_is_evicted():
    sim = Simulator([CacheSpec("vllm", 4)], verify=False)
    _warm(sim)
    sim.release(sim.admit([1, 2], n_match=1), [3], n_anonymous_final=0)
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 2, 3, 10]
    assert sim.runs[0].n_eviction == 1


def test_final_partial_block_takes_a_free_slot_without_evicting():
    sim = Simulator([CacheSpec("lru", 6)], verify=False)
    _warm(sim)
    sim.release(sim.admit([1, 2], n_match=1), [3], n_anonymous_final=1)
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 2, 3, 10, 11]
    assert sim.runs[0].n_eviction == 0 and sim.runs[0].reserved == 0


def test_reserved_prompt_tail_is_kept_not_doubled():
    """A 9-token prompt reserved its partial block at admission; 3 generated tokens: 11 computed,
    still one partial block and no new full one: nothing is inserted, nothing evicted."""
    sim = Simulator([CacheSpec("vllm", 4)], verify=False)
    sim.release(sim.admit([10], n_match=1))
    a = sim.admit([1, 2], n_match=2, n_anonymous=1)
    assert sim.runs[0].reserved == 1
    sim.release(a, [], n_anonymous_final=1)
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 2, 10]
    assert sim.runs[0].n_eviction == 0 and sim.runs[0].reserved == 0


def _random_ops(rng, n):
    """Admissions with shared prefixes (some too big for the small caches) and releases in a
    random order, some with generated blocks and a final partial block."""
    ops, live, nxt_id = [], [], 1000
    prefixes = [list(range(100 * p + 1, 100 * p + 1 + int(rng.integers(1, 8)))) for p in range(6)]
    for k in range(n):
        if live and (rng.random() < 0.45 or len(live) > 5):
            j = live.pop(int(rng.integers(len(live))))
            extra = [nxt_id + i for i in range(int(rng.integers(0, 3)))]
            nxt_id += len(extra) + 1
            ops.append(("release", j, extra, int(rng.integers(0, 2))))
        else:
            ids = list(prefixes[int(rng.integers(len(prefixes)))])
            ids += [nxt_id + i for i in range(int(rng.integers(0, 5)))]
            nxt_id += 10
            ops.append(("admit", k, ids, int(rng.integers(0, len(ids) + 1)),
                        int(rng.integers(0, 2))))
            live.append(k)
    return ops


def _state(sim, adms):
    res = [(r.n_req, r.n_req_skipped, r.n_blocks, r.n_hits, r.n_prefix_hits, r.n_eviction,
            r.n_self_eviction, r.saved_cost) for r in sim.results()]
    per = [(a.served, a.hits, a.prefix_hits, a.saved, a.cost) for a in adms]
    resident = [sorted(run.policy.resident_ids()) for run in sim.runs]
    return res, per, resident, [run.reserved for run in sim.runs]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_live_batch_equals_one_request_at_a_time(seed):
    specs = [CacheSpec(p, c) for p in POLICIES for c in (6, 24)]
    ops = _random_ops(np.random.default_rng(seed), 300)

    one = Simulator(specs, cost_model="position", verify=False)
    adm1 = {}
    for op in ops:
        if op[0] == "admit":
            adm1[op[1]] = one.admit(op[2], n_match=op[3], n_anonymous=op[4], timestamp_s=op[1])
        else:
            one.release(adm1[op[1]], op[2], n_anonymous_final=op[3])

    many = Simulator(specs, cost_model="position", verify=False)
    adm2, rng, i = {}, np.random.default_rng(seed + 100), 0
    while i < len(ops):
        lb = LiveBatch()
        for op in ops[i:i + int(rng.integers(1, 40))]:
            if op[0] == "admit":
                adm2[op[1]] = lb.admit(op[2], n_match=op[3], n_anonymous=op[4], timestamp_s=op[1])
            else:
                lb.release(adm2[op[1]], op[2], n_anonymous_final=op[3])
            i += 1
        many.serve_live(lb)
    keys = sorted(adm1)
    s1 = _state(one, [adm1[k] for k in keys])
    s2 = _state(many, [adm2[k] for k in keys])
    assert s1 == s2
    assert sum(r.n_req_skipped for r in one.results()) > 0      # some admissions were skipped
    assert sum(r.n_eviction for r in one.results()) > 0


def test_live_batch_errors_are_clear():
    sim = Simulator([CacheSpec("lru", 8)])
    lb = LiveBatch()
    with pytest.raises(ShadowError, match="block id 0"):
        lb.admit([1, 0])
    a = lb.admit([1, 2])
    with pytest.raises(ShadowError, match="not served yet"):
        _ = a.hits
    lb.release(a)
    with pytest.raises(ShadowError, match="released twice"):
        lb.release(a)
    sim.serve_live(lb)
    assert a.served == [True] and sim.runs[0].policy.n_pinned == 0
    with pytest.raises(ShadowError, match="never served"):
        LiveBatch().release(LiveBatch().admit([5]))


def test_cache_run_live_batch_per_cache_equals_serve_live():
    """``CacheRun.live_batch`` (one cache) and ``live_batch_all`` (every cache) agree."""
    specs = [CacheSpec(p, 8) for p in ("vllm", "lru", "arc")]
    a, b = Simulator(specs, verify=False), Simulator(specs, verify=False)
    lb1, lb2 = LiveBatch(), LiveBatch()
    for lb in (lb1, lb2):
        x = lb.admit([1, 2, 3], n_match=2, n_anonymous=1)
        lb.admit([1, 2, 7, 8, 9, 10])
        lb.release(x, [4, 5], n_anonymous_final=1)
        lb.admit([1, 2, 3, 4, 6])
    a.serve_live(lb1)
    n = len(lb2.ev)
    ev = np.array(lb2.ev, dtype=np.int64)
    ids = np.array(lb2.flat, dtype=np.int64)
    out_i = np.zeros((n, len(specs), 3), dtype=np.int64)
    out_f = np.zeros((n, len(specs), 3))
    b._ensure_costs(lb2.max_len + 1)
    for k, run in enumerate(b.runs):
        run.live_batch(k, ev, np.array(lb2.offsets, dtype=np.int64), ids, np.full(len(ids), -1),
                       np.array(lb2.ts), b._cost_exact, b._cost_int, out_i, out_f, 0)
    assert [r.fields() for r in a.results()] == [r.fields() for r in b.results()]
    assert [sorted(r.policy.resident_ids()) for r in a.runs] == \
        [sorted(r.policy.resident_ids()) for r in b.runs]
    with pytest.raises(ValueError, match="inconsistent"):
        b.runs[0].live_batch(0, ev, np.zeros(2, dtype=np.int64), ids, np.full(len(ids), -1),
                             np.array(lb2.ts), b._cost_exact, b._cost_int, out_i, out_f, 0)


@pytest.mark.parametrize("bad", [0, -1, -(2 ** 63)])
def test_admission_of_a_block_id_below_1_is_refused(bad):
    sim = Simulator([CacheSpec("lru", 8)])
    with pytest.raises(ShadowError, match=rf"block id {bad} in an admission \(block ids start at 1\)"):
        sim.admit([3, bad, 4])
    assert sim.results()[0].n_req == 0


def test_holds_says_which_blocks_a_cache_keeps():
    sim = Simulator([CacheSpec("lru", 2)], verify=False)
    run = sim.runs[0]
    sim.release(sim.admit([5, 6]))
    assert run.holds(5) and run.holds(6) and not run.holds(7)
    sim.release(sim.admit([7]))                   # evicts 6 or 5 (lru: 6 was used last)
    assert run.holds(7) and sum(run.holds(b) for b in (5, 6)) == 1
