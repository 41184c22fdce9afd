import numpy as np
import pytest

from shadow.sim.registry import make_policy
from tests.sim._traces import random_trace
from tests.sim.policy_mixin import PolicyMixin, run_both


class TestS3FIFOd(PolicyMixin):
    NAME = "s3fifod"


class TestS3FIFOdHalfFIFOClock(PolicyMixin):
    NAME = "s3fifod"
    PARAMS = "fifo-size-ratio=0.5,main-cache=Clock,move-to-main-threshold=2"


def test_s3fifod_hand_traced():
    # C=10: fifo 1, main 9, ghost 9 (main's size), histories C // 10 = 1 id each
    p = make_policy("s3fifod", 10)
    assert (p.fifo_size, p.main_size, p.ghost_size, p.hist_size) == (1, 9, 9, 1)
    for b in range(1, 11):
        p.py_get(b)                              # the FIFO takes every new block
    assert p.py_get(1) and p.py_get(2)           # FIFO counts 1
    # 1 and 2 move to main (not over its size), 3 (count 0) leaves into the ghost and fhist
    assert p.py_evict() == 3
    q = p.queues()
    assert q["main"] == [2, 1] and q["ghost"] == [3] and q["fhist"] == [3]
    p.py_get(3)                                  # ghost hit into main; found in fhist: fhit 1
    q = p.queues()
    assert q["main"] == [3, 2, 1] and q["ghost"] == [] and q["fhist"] == [] and p.fhit == 1
    assert [p.py_evict() for _ in range(7)] == [4, 5, 6, 7, 8, 9, 10]
    assert p.queues()["fhist"] == [10]
    assert p.py_evict() == 1                     # FIFO empty: main's CLOCK tail, into mhist
    assert p.queues()["mhist"] == [1]
    assert not p.py_get(1)                       # found in mhist: mhit 1; into the FIFO
    assert (p.fhit, p.mhit) == (1, 1) and p.queues()["fifo"] == [1]
    assert p.py_get(2)                           # mhist now empty: both counts zeroed first
    assert (p.fhit, p.mhit) == (0, 0)


def _drive_reference(ref, capacity, ids):
    """libCacheSim-style gets on the reference: victims (spills included) and sizes per get."""
    out = []
    for b in ids:
        victims = []
        if ref.find(b):
            ref.hit(b)
        else:
            if len(ref) >= capacity:
                victims.append(ref.evict())
            ref.insert(b)
            victims += ref.spilled
            ref.spilled.clear()
        out.append((victims, ref.fifo_size, ref.main_size))
    return out


def _short_reuse(seed, n):
    """Every new id comes back once, 20..59 gets later: FIFO victims return, the FIFO grows."""
    rng = np.random.default_rng(seed)
    out, pending, nid = [], [], 1
    for i in range(n):
        if pending and pending[0][0] <= i:
            out.append(pending.pop(0)[1])
        else:
            out.append(nid)
            pending.append((i + int(rng.integers(20, 60)), nid))
            pending.sort()
            nid += 1
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_s3fifod_sizes_adapt_as_the_reference(seed):
    from shadow.sim.reference import make_reference

    capacity = 100
    ids = _short_reuse(seed, 8000)
    p = make_policy("s3fifod", capacity)
    got = []
    for b in ids:
        before = set(p.resident_ids())
        p.py_get(b)
        got.append((sorted(before - set(p.resident_ids())), p.fifo_size, p.main_size))
    want = _drive_reference(make_reference("s3fifod", capacity), capacity, ids)
    assert got == [(sorted(v), f, m) for v, f, m in want]
    assert max(f for _, f, _ in got) > 20        # the FIFO grew from 10


@pytest.mark.slow
@pytest.mark.parametrize("pin", [False, True])
def test_s3fifod_adapting_through_both_loops(pin):
    ids = _short_reuse(7, 3000)
    trace = [ids[i:i + 3] for i in range(0, len(ids), 3)]
    got, want, got_c, want_c, _, ref = run_both("s3fifod", "", 100, trace, pin=pin)
    assert got == want and got_c == want_c


@pytest.mark.slow
@pytest.mark.parametrize("pin", [False, True])
@pytest.mark.parametrize("capacity", [30, 100])
def test_s3fifod_larger_caches_as_the_reference(capacity, pin):
    rng = np.random.default_rng(capacity)
    trace = random_trace(rng, 600, n_roots=6, max_len=12, n_raw=5)
    got, want, got_c, want_c, _, _ = run_both("s3fifod", "", capacity, trace, pin=pin)
    assert got == want and got_c == want_c


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("capacity", [5, 9])
def test_s3fifod_without_histories_is_qdlp(capacity, seed):
    # below 10 blocks the histories hold C // 10 = 0 ids: the sizes never move (fifo 0, main C,
    # ghost C), and with a FIFO main, evicting before or after the promotion takes the same tail
    from tests.sim.test_qdlp import _hits
    from shadow.sim import CacheSpec

    trace = random_trace(np.random.default_rng(seed), 150, n_roots=3, max_len=4, n_raw=4)
    got = _hits([CacheSpec("s3fifod", capacity, "main-cache=FIFO"),
                 CacheSpec("qdlp", capacity, "ghost-size-ratio=1,main-cache=FIFO")], trace)
    assert got[0] == got[1] and got[0][1] > 0
