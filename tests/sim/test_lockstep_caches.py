"""The live cache kinds behind one interface (shadow.sim.lockstep.caches): one driver, which does not
know the kinds, hands random engine-like event streams (admissions, chunked growth, generated
blocks, partial tail blocks, preemptions and re-admissions, releases, resets) to each kind
through the same calls; every kind's hits and counters equal its parts driven directly, as the
connector's worker drove them before the interface: vLLM's pools per event, the Simulator one
event at a time (``admit`` / ``release``), each tier with the first-miss hit of every admission
its cache served."""

from __future__ import annotations

import random

import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.lockstep.caches import (COUNTERS, PARTS, TIER_COUNTERS, LiveCache, LiveRequest,
                                   PoolCaches, SimCaches, TieredCaches, TierSpecRow, counter_row)
from shadow.sim.tiers.loop import ChunkTier
from shadow.sim.engine.pool import VllmBlockPool
from shadow.sim.engine.rules import (blocks_held, full_blocks, max_hit_blocks,
                                   partial_tail_blocks)

B = 4
ENGINE = 12


# -- one event stream ---------------------------------------------------------------------------
def events(seed: int, n_requests: int = 60) -> list[tuple]:
    """Engine-like events: up to 4 requests in flight, prompts sharing prefixes, prefill in
    chunks, decode steps, generated blocks, a partial tail block or none, preemptions followed
    by re-admissions, flushes at random points and one reset (once nothing is in flight)."""
    rng = random.Random(seed)
    roots = [[100 * r + k for k in range(1, 9)] for r in range(1, 5)]
    next_id = [10_000]
    out: list[tuple] = []
    live: dict[str, dict] = {}
    started = 0
    reset_at = rng.randrange(n_requests // 3, 2 * n_requests // 3)

    def new_ids(k: int) -> list[int]:
        ids = list(range(next_id[0], next_id[0] + k))
        next_id[0] += k
        return ids

    while started < n_requests or live:
        r = rng.random()
        draining = started >= reset_at and ("reset",) not in out
        if draining and not live:
            out.append(("flush",))
            out.append(("reset",))
            continue
        if started < n_requests and len(live) < 4 and r < 0.3 and not draining:
            rid = f"q{started}"
            started += 1
            prompt = rng.choice(roots)[:rng.randrange(0, 9)] + new_ids(rng.randrange(0, 4))
            nt = len(prompt) * B + rng.randrange(0, B)
            if nt == 0:
                nt = 1
            gen = new_ids(6)
            end = min(nt, rng.choice([nt, B * 2 + 1, B * 3]))
            out.append(("admit", rid, prompt, nt, True, end))
            live[rid] = {"prompt": prompt, "nt": nt, "gen": gen, "end": end, "tokens": nt}
        elif live and r < 0.7:
            rid = rng.choice(sorted(live))
            st = live[rid]
            end = st["end"] + rng.choice([1, B, 2 * B + 1])
            end = min(end, st["tokens"] + 2 * B) if st["end"] < st["nt"] else end
            if st["end"] >= st["nt"]:
                st["tokens"] = max(st["tokens"], end + 1)   # decode: a token sampled per step
            n_full = full_blocks(end, B)
            known = st["prompt"] + st["gen"]
            if n_full > len(known):
                end = len(known) * B
                n_full = len(known)
            out.append(("grow", rid, end, known[len(st["prompt"]):n_full]))
            st["end"] = max(st["end"], end)
        elif live and r < 0.9:
            rid = rng.choice(sorted(live))
            st = live.pop(rid)
            comp = max(st["end"], st["nt"]) + rng.randrange(0, 2 * B)
            n_full = min(full_blocks(comp, B), len(st["prompt"]) + len(st["gen"]))
            comp = min(comp, (len(st["prompt"]) + len(st["gen"])) * B)
            dec = (st["prompt"] + st["gen"])[len(st["prompt"]):n_full]
            n_anon = partial_tail_blocks(comp, max(n_full, len(st["prompt"])), B)
            if rng.random() < 0.25:
                out.append(("preempt", rid, dec, n_anon))
                # the re-admission: prompt and output so far, left out of the statistics
                ids = st["prompt"] + dec
                nt = comp + 1
                out.append(("admit", rid, ids, nt, False, nt))
                live[rid] = {"prompt": ids, "nt": nt, "gen": st["gen"][len(dec):], "end": nt,
                             "tokens": nt}
            else:
                out.append(("release", rid, dec, n_anon, comp))
        else:
            out.append(("flush",))
    out.append(("flush",))
    return out


def n_match(prompt: list[int], nt: int) -> int:
    return min(len(prompt), max_hit_blocks(nt, B))


# -- the one driver ---------------------------------------------------------------------------
def drive(kind: LiveCache, evs: list[tuple], n_rows: int, n_tiers: int = 0):
    """Every event through the interface; returns each flush's (request id, hits) and the
    counters after every flush."""
    inflight: dict[str, LiveRequest] = {}
    served, counters = [], []
    for ev in evs:
        op = ev[0]
        if op == "admit":
            _, rid, prompt, nt, count, end = ev
            req = LiveRequest(rid, list(prompt), nt, n_match(prompt, nt), count, 1.0, end)
            kind.admit(req)
            inflight[rid] = req
        elif op == "grow":
            _, rid, end, more = ev
            req = inflight[rid]
            if end > req.end:
                req.ids.extend(more[len(req.ids) - len(req.prompt):])
                kind.grow(req, end)
                req.end = end
        elif op == "release":
            _, rid, dec, n_anon, comp = ev
            req = inflight.pop(rid)
            full = req.ids[:len(req.prompt)] + dec
            req.ids.extend(full[len(req.ids):])
            kind.release(req, dec, n_anon, comp)
        elif op == "preempt":
            _, rid, dec, n_anon = ev
            kind.preempt(inflight.pop(rid), dec, n_anon)
        elif op == "reset":
            kind.reset()
            inflight.clear()
        else:
            served.extend((req.req_id, hits) for req, hits in kind.flush())
            counters.append(read(kind, n_rows, n_tiers))
            if isinstance(kind, PoolCaches):
                counters[-1]["state"] = pool_states(kind.every)
    return served, counters


def pool_states(pools) -> list:
    """Each pool's physical state: the free queue (physical blocks in order) and the cached
    blocks (vLLM's block pool compared step by step in tests/connector/test_lockstep.py)."""
    for p in pools:
        p.check()
    return [(p.free_blocks(), p.cached_blocks()) for p in pools]


def read(kind: LiveCache, n_rows: int, n_tiers: int) -> dict[str, list]:
    out = {p: [None] * (n_tiers if p.startswith("tier") else n_rows) for p in PARTS}
    kind.counters(out)
    return out if n_tiers else {"caches": out["caches"], "stopped": out["stopped"]}


# -- the parts driven directly (the worker's paths before the interface) ----------------------
def pools_directly(evs, caps):
    """vLLM's pools per event; the engine-capacity pool kept apart when no row has it."""
    pools = [VllmBlockPool(c, B) for c in caps]
    extra = [] if ENGINE in caps else [VllmBlockPool(ENGINE, B)]
    tok = [[0.0, 0.0] for _ in caps]
    base = None
    inflight: dict[str, dict] = {}
    served, counters = [], []
    pending = []
    for ev in evs:
        op = ev[0]
        if op == "admit":
            _, rid, prompt, nt, count, end = ev
            ids = list(prompt)
            hits = []
            for i, (p, tk) in enumerate(zip(pools, tok)):
                res = p.admit(rid, ids, nt, end, count=count)
                ph = 0 if res is None else res[2]
                hits.append((i, ph, 0 if res is None else res[1], res is not None))
                if count:
                    tk[0] += nt
                    tk[1] += ph * B
            for p in extra:
                p.admit(rid, ids, nt, end, count=count)
            inflight[rid] = {"ids": ids, "n": len(prompt), "end": end}
            pending.append((rid, hits))
        elif op == "grow":
            _, rid, end, more = ev
            st = inflight[rid]
            if end > st["end"]:
                st["ids"].extend(more[len(st["ids"]) - st["n"]:])
                for p in pools + extra:
                    p.grow(rid, end)
                st["end"] = end
        elif op == "release":
            _, rid, dec, _n_anon, comp = ev
            st = inflight.pop(rid)
            full = st["ids"][:st["n"]] + dec
            st["ids"].extend(full[len(st["ids"]):])
            for p in pools + extra:
                if comp > st["end"]:
                    p.grow(rid, comp)
                p.free(rid)
        elif op == "preempt":
            inflight.pop(ev[1])
            for p in pools + extra:
                p.free(ev[1])
        elif op == "reset":
            base = [[(base[k][j] if base else 0) + v if j not in (8, 9) else 0
                     for j, v in enumerate(counter_row(p, [0, 0], None))]
                    for k, p in enumerate(pools)]
            old = pools + extra
            pools = [VllmBlockPool(c, B) for c in caps]
            extra = [] if ENGINE in caps else [VllmBlockPool(ENGINE, B)]
            for new, prev in zip(pools + extra, old):
                new.keep_free_order(prev)
            inflight.clear()
        else:
            served.extend(pending)
            pending = []
            counters.append({"caches": [counter_row(p, tk, None if base is None else base[k])
                                        for k, (p, tk) in enumerate(zip(pools, tok))],
                             "stopped": [int(p.failed) for p in pools],
                             "state": pool_states(pools + extra)})
    return served, counters


def simulator_directly(evs, specs):
    """The Simulator one event at a time (Simulator.admit / release)."""
    sim = Simulator(specs, verify=False)
    tok = [[0.0, 0.0] for _ in specs]
    base = None
    adm = {}
    served, counters, pending = [], [], []
    for ev in evs:
        op = ev[0]
        if op == "admit":
            _, rid, prompt, nt, count, _end = ev
            a = sim.admit(list(prompt), n_match=n_match(prompt, nt),
                          n_anonymous=blocks_held(nt, B) - full_blocks(nt, B), timestamp_s=1.0)
            adm[rid] = a
            hits = list(zip(range(len(specs)), a.prefix_hits, a.hits, a.served))
            if count:
                for tk, (_i, ph, _h, _s) in zip(tok, hits):
                    tk[0] += nt
                    tk[1] += ph * B
            pending.append((rid, hits))
        elif op in ("release", "preempt"):
            sim.release(adm.pop(ev[1]), ev[2], ev[3])
        elif op == "reset":
            base = [[(base[k][j] if base else 0) + v if j not in (8, 9) else 0
                     for j, v in enumerate(counter_row(r, [0, 0], None))]
                    for k, r in enumerate(sim.runs)]
            sim = Simulator(specs, verify=False)
            adm.clear()
        elif op == "flush":
            served.extend(pending)
            pending = []
            counters.append({"caches": [counter_row(r, tk, None if base is None else base[k])
                                        for k, (r, tk) in enumerate(zip(sim.runs, tok))],
                             "stopped": [int(bool(r.failed)) for r in sim.runs]})
    return served, counters


def tiers_directly(served_hits, admitted, specs, reset_after: int):
    """Each tier fed every admission its cache served (prompt, tokens, first-miss hit), in
    order; emptied after the first ``reset_after`` admissions, its counters going on."""
    def fresh():
        return [ChunkTier(s.n_chunks, s.policy, s.store_threshold, s.max_tracker_size)
                for s in specs]

    tiers = fresh()
    sums = [[0, 0, 0, 0, 0] for _ in specs]
    for k, ((_rid, hits), (prompt, nt)) in enumerate(zip(served_hits, admitted)):
        if k == reset_after:
            for sm, t in zip(sums, tiers):
                sm[3] += t.n_evicted
                sm[4] += t.n_store_failed
            tiers = fresh()
        for i, ph, _h, ok in hits:
            for s, t, sm in zip(specs, tiers, sums):
                if ok and s.cache == i:
                    h, lo, st = t.serve(prompt, nt, ph, B, s.blocks_per_chunk)
                    sm[0] += h
                    sm[1] += lo
                    sm[2] += st
    return [(sm[0], sm[1] * s.chunk_bytes, sm[2] * s.chunk_bytes, sm[3] + t.n_evicted,
             sm[4] + t.n_store_failed) for s, t, sm in zip(specs, tiers, sums)]


# -- the tests -----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("caps", [(6, ENGINE), (3, 8)])
def test_pools_through_the_interface_equal_the_pools_driven_directly(seed, caps):
    evs = events(seed)
    kind = PoolCaches(range(len(caps)), caps, B, None, ENGINE)
    got, got_counters = drive(kind, evs, len(caps))
    want, want_counters = pools_directly(evs, caps)
    assert got == want
    assert got_counters == want_counters
    assert ("reset",) in evs and any(c["caches"][0][0] for c in got_counters)


@pytest.mark.parametrize("seed", range(6))
def test_simulator_caches_through_the_interface_equal_one_event_at_a_time(seed):
    specs = [CacheSpec("lru", 6), CacheSpec("s3fifo", 12), CacheSpec("arc", 3)]
    evs = events(seed)
    kind = SimCaches(range(len(specs)), specs, B)
    got, got_counters = drive(kind, evs, len(specs))
    want, want_counters = simulator_directly(evs, specs)
    assert got == want
    assert got_counters == want_counters
    # the small cache skipped some requests, which it counted unserved
    assert any(not ok for _rid, hits in got for _i, _ph, _h, ok in hits)


@pytest.mark.parametrize("seed", range(4))
def test_tiers_behind_either_kind_see_every_served_admission_with_its_first_miss_hit(seed):
    evs = events(seed)
    cut = sum(1 for e in evs[:evs.index(("reset",))] if e[0] == "admit")
    admitted = [(list(e[2]), e[3]) for e in evs if e[0] == "admit"]
    tiers = [TierSpecRow(0, 0, 3, "lru", 0, 64000, 1, 100),
             TierSpecRow(1, 0, 8, "arc", 0, 64000, 2, 200),
             TierSpecRow(2, 1, 4, "lru", 1, 64000, 1, 100),
             TierSpecRow(3, 2, 4, "arc", 0, 64000, 1, 0)]
    errors = []

    def kinds():
        return [(PoolCaches((0, 2), (6, ENGINE), B, None, ENGINE), [tiers[0], tiers[1],
                                                                    tiers[3]]),
                (SimCaches((1,), [CacheSpec("lru", 6)], B), [tiers[2]])]

    for (plain, _), (inner, mine) in zip(kinds(), kinds()):
        kind = TieredCaches(inner, mine, B, lambda w, e: errors.append((w, e)))
        got, got_counters = drive(kind, evs, 3, len(tiers))
        want, want_counters = drive(plain, evs, 3)
        # the tiers change no figure of the caches they sit behind
        assert got == want
        assert [c["caches"] for c in got_counters] == [c["caches"] for c in want_counters]
        rows = got_counters[-1]["tiers"]
        direct = tiers_directly(got, admitted, mine, cut)
        assert [tuple(rows[s.row]) for s in mine] == direct
        assert any(r[2] for r in direct)   # something was stored
        last = got_counters[-1]
        for s in mine:
            assert last["tier_capacity"][s.row] == s.n_chunks * s.chunk_bytes
            assert last["tier_occupancy"][s.row] <= last["tier_capacity"][s.row]
        assert kind.cache(mine[0].cache) is inner.cache(mine[0].cache)
    assert not errors


def test_an_exception_in_one_tier_is_handed_over_and_the_others_go_on():
    errors = []
    spec = [TierSpecRow(0, 0, 4, "lru", 0, 64000, 1, 1), TierSpecRow(1, 0, 4, "lru", 0, 64000,
                                                                     1, 1)]
    kind = TieredCaches(SimCaches((0,), [CacheSpec("lru", 6)], B), spec, B,
                        lambda w, e: errors.append(w))

    class Broken:
        def serve(self, *a):
            raise RuntimeError("broken")

    kind.tiers[0].tier = Broken()
    kind.admit(LiveRequest("a", [1, 2], 9, 2, True, 0.0, 9))
    kind.flush()
    assert errors == ["tier"]
    assert kind.tiers[1].tier.n_stored == 2


def test_every_kind_reports_its_rows_and_objects():
    pools = PoolCaches((0, 2), (6, ENGINE), B, None, ENGINE)
    sims = SimCaches((1,), [CacheSpec("lru", 6)], B)
    assert pools.rows == (0, 2) and sims.rows == (1,)
    assert isinstance(pools.cache(2), VllmBlockPool) and pools.cache(2) is pools.engine
    assert sims.cache(1) is sims.sim.runs[0]
    with pytest.raises(KeyError):
        pools.cache(1)
    out = read(pools, 3, 0)
    sims.counters(out)
    assert all(len(row) == len(COUNTERS) for row in out["caches"])
    assert out["stopped"] == [0, 0, 0]
    assert len(TIER_COUNTERS) == 5
    req = LiveRequest("a", [1, 2, 3], 13, 3, True, 0.0, 13)
    for kind in (pools, sims):
        kind.admit(req)
        (r, hits), = kind.flush()
        assert r is req and [h[0] for h in hits] == list(kind.rows)
        assert kind.holds(1)
    # the engine-capacity pool kept apart follows every event when no row has that capacity
    apart = PoolCaches((0,), (6,), B, None, ENGINE)
    assert apart.engine not in apart.pools and apart.every[-1] is apart.engine
    apart.admit(req)
    assert apart.engine.block_table("a") and apart.flush()[0][1][0][0] == 0
