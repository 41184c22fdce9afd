"""The live path (admit / release / LiveBatch) against the pure-Python reference, event by event.

Every registered policy that has a reference runs under the parameters its spec names for the
reference (``reference_params``); oracles get next-access values with each admission.  Seeded
random sequences interleave admissions (shared and growing prefixes, ``n_match`` < B,
anonymous slots, repeated ids) and releases in random order (generated blocks, some already
cached, and final partial blocks) over small caches, so evictions, skips for size and skips for
held room all occur.  After every event each cache's resident set, pins, reserved slots, vtime and
counters must equal the reference's, and each admission's results too; through
:meth:`Simulator.admit`/:meth:`Simulator.release` one event at a time, and through
:class:`LiveBatch`/:meth:`Simulator.serve_live` in batches (compared after each batch).

The hand-traced cases at the end check the reference in its own terms, and three cases pin down
rules both loops keep (a skip for held room counts no hole; one pin per position of a repeated id;
a release never evicts a block that a running request holds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from shadow.sim import CacheSpec, Simulator
from shadow.sim.live.batch import Admission, LiveBatch
from shadow.sim.core.loop import CacheRun
from shadow.sim.reference import make_reference, reference_module
from shadow.sim.reference.loop import RefCache, Served
from shadow.sim.registry import policy_specs
from tests.sim._traces import next_access


def _cases() -> tuple[list[tuple[str, str]], dict[str, str]]:
    """(policy, params) for every policy whose reference follows it; the others, with why."""
    cases, left_out = [], {}
    for name, spec in policy_specs(built_only=False).items():
        try:
            reference_module(name)
        except LookupError:
            left_out[name] = "no pure-Python reference"
            continue
        if not spec.deterministic and not spec.reference_params:
            left_out[name] = "random draws the reference does not follow (no reference_params)"
            continue
        cases.append((name, spec.reference_params))
    return cases, left_out


CASES, LEFT_OUT = _cases()
#: small: requests (up to 10 blocks and 2 anonymous slots) are skipped for size at 4 and 8, and
#: up to 4 in-flight requests hold all the room now and then at every size
CAPACITIES = (4, 8, 16)
N_EVENTS = 160


@dataclass
class Admit:
    key: int
    ids: list[int]
    n_match: int
    n_anonymous: int
    timestamp_s: float
    next_access: list[int]


@dataclass
class Release:
    key: int
    extra: list[int]
    n_anonymous_final: int


def _events(seed: int, repeats: bool) -> list[Admit | Release]:
    """Multi-turn conversations: an admission continues a conversation from a prefix of it
    (shared prefixes), adds 0-3 new blocks, and its release's generated blocks (0-3) extend the
    conversation (a later turn's prompt reads them).  A generated block is now and then an id
    already seen (a cached one: the release's hit path).  ``repeats``: an id now and then twice
    in one request."""
    rng = np.random.default_rng(seed)
    convs: list[list[int]] = [[] for _ in range(4)]
    seen: list[int] = []
    fresh = iter(range(1, 10**6))
    events: list[Admit | Release] = []
    live: list[tuple[int, int]] = []          # (key, conversation)
    for e in range(N_EVENTS):
        if live and (rng.random() < 0.5 or len(live) >= 4):
            key, c = live.pop(int(rng.integers(len(live))))
            extra = []
            adm = next(ev for ev in events if isinstance(ev, Admit) and ev.key == key)
            for _ in range(int(rng.integers(0, 4))):
                old = seen[int(rng.integers(len(seen)))]
                if rng.random() < 0.2 and (repeats or old not in adm.ids + extra):
                    extra.append(old)
                else:
                    extra.append(next(fresh))
            convs[c] = adm.ids + extra
            seen.extend(extra)
            events.append(Release(key, extra, int(rng.integers(0, 3))))
        else:
            c = int(rng.integers(len(convs)))
            keep = int(rng.integers(0, min(len(convs[c]), 6) + 1))
            ids = convs[c][:keep] + [next(fresh) for _ in range(int(rng.integers(0, 4)))]
            if repeats and ids and rng.random() < 0.15:
                ids.insert(int(rng.integers(len(ids) + 1)), ids[int(rng.integers(len(ids)))])
            if not ids:
                ids = [next(fresh)]
            B = len(ids)
            n_match = B if rng.random() < 0.6 else int(rng.integers(0, B + 1))
            convs[c] = list(ids)
            seen.extend(ids)
            events.append(Admit(e, ids, n_match, int(rng.integers(0, 3)), float(e), []))
            live.append((e, c))
    admits = [ev for ev in events if isinstance(ev, Admit)]
    for ev, nx in zip(admits, next_access([ev.ids for ev in admits])):
        ev.next_access = nx
    return events


def _setup(verify: bool) -> tuple[Simulator, list[RefCache]]:
    specs = [CacheSpec(name, cap, params) for name, params in CASES for cap in CAPACITIES]
    sim = Simulator(specs, cost_model="position", verify=verify, threads=1)
    refs = [RefCache(make_reference(s.policy, s.capacity, s.params or None), s.capacity,
                     cost_model="position", verify=verify) for s in specs]
    return sim, refs


def _state_of_run(run: CacheRun) -> dict:
    resident = sorted(run.policy.resident_ids())
    out = dict(
        resident=resident,
        pins={b: c for b in resident if (c := run.policy.pin_count(b))},
        counters=(run.n_req, run.n_req_skipped, run.n_blocks, run.n_hits, run.n_prefix_hits,
                  run.total_cost, run.saved_cost, run.prefix_saved_cost, run.n_eviction,
                  run.n_self_eviction, run.n_unexpected_eviction),
        reserved=run.reserved, vtime=run.vtime, failed=bool(run.failed))
    if hasattr(run.policy, "free_queue"):
        out["free_queue"] = run.policy.free_queue()        # vllm: the release order itself
    return out


def _state_of_ref(ref: RefCache, resident: list[int]) -> dict:
    """The reference's state in :func:`_state_of_run`'s terms; its resident set is read as
    ``resident`` when the policy holds exactly those ids (else the mismatch shows)."""
    p = ref.policy
    same = len(p) == len(resident) and all(p.find(b) for b in resident)
    out = dict(
        resident=resident if same else f"{len(p)} blocks, not {resident}",
        pins=dict(ref.pins),
        counters=(ref.n_req, ref.n_req_skipped, ref.n_blocks, ref.n_hits, ref.n_prefix_hits,
                  ref.total_cost, ref.saved_cost, ref.prefix_saved_cost, ref.n_eviction,
                  ref.n_self_eviction, ref.n_unexpected_eviction),
        reserved=ref.reserved, vtime=ref.vtime, failed=ref.failed is not None)
    if hasattr(p, "free"):
        out["free_queue"] = list(p.free)
    return out


def _compare_states(sim: Simulator, refs: list[RefCache], where: str) -> None:
    for spec, run, ref in zip(sim.specs, sim.runs, refs):
        got = _state_of_run(run)
        assert got == _state_of_ref(ref, got["resident"]), \
            f"{spec.policy} cache {spec.capacity} after {where}"


def _compare_admission(sim: Simulator, adm: Admission, want: list[Served], where: str) -> None:
    got = list(zip(adm.served, adm.hits, adm.prefix_hits, adm.cost, adm.saved, adm.prefix_saved))
    for spec, g, w in zip(sim.specs, got, want):
        assert g == (w.status == "served", w.n_hits, w.n_prefix_hits, w.cost, w.saved,
                     w.prefix_saved), f"{spec.policy} cache {spec.capacity} at {where}"


def _ref_event(refs: list[RefCache], ev: Admit | Release, admitted: dict) -> list[Served] | None:
    """Apply one event to every reference cache; an admission's results per cache."""
    if isinstance(ev, Admit):
        out = [ref.admit(ev.ids, ev.next_access, ev.timestamp_s, ev.n_match, ev.n_anonymous)
               for ref in refs]
        admitted[ev.key] = (ev, out)
        return out
    adm, served = admitted[ev.key]
    for ref, s in zip(refs, served):
        if s.status == "served":                 # a skipped admission holds nothing to release
            ref.release(adm.ids, ev.extra, adm.n_anonymous, ev.n_anonymous_final)
    return None


def _check_coverage(sim: Simulator) -> None:
    """The sequence did what it is meant to: evictions and skips, and every cache served some
    admissions (the kinds of skip: :func:`test_the_sequences_hold_room_and_skip_for_it`)."""
    assert sum(r.n_eviction for r in sim.runs) > 0
    assert sum(r.n_req_skipped for r in sim.runs) > 0
    assert all(r.n_req > 0 for r in sim.runs)


# (verify, repeated ids): the connector runs with verify off
MODES = [pytest.param(True, True, id="verify-repeats"), pytest.param(False, False, id="no-verify"),
         pytest.param(False, True, id="no-verify-repeats")]


@pytest.mark.slow
@pytest.mark.parametrize("verify,repeats", MODES)
@pytest.mark.parametrize("seed", range(2))
def test_admit_release_one_at_a_time_equal_the_reference(seed: int, verify: bool,
                                                         repeats: bool) -> None:
    sim, refs = _setup(verify)
    one_at_a_time(sim, refs, _events(seed, repeats))
    _check_coverage(sim)


def one_at_a_time(sim: Simulator, refs: list[RefCache], events: list[Admit | Release],
                  also=None) -> None:
    """Apply ``events`` one at a time to ``sim`` and ``refs``, comparing after each; ``also(e)``
    (optional) checks more after event ``e``."""
    adms: dict[int, Admission] = {}
    admitted: dict = {}
    for e, ev in enumerate(events):
        want = _ref_event(refs, ev, admitted)
        if isinstance(ev, Admit):
            adms[ev.key] = sim.admit(ev.ids, ev.n_match, ev.n_anonymous, ev.timestamp_s,
                                     ev.next_access)
            _compare_admission(sim, adms[ev.key], want, f"event {e} {ev}")
        else:
            sim.release(adms[ev.key], ev.extra, ev.n_anonymous_final)
        _compare_states(sim, refs, f"event {e} {ev}")
        if also is not None:
            also(e)


@pytest.mark.slow
@pytest.mark.parametrize("verify,repeats", MODES)
@pytest.mark.parametrize("seed", range(2))
def test_live_batches_equal_the_reference(seed: int, verify: bool, repeats: bool) -> None:
    sim, refs = _setup(verify)
    events = _events(seed, repeats)
    rng = np.random.default_rng(seed + 1000)
    adms: dict[int, Admission] = {}
    admitted: dict = {}
    i = 0
    while i < len(events):
        lb = LiveBatch()
        wants = []
        for ev in events[i:i + int(rng.integers(1, 9))]:
            want = _ref_event(refs, ev, admitted)
            if isinstance(ev, Admit):
                adms[ev.key] = lb.admit(ev.ids, ev.n_match, ev.n_anonymous, ev.timestamp_s,
                                        ev.next_access)
                wants.append((ev, want))
            else:
                lb.release(adms[ev.key], ev.extra, ev.n_anonymous_final)
            i += 1
        sim.serve_live(lb)
        for ev, want in wants:
            _compare_admission(sim, adms[ev.key], want, f"{ev} (batch ending at event {i})")
        _compare_states(sim, refs, f"the batch ending at event {i}")
    _check_coverage(sim)


def test_every_policy_is_compared_or_left_out_with_a_reason() -> None:
    names = [n for n, _ in CASES]
    assert sorted(names + list(LEFT_OUT)) == sorted(policy_specs(built_only=False))
    assert any(policy_specs()[n].needs_future for n in names)     # oracles: given next access


def test_the_sequences_hold_room_and_skip_for_it() -> None:
    """Some admissions are skipped only because in-flight requests hold the room (they would fit
    an idle cache), some for size alone."""
    held = size = 0
    for seed in range(2):
        for cap in CAPACITIES:
            ref = RefCache(make_reference("lru", cap), cap)
            flight: dict[int, Admit] = {}
            for ev in _events(seed, True):
                if isinstance(ev, Admit):
                    status = ref.admit(ev.ids, n_match=ev.n_match,
                                       n_anonymous=ev.n_anonymous).status
                    if status == "served":
                        flight[ev.key] = ev
                    elif len(set(ev.ids)) + ev.n_anonymous <= cap:
                        held += 1
                    else:
                        size += 1
                elif ev.key in flight:
                    adm = flight.pop(ev.key)
                    ref.release(adm.ids, ev.extra, adm.n_anonymous, ev.n_anonymous_final)
    assert held > 20 and size > 20, (held, size)


# ---- the reference in its own terms (hand-traced) ----------------------------------------------


def test_reference_holds_pins_and_reserved_slots_until_release() -> None:
    ref = RefCache(make_reference("lru", 4), 4)
    a = ref.admit([1, 2], n_anonymous=1)
    assert a.status == "served" and ref.pins == {1: 1, 2: 1} and ref.reserved == 1
    assert ref.vtime == 2
    # 2 misses, room 4 - 1 reserved - 2 resident = 1: one eviction needed, no unpinned block
    assert ref.admit([3, 4]).status == "skipped"
    assert (ref.n_req, ref.n_req_skipped, ref.n_blocks, ref.vtime) == (1, 1, 2, 2)
    assert ref.admit([5, 6, 7, 8]).status == "skipped"      # 4 blocks + 1 reserved > 4
    b = ref.admit([1, 2])                                  # all hits: held twice
    assert (b.status, b.n_hits, b.n_prefix_hits) == ("served", 2, 2)
    assert ref.pins == {1: 2, 2: 2} and ref.vtime == 4
    # the first request ends: its anonymous slot goes, its generated block 3 takes a free slot
    ref.release([1, 2], [3], n_anonymous=1, n_anonymous_final=0)
    assert ref.pins == {1: 1, 2: 1} and ref.reserved == 0 and ref.vtime == 5
    # the second ends holding a final partial block it had not reserved: a free slot, then free
    ref.release([1, 2], [], n_anonymous=0, n_anonymous_final=1)
    assert ref.pins == {} and ref.reserved == 0 and ref.n_eviction == 0
    # lru order now 2, 1 (each admission accessed 2 before 1), then 3: 2 is the victim
    assert ref.admit([4, 5]).status == "served"
    assert {b for b in range(1, 9) if ref.policy.find(b)} == {1, 3, 4, 5}
    assert ref.n_eviction == 1


def test_reference_vllm_release_is_tail_first_and_takes_a_slot_for_the_partial_block() -> None:
    ref = RefCache(make_reference("vllm", 4), 4)
    assert ref.admit([10, 11]).status == "served"
    ref.release([10, 11])
    assert list(ref.policy.free) == [11, 10]               # deepest released first
    assert ref.admit([1, 2], n_match=1).status == "served"
    assert list(ref.policy.free) == [11, 10]
    ref.release([1, 2], [3], n_anonymous=0, n_anonymous_final=1)
    # 3 evicts 11; the final partial block (allocated after it) evicts 10; its slot is free
    # again after the release, and the free queue is the request tail first: 3, then 2, 1
    assert set(ref.policy.ref) == {1, 2, 3} and list(ref.policy.free) == [3, 2, 1]
    assert ref.n_eviction == 2 and ref.reserved == 0
    assert ref.vtime == 6            # 2 + 2 accesses, the generated block, the partial block


def test_reference_pins_a_repeated_id_once_per_position() -> None:
    for verify in (True, False):
        ref = RefCache(make_reference("lru", 8), 8, verify=verify)
        ref.admit([5, 5])
        assert ref.pins == {5: 2}
        ref.admit([5, 6])
        ref.release([5, 5])
        assert ref.pins == {5: 1, 6: 1}


# ---- rules the live path keeps ----------------------------------------------------------------


def _held_room_skip() -> tuple[Simulator, RefCache]:
    """Two blocks held in a cache of 4, then three missing blocks: nothing unpinned to evict."""
    sim = Simulator([CacheSpec("lru", 4)], verify=False)
    ref = RefCache(make_reference("lru", 4), 4, verify=False)
    for ids in ([1, 2], [3, 4, 5]):
        sim.admit(ids)
        ref.admit(ids)
    return sim, ref


def test_an_admission_skipped_for_held_room_counts_nothing() -> None:
    sim, ref = _held_room_skip()
    run = sim.runs[0]
    assert (run.n_req, run.n_req_skipped, run.n_blocks, run.n_hits) == (1, 1, 2, 0)
    assert (ref.n_req, ref.n_req_skipped, ref.n_blocks, ref.n_hits) == (1, 1, 2, 0)
    assert ref.holes == [(0, 2)]                  # the served request's miss run only


def test_an_admission_skipped_for_held_room_leaves_no_holes() -> None:
    sim, ref = _held_room_skip()
    run = sim.runs[0]
    assert (run.n_holes, run.hole_len_sum) == (len(ref.holes), sum(n for _, n in ref.holes))


def test_without_verify_a_repeated_id_is_pinned_once_per_position() -> None:
    sim = Simulator([CacheSpec("lru", 8)], verify=False)
    pol = sim.runs[0].policy
    a = sim.admit([5, 5])
    sim.admit([5, 6])
    sim.release(a)
    assert pol.pin_count(5) == 1                  # the second request still holds 5


def test_a_release_keeps_the_pin_of_a_later_holder() -> None:
    sim = Simulator([CacheSpec("lru", 3)])
    pol = sim.runs[0].policy
    b = sim.admit([3])
    a = sim.admit([1, 2])
    sim.release(a, [4])            # every block is held (1, 2 by a, 3 by b): 4 is not cached
    assert sorted(pol.resident_ids()) == [1, 2, 3]
    sim.admit([3])                 # c holds 3 too
    sim.release(b)
    assert pol.pin_count(3) == 1                  # c still holds 3
