"""Out of memory mid-run: a policy whose allocation fails inside the serve loop must not abort
the process (the shadow runs inside the engine) nor report figures from a state it could not
keep.  It sets ``nomem``; the loop fails that cache after the request (``FAIL_NOMEM``); the
process goes on.

Real allocation failures, no fault injection: each case runs in a child process that builds
its cache, then lowers its own address-space limit (``RLIMIT_AS``) to what it uses plus a few
MiB, so the next large allocation (slot ids or a ghost ring widened to 64 bits, a ring or FIFO
grown) fails for real.  The child prints what it saw as JSON; an abort would kill it (SIGABRT).
"""

import pytest

from tests.oom_support import run_child

_CHILD = r'''
import json, sys
import numpy as np

from tests.oom_support import fix_mmap_threshold, relax, result, squeeze

fix_mmap_threshold()


def batch(reqs):
    """Arrays of one batch; a request is a list of ids or ``{"first": id, "n": count}``."""
    reqs = [np.arange(r["first"], r["first"] + r["n"], dtype=np.int64) if isinstance(r, dict)
            else np.asarray(r, np.int64) for r in reqs]
    offs = np.zeros(len(reqs) + 1, np.int64)
    offs[1:] = np.cumsum([len(r) for r in reqs])
    ids = reqs[0] if len(reqs) == 1 else np.concatenate(reqs)
    longest = max(len(r) for r in reqs)
    return (offs, ids, np.full(ids.shape[0], -1, np.int64), np.full(len(reqs), -1.0),
            np.ones(longest), np.ones(longest, np.int64))


def serve(run, reqs, first):
    return run.serve_batch(*batch(reqs), first)


def loop_case(name, params, capacity, reqs_before, req_big):
    """Serve ``reqs_before``, squeeze, serve ``req_big`` (whose allocation cannot fit), relax,
    serve one more request."""
    from shadow.sim.core.loop import CacheRun, FAIL_MESSAGES
    from shadow.sim.registry import make_policy

    run = CacheRun(make_policy(name, capacity, params))
    run.reserve(max(r["n"] if isinstance(r, dict) else len(r) for r in reqs_before + [req_big]))
    served_before = serve(run, reqs_before, 0)
    big = batch([req_big])
    after = batch([[1, 2, 3]])
    saved = squeeze()
    served_big = run.serve_batch(*big, len(reqs_before))
    relax(saved)
    served_after = run.serve_batch(*after, len(reqs_before) + 1)
    return {"served_before": served_before, "served_big": served_big,
            "served_after": served_after, "failed": run.failed, "failed_req": run.failed_req,
            "nomem": run.policy.nomem, "n_req": run.n_req,
            "message": FAIL_MESSAGES[run.failed].format(req=run.failed_req, block=0)
            if run.failed else None}


def ghost_case(kind):
    from shadow.sim.policies._shared.ghost import GhostFIFO

    limit = 2_000_000
    g = GhostFIFO(limit)
    if kind == "widen":
        for k in range(1, 1001):
            g.push(k)
    else:
        # a full ring (no tombstones): the next unbounded push must grow it
        for k in range(1, g.capacity[0] + 1):
            g.push(k)
    n0, cap0 = len(g), g.capacity
    saved = squeeze()
    try:
        g.push(2**40 if kind == "widen" else 10**9)
        error = None
    except MemoryError as e:
        error = str(e)
    relax(saved)
    g.check()
    return {"error": error, "nomem": g.nomem, "n_before": n0, "n_after": len(g),
            "cap_before": list(cap0), "cap_after": list(g.capacity), "id_bits": g.id_bits}


def live_case():
    """The live API (the connector's): two caches; a release inserts a generated block past
    2**31 - 1 with no memory to widen the big cache's slot ids."""
    from shadow.sim import CacheSpec, Simulator

    sim = Simulator([CacheSpec("lru", 4 << 20), CacheSpec("lru", 64)])
    a = sim.admit([1, 2, 3])
    saved = squeeze()
    sim.release(a, [2**40])
    relax(saved)
    sim.release(sim.admit([1, 2, 4]))
    big, small = sim.results()
    return {"errors": [big.error, small.error], "n_req": [big.n_req, small.n_req],
            "n_hits": [big.n_hits, small.n_hits]}


case = json.loads(sys.argv[1])
if case["kind"] == "live":
    out = live_case()
elif case["kind"] == "loop":
    out = loop_case(case["name"], case["params"], case["capacity"], case["before"], case["big"])
else:
    out = ghost_case(case["kind"])
result(out)
'''


def _child(case: dict) -> dict:
    return run_child(_CHILD, case)


def _check_failed_cleanly(out: dict, n_before: int) -> None:
    assert out["served_before"] == n_before
    assert out["served_big"] == 0                    # the request that ran out of memory
    assert out["served_after"] == 0                  # the cache stays stopped
    assert out["failed"] == 4 and out["failed_req"] == n_before
    assert out["nomem"] == 1
    assert out["n_req"] == n_before + 1
    assert out["message"].startswith("out of memory: the policy could not allocate what "
                                     f"request {n_before} needed")


# The slot ids widen to 64 bits at the first id past 2**31 - 1: 4M slots x 8 B = 32 MiB.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["lru", "s3fifo", "arc", "lirs", "lfu",
                                  "random_compute_small_queue", "partial_node_random_compute",
                                  "belady"])
def test_slot_ids_widening_without_memory_fails_the_cache_not_the_process(name):
    before = [[1, 2, 3, 4], [1, 2, 5], [6, 7]]
    out = _child({"kind": "loop", "name": name, "params": "", "capacity": 4 << 20,
                  "before": before, "big": [8, 9, 2**40, 10]})
    _check_failed_cleanly(out, len(before))


# s3fifo's small FIFO starts at about half the cache (small-size-ratio=0.5: a 2.5M-entry ring).
# Once the cache has evicted, every new block goes to small; one request of 2.67M new blocks
# empties small and part of main to make room, then fills small past its ring: the 1.5x ring
# (about 15 MiB) cannot be had, every entry is live, so the blocks past it stay off the ring
# (sf_push's out-of-memory path).
@pytest.mark.slow
def test_full_fifo_without_memory_to_grow_fails_the_cache_not_the_process():
    capacity = 4 << 20
    before = [{"first": 1, "n": capacity}, [capacity + 1]]    # fill, then one eviction
    big = {"first": capacity + 2, "n": (capacity * 5) // 8 + 50_000}
    out = _child({"kind": "loop", "name": "s3fifo", "params": "small-size-ratio=0.5",
                  "capacity": capacity, "before": before, "big": big})
    _check_failed_cleanly(out, len(before))


@pytest.mark.slow
def test_live_release_without_memory_fails_that_cache_at_the_next_admission():
    out = _child({"kind": "live"})
    big_error, small_error = out["errors"]
    assert big_error.startswith("out of memory") and "request 1 needed" in big_error
    assert small_error is None
    assert out["n_req"] == [1, 2]           # the big cache counted nothing of the second one
    assert out["n_hits"] == [0, 2]


@pytest.mark.slow
def test_ghost_ring_widening_without_memory_keeps_the_ring():
    out = _child({"kind": "widen"})
    assert out["error"] and "no memory" in out["error"]
    assert out["nomem"] == 1
    assert out["n_after"] == out["n_before"] == 1000      # the id was not added; none lost
    assert out["id_bits"] == 32
    assert out["cap_after"] == out["cap_before"]


@pytest.mark.slow
def test_ghost_ring_growth_without_memory_keeps_the_ring():
    out = _child({"kind": "grow"})
    assert out["error"] and "no memory" in out["error"]
    assert out["nomem"] == 1
    assert out["n_after"] == out["n_before"] == out["cap_before"][0]
    assert out["cap_after"] == out["cap_before"]


def test_the_same_requests_with_memory_succeed():
    """The control: the children above fail only for want of memory (same requests, no
    squeeze here, in this process)."""
    import numpy as np

    from shadow.sim.core.loop import CacheRun
    from shadow.sim.registry import make_policy

    run = CacheRun(make_policy("lru", 64))
    reqs = [[1, 2, 3, 4], [1, 2, 5], [6, 7], [8, 9, 2**40, 10]]
    offs = np.array([0, 4, 7, 9, 13], np.int64)
    ids = np.array([b for r in reqs for b in r], np.int64)
    served = run.serve_batch(offs, ids, np.full(13, -1, np.int64), np.full(4, -1.0),
                             np.ones(4), np.ones(4, np.int64), 0)
    assert served == 4 and run.failed == 0 and run.policy.nomem == 0
    assert run.policy.py_find(2**40) >= 0
