"""The compiled prefix probe against its pure-Python twin, over caches filled by the serve loop."""

from __future__ import annotations

import numpy as np
import pytest

from shadow.sim.fleet import probe_ref
from shadow.sim.fleet._probe import prefix_lengths, resident_mask
from shadow.sim.core.loop import CacheRun
from shadow.sim.registry import make_policy
from tests.sim._traces import batch_of, random_trace


@pytest.mark.parametrize("policy", ["lru", "arc", "s3fifo", "sieve", "vllm"])
def test_probe_equals_reference(policy):
    rng = np.random.default_rng(7)
    runs = []
    for k in range(3):
        trace = random_trace(rng, 120, n_roots=3, max_len=10)
        run = CacheRun(make_policy(policy, 24 + 8 * k, ""), True, "deepest-first", True)
        b = batch_of(trace)
        run.serve_batch(np.asarray(b.offsets, dtype=np.int64), b.block_ids, b.next_access,
                        np.zeros(b.n_requests), np.ones(64), np.ones(64, dtype=np.int64), 0)
        runs.append(run)
    out = np.zeros(3, dtype=np.int64)
    mask = np.zeros(16, dtype=np.uint8)
    found = 0
    for q in random_trace(rng, 200, n_roots=3, max_len=12):
        ids = np.asarray(q, dtype=np.int64)
        prefix_lengths([r.policy for r in runs], ids, out)
        assert out.tolist() == probe_ref.prefix_lengths(runs, ids)
        found += int(out.sum())
        for r in runs:
            held = resident_mask(r.policy, ids, mask)
            assert mask[:len(ids)].tolist() == probe_ref.resident_mask(r, ids)
            assert held == sum(probe_ref.resident_mask(r, ids))
    assert found > 0            # the queries do meet resident prefixes


def test_split_equals_reference():
    from shadow.sim.fleet._split import split
    rng = np.random.default_rng(3)
    for replicas in (1, 2, 5):
        lens = rng.integers(0, 6, 40)
        off = np.zeros(41, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        ids = rng.integers(1, 1000, int(off[-1])).astype(np.int64)
        assign = rng.integers(0, replicas, 40).astype(np.int64)
        order = np.empty(40, dtype=np.int64)
        re, ee = np.empty(replicas, dtype=np.int64), np.empty(replicas, dtype=np.int64)
        out = np.empty(ids.shape[0], dtype=np.int64)
        split(off, ids, assign, replicas, order, re, out, ee)
        want = probe_ref.split(off, ids, assign, replicas)
        r0 = e0 = 0
        for r in range(replicas):
            assert order[r0:re[r]].tolist() == want[r][0]
            assert out[e0:ee[r]].tolist() == want[r][1]
            r0, e0 = re[r], ee[r]
    with pytest.raises(ValueError, match="assigned to replica 7"):
        split(off, ids, np.full(40, 7, dtype=np.int64), replicas, order, re, out, ee)
