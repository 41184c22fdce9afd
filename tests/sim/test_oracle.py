"""Next access recomputed without skipped requests (shadow/sim/core/oracle.py).

A request with more distinct blocks than the cache is skipped; its accesses must not be anyone's
next access, and positions count only served entries (the loop's vtime does not advance over a
skipped request).  Checked against a brute-force recomputation, through the Cython loop against
the pure-Python reference loop, and end to end through ``shadow simulate`` on JSONL and lcp files.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shadow.sim import CacheSpec, Simulator
from shadow.sim.core.oracle import attach_next_access, recompute_next_access
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache
from shadow.trace.batch import Batch
from tests.sim._traces import intern_prefix, next_access
from tests.sim.policy_mixin import prefix_traces, raw_traces

# R3 (3 distinct blocks) is skipped by a 2-block cache.  In the trace's annotation block 1's next
# access is inside R3 (position 4), so at R2 belady keeps 1 and evicts 2, and R4 misses.  Without
# R3, block 1 is never used again and 2 is (served position 4): belady evicts 1 and R4 hits.
HAND = [[1], [2], [3], [1, 4, 5], [2]]


def brute_force(trace: list[list[int]], capacity: int) -> list[int]:
    """Flat next-access values over served requests only (served positions), -1 elsewhere."""
    served = [len(set(r)) <= capacity for r in trace]
    flat = [(b, ok) for r, ok in zip(trace, served) for b in r]
    pos, v = [], 0
    for _, ok in flat:
        if ok:
            v += 1
        pos.append(v if ok else -1)
    out = [-1] * len(flat)
    for i, (b, ok) in enumerate(flat):
        if not ok:
            continue
        for j in range(i + 1, len(flat)):
            if flat[j][1] and flat[j][0] == b:
                out[i] = pos[j]
                break
    return out


def split(flat: list[int], trace: list[list[int]]) -> list[list[int]]:
    out, k = [], 0
    for r in trace:
        out.append(flat[k:k + len(r)])
        k += len(r)
    return out


def batches(trace: list[list[int]], size: int) -> list[Batch]:
    nxt = next_access(trace)
    out, vt = [], 1
    for a in range(0, len(trace), size):
        b = Batch.from_lists(trace[a:a + size], next_access=nxt[a:a + size], first_request=a,
                             first_vtime=vt)
        vt += b.n_blocks
        out.append(b)
    return out


class _Trace:
    """What ``attach_next_access`` reads: a header and re-iterable batches."""

    def __init__(self, trace: list[list[int]], size: int = 3, counts_valid: bool = True) -> None:
        from shadow.trace.header import LcpHeader
        from shadow.trace.format import FLAG_COUNTS_VALID, FLAG_HAS_NEXT_ACCESS

        self.trace, self.size = trace, size
        flags = FLAG_HAS_NEXT_ACCESS | (FLAG_COUNTS_VALID if counts_valid else 0)
        self.header = LcpHeader(flags=flags, n_requests=len(trace),
                                n_block_accesses=sum(map(len, trace)),
                                n_unique_blocks=max(b for r in trace for b in r),
                                max_blocks_per_request=max(map(len, trace)))

    def __iter__(self):
        return iter(batches(self.trace, self.size))


def test_hand_made_values():
    src = recompute_next_access(batches(HAND, 2), [2, 3, 5])
    assert src.capacities == [2]                  # 3 and 5 skip nothing
    assert src.n_skipped(2) == 1
    assert src.array(2).tolist() == [-1, 4, -1, -1, -1, -1, -1]
    assert sum(next_access(HAND), []) == [4, 7, -1, -1, -1, -1, -1]   # the trace's own


def _belady_hits(trace, capacity, recompute: bool, name: str = "belady") -> tuple[list[int], Simulator]:
    sim = Simulator([CacheSpec(name, capacity)], pin=True)
    if recompute:
        assert attach_next_access(sim, _Trace(trace)) is not None
    run = sim.runs[0]
    hits = []
    for b in _Trace(trace):
        sim.feed(b)
        hits.append(run.n_hits)
    return hits, sim


def test_hand_made_belady_needs_the_recomputation():
    stale, _ = _belady_hits(HAND, 2, recompute=False)
    fixed, sim = _belady_hits(HAND, 2, recompute=True)
    assert stale[-1] == 0                         # the stale next access cost R4's hit
    assert fixed[-1] == 1
    r = sim.results()[0]
    assert (r.n_req, r.n_req_skipped, r.n_hits) == (4, 1, 1)
    # the reference loop fed the recomputed values agrees
    ref = RefCache(make_reference("belady", 2), 2, pin=True)
    for req, nx in zip(HAND, split(brute_force(HAND, 2), HAND)):
        ref.serve(req, nx)
    assert ref.n_hits == 1 and ref.n_req_skipped == 1


def test_no_prepass_when_nothing_can_be_skipped():
    sim = Simulator([CacheSpec("belady", 3), CacheSpec("lru", 2)])
    # the lru cache is smaller than R3, but it reads no next access: only belady's 3 counts
    assert attach_next_access(sim, _Trace(HAND)) is None
    assert sim.next_access_source is None


def test_header_without_counts_still_recomputes():
    sim = Simulator([CacheSpec("belady", 2)])
    src = attach_next_access(sim, _Trace(HAND, counts_valid=False))
    assert src is not None and src.array(2).tolist() == [-1, 4, -1, -1, -1, -1, -1]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=st.one_of(prefix_traces, raw_traces), caps=st.lists(st.integers(1, 9), min_size=1,
       max_size=3), size=st.integers(1, 7))
def test_matches_brute_force(trace, caps, size):
    src = recompute_next_access(batches(trace, size), caps)
    for c in sorted(set(caps)):
        want = brute_force(trace, c)
        got = src.array(c)
        if any(len(set(r)) > c for r in trace):
            assert got is not None and got.tolist() == want
        else:
            assert got is None and want == sum(next_access(trace), [])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=st.one_of(prefix_traces, raw_traces), capacity=st.integers(1, 8),
       name=st.sampled_from(["belady", "belady_compute"]), pin=st.booleans(),
       size=st.integers(1, 6))
def test_cython_loop_with_recomputed_values_equals_reference(trace, capacity, name, pin, size):
    params = "evict-batch=1" if name == "belady_compute" else ""
    sim = Simulator([CacheSpec(name, capacity, params)], pin=pin, cost_model="position")
    attach_next_access(sim, _Trace(trace, size))
    run = sim.runs[0]
    ref = RefCache(make_reference(name, capacity, params), capacity, pin=pin,
                   cost_model="position")
    want_next = split(brute_force(trace, capacity), trace)
    got, want = [], []
    k = 0
    for b in _Trace(trace, size):
        h0 = run.n_hits
        sim.feed(b)
        got.append(run.n_hits - h0)
        h1 = ref.n_hits
        for _ in range(b.n_requests):
            ref.serve(trace[k], want_next[k])
            k += 1
        want.append(ref.n_hits - h1)
    assert got == want
    r = sim.results()[0]
    assert r.error is None
    assert (r.n_req_skipped, r.n_eviction) == (ref.n_req_skipped, ref.n_eviction)
    # vtimes agree with the loop's: every served entry's value lies ahead of the served stream
    assert run.vtime == ref.vtime == sum(len(t) for t in trace if len(set(t)) <= capacity)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trace=prefix_traces, capacity=st.integers(1, 10), pin=st.booleans())
def test_belady_at_least_lru_with_skips(trace, capacity, pin):
    """With skipped requests, belady fed the recomputed values still beats an online policy."""
    sims = {}
    for name in ("belady", "lru", "fifo"):
        sim = Simulator([CacheSpec(name, capacity)], pin=pin)
        attach_next_access(sim, _Trace(trace))
        for b in _Trace(trace):
            sim.feed(b)
        sims[name] = sim.results()[0].n_hits
    assert sims["belady"] >= max(sims["lru"], sims["fifo"])


def _write_jsonl(path, raw: list[list[int]]) -> None:
    with open(path, "w") as f:
        for i, r in enumerate(raw):
            f.write(json.dumps({"timestamp": i, "hash_ids": r}) + "\n")


@pytest.mark.parametrize("fmt", ["jsonl", "lcp.zst"])
def test_simulate_command_recomputes(tmp_path, fmt):
    from shadow.cli import cli

    raw = [[11], [12], [13], [11, 14, 15], [12]]          # interned: HAND
    assert intern_prefix(raw) == HAND
    src = tmp_path / "t.jsonl"
    _write_jsonl(src, raw)
    path = src
    if fmt != "jsonl":
        from shadow.trace.convert import convert_file

        path = tmp_path / "t.lcp.zst"
        convert_file(str(src), str(path))
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(path), "-c", "2,3",
                                   "--algo", "belady,lru"])
    assert res.exit_code == 0, res.output
    lines = {(f["algo"], f["cache_size"]): f for f in
             (dict(kv.split("=", 1) for kv in line.split()[1:])
              for line in res.output.splitlines() if line.startswith("RESULT"))}
    b2 = lines[("belady", "2")]
    assert (b2["n_req"], b2["n_req_skipped"], b2["block_hit_ratio"]) == ("4", "1", "0.250000")
    assert lines[("belady", "3")]["n_req_skipped"] == "0"
