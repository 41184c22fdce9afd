"""The lockstep worker without vLLM: events in submission order feed a real Simulator, a full
queue drops and counts, an exception is counted and logged once and the worker goes on, and the
final partial block is held while generated blocks are inserted (hand-traced against vLLM)."""

from __future__ import annotations

import logging

from shadow.connector.config import parse_extra_config
from shadow.connector.schema import CACHE_FIELDS
from shadow.connector.worker import Admit, Release, ShadowWorker
from shadow.sim.engine.rules import partial_tail_blocks

B = 4


def config(**extra):
    extra.setdefault("policies", ["vllm", "lru"])
    extra.setdefault("capacity_factors", [1])
    return parse_extra_config(extra, block_size=B, engine_blocks=8)


def h(*names):
    """Chained-looking opaque hashes: one bytes object per block name."""
    return [f"h:{n}".encode() for n in names]


def admit(rid, hashes, num_tokens, t=1.0):
    return Admit(rid, hashes, num_tokens, 0, False, t)


def release(rid, decode, n_out, num_tokens_total_computed, n_full):
    return Release(rid, decode, n_out, 2.0, 0,
            partial_tail_blocks(num_computed_tokens=num_tokens_total_computed,
                                n_full_blocks=n_full, block_size=B))


def test_admit_release_and_reuse_of_generated_blocks():
    w = ShadowWorker(config())
    try:
        # request a: 9 prompt tokens (2 full blocks + partial), 4 generated -> 12 computed
        assert w.submit(admit("a", h("p1", "p2"), 9))
        w.submit_control(release("a", h("g1"), 4, 12, 3))
        # request b: a's prompt + its output + more: 3 cached blocks, then a miss
        assert w.submit(admit("b", h("p1", "p2", "g1", "x"), 17))
        assert w.flush()
        preds = w.predictions
        assert [p.request_id for p in preds] == ["a", "b"]
        key = "vllm|8"
        assert preds[0].prefix_hit_tokens[key] == 0
        assert preds[1].prefix_hit_tokens[key] == 3 * B
        assert preds[1].n_match == (17 - 1) // B
        snap = w.snapshot
        row = dict(zip(snap.cache_keys, snap.caches))[key]
        fields = dict(zip(CACHE_FIELDS, row))
        assert fields["requests"] == 2 and fields["block_prefix_hits"] == 3
        assert fields["query_tokens"] == 9 + 17 and fields["prefix_hit_tokens"] == 3 * B
        assert "b" in w.inflight and "a" not in w.inflight
    finally:
        w.stop()


def test_full_queue_refuses_without_blocking_and_releases_still_go_through():
    w = ShadowWorker(config(queue_size=2), start=False)
    assert w.submit(admit("a", h("a1"), 5))
    assert w.submit(admit("b", h("b1"), 5))
    assert not w.submit(admit("c", h("c1"), 5))  # dropped: the caller counts it
    w.submit_control(release("a", [], 1, 5, 1))  # control events ignore the bound
    assert len(w.queue) == 3
    w.start()
    assert w.flush()
    assert [p.request_id for p in w.predictions] == ["a", "b"]
    assert set(w.inflight) == {"b"}
    w.stop()


def test_an_exception_is_counted_logged_once_and_the_worker_goes_on(caplog):
    w = ShadowWorker(config())
    try:
        with caplog.at_level(logging.ERROR, logger="shadow.connector.worker"):
            for _ in range(3):
                w.submit(Admit("bad", None, 5, 0, False, 1.0))  # hashes None: TypeError
            w.submit(admit("ok", h("o1"), 5))
            assert w.flush()
        assert w.snapshot.worker[2] == 3
        assert sum("failed" in r.getMessage() for r in caplog.records) == 1
        assert [p.request_id for p in w.predictions] == ["ok"]
    finally:
        w.stop()


def test_final_partial_block_is_held_while_generated_blocks_go_in():
    """Hand-traced against vLLM's BlockPool (4 usable blocks, B=4).

    x: blocks 10, 11 cached and free (free queue: 11 then 10, deepest first).
    a: an 8-token prompt (blocks 1, 2: no partial block at admission), 6 tokens generated, so
       13 tokens computed: block 3 full and hashed, a 4th block partial.  vLLM allocated the 3rd
       and 4th block during decode, evicting 11 and 10; a shadow that forgot the partial block
       would keep 10.
    """
    from shadow.sim import CacheSpec, Simulator

    sim = Simulator([CacheSpec("vllm", 4)], pin=True, verify=False)
    x = sim.admit([10, 11], n_match=1, n_anonymous=0)
    sim.release(x)
    pol = sim.runs[0].policy
    assert pol.free_queue() == [11, 10]
    a = sim.admit([1, 2], n_match=(8 - 1) // B, n_anonymous=0)
    n_final = partial_tail_blocks(8 + 6 - 1, 3, B)
    assert n_final == 1
    sim.release(a, [3], n_anonymous_final=n_final)
    assert sorted(pol.resident_ids()) == [1, 2, 3]
    assert pol.free_queue() == [3, 2, 1]  # freed tail first; the partial block's slot is free
    assert sim.runs[0].n_eviction == 2
    assert sim.runs[0].reserved == 0


def test_final_partial_block_with_a_reserved_prompt_tail():
    """a: a 9-token prompt (blocks 1, 2 + a partial block reserved at admission), 3 generated:
    11 tokens computed, the prompt's partial block is still partial at the end (no new block)."""
    from shadow.sim import CacheSpec, Simulator

    sim = Simulator([CacheSpec("vllm", 4)], pin=True, verify=False)
    sim.release(sim.admit([10], n_match=1, n_anonymous=0))
    a = sim.admit([1, 2], n_match=2, n_anonymous=1)
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 2, 10]
    sim.release(a, [], n_anonymous_final=partial_tail_blocks(9 + 3 - 1, 2, B))
    assert sorted(sim.runs[0].policy.resident_ids()) == [1, 2, 10]
    assert sim.runs[0].n_eviction == 0 and sim.runs[0].reserved == 0


def test_partial_tail_blocks():
    assert partial_tail_blocks(12, 3, 4) == 0
    assert partial_tail_blocks(13, 3, 4) == 1
    assert partial_tail_blocks(0, 0, 4) == 0
    assert partial_tail_blocks(5, 3, 4) == 0  # never negative


def _thread_nice(tid: int) -> int:
    # /proc/<pid>/task/<tid>/stat: field 19 is the nice value (after the parenthesised name)
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])


def test_worker_thread_runs_nicer_than_the_engine_threads():
    import os
    import threading

    base = _thread_nice(threading.get_native_id())
    for nice, want in ((10, min(base + 10, 19)), (0, base)):
        w = ShadowWorker(config(worker_nice=nice))
        try:
            assert w.flush()
            got = _thread_nice(w._thread.native_id)
        finally:
            w.stop()
        assert got == want, (nice, got)
    assert os.getpriority(os.PRIO_PROCESS, 0) == base   # the caller (the engine's thread) untouched


def test_prefill_seconds_per_cache_and_the_engines_own(tmp_path):
    """With a profile cost model: per cache and for the engine's own hits, the prefill seconds
    of each admission and what the hits saved, from the profile's table (hand-computed)."""
    import json

    from shadow.connector.schema import PREFILL_FIELDS, WORKER_FIELDS, cumulative_payload
    from shadow.sim.cost.profile import load_profile

    prof = tmp_path / "p.jsonl"
    pts = [(0, 4, 1.0), (0, 9, 2.0), (0, 17, 4.0), (0, 40, 8.0), (8, 1, 0.5), (8, 9, 1.5),
           (12, 5, 1.25)]
    prof.write_text("".join(json.dumps({"cached": c, "new": n, "s": s}) + "\n"
                            for c, n, s in pts))
    t = load_profile(str(prof)).seconds
    w = ShadowWorker(config(cost_model=f"profile:{prof}", policies=["vllm", "lru"],
                            capacity_factors=[], capacities=[64]))
    try:
        w.submit(admit("a", h("p1", "p2"), 9))
        w.submit_control(release("a", h("g1"), 4, 12, 3))
        # b: the engine reported 8 cached tokens, the shadow caches hit 3 blocks (12 tokens)
        w.submit(Admit("b", h("p1", "p2", "g1", "x"), 17, 8, False, 3.0))
        # c: re-admitted after a preemption: in the log, not in the counters
        w.submit(Admit("c", h("p1"), 9, 0, True, 4.0))
        assert w.flush()
        preds = {p.request_id: p for p in w.predictions}
        assert preds["a"].prefill_s_no_hit == 2.0
        assert preds["a"].prefill_s == {"vllm|64": 2.0, "lru|64": 2.0, "engine": 2.0}
        assert preds["b"].prefill_s_no_hit == 4.0
        assert preds["b"].prefill_s == {"vllm|64": 1.25, "lru|64": 1.25, "engine": 1.5}
        assert preds["c"].prefill_s_no_hit == 2.0
        snap = w.snapshot
        assert snap.prefill_keys == snap.cache_keys
        for key, row in zip(snap.prefill_keys, snap.prefill):
            f = dict(zip(PREFILL_FIELDS, row))
            assert f["prefill_seconds"] == 2.0 + 1.25, key
            assert f["prefill_seconds_saved"] == 0.0 + (4.0 - 1.25), key
        eng = dict(zip(WORKER_FIELDS, snap.worker))
        assert eng["engine_prefill_seconds"] == 2.0 + 1.5
        assert eng["engine_prefill_seconds_saved"] == 4.0 - 1.5
        assert float(t(12, 5)) == 1.25
        payload = cumulative_payload(snap, (0, 0, 0, 0, 0), 8)
        assert payload["p"] == {k: list(r) for k, r in zip(snap.prefill_keys, snap.prefill)}
        assert payload["e"]["engine_prefill_seconds_saved"] == 2.5
    finally:
        w.stop()


def test_without_a_profile_no_prefill_part():
    w = ShadowWorker(config())
    try:
        w.submit(admit("a", h("p1", "p2"), 9))
        assert w.flush()
        snap = w.snapshot
        assert snap.prefill_keys == () and snap.prefill == ()
        assert w.predictions[0].prefill_s is None and w.predictions[0].prefill_s_no_hit is None
    finally:
        w.stop()
