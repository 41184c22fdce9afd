"""The payload schema on a real worker (no engine): the cumulative payload names every key of
every part, interval payloads (``PayloadDelta``, what ``get_kv_connector_stats`` sends) add up
to it, repeat nothing and leave a part without keys out; the engine row sums the hooks' and the
worker's counters of the same name."""

from __future__ import annotations

from pathlib import Path

from shadow.connector.config import parse_extra_config
from shadow.connector import schema
from shadow.connector.schema import (ENGINE_FIELDS, HOOK_FIELDS, PARTS, WORKER_FIELDS, Payload,
                                     PayloadDelta, Snapshot, cumulative_payload, engine_row,
                                     exported_series)
from shadow.connector.worker import Admit, Release, ShadowWorker
from shadow.sim.lockstep import caches as livecaches

B = 4


def _worker(recorder=None, **extra) -> ShadowWorker:
    extra = {"policies": ["vllm", "lru"], "capacity_factors": [1], "capacities": [4], **extra}
    return ShadowWorker(parse_extra_config(extra, block_size=B, engine_blocks=8),
                        recorder=recorder, start=False)


def _request(w: ShadowWorker, rid: str, names: list[str], t: float) -> None:
    w.submit(Admit(rid, [n.encode() for n in names], len(names) * B + 1, 0, False, t))
    w.submit_control(Release(rid, [], 1, t + 0.5, len(names) * B + 1, 1))
    w._drain()


def test_the_engine_row_sums_a_counter_kept_on_both_threads():
    hooks = tuple(range(1, len(HOOK_FIELDS) + 1))
    worker = tuple(10 * (k + 1) for k in range(len(WORKER_FIELDS)))
    row = dict(zip(ENGINE_FIELDS, engine_row(hooks, worker)))
    both = set(HOOK_FIELDS) & set(WORKER_FIELDS)
    assert both == {"errors"}
    for f in ENGINE_FIELDS:
        want = (hooks[HOOK_FIELDS.index(f)] if f in HOOK_FIELDS else 0) + \
            (worker[WORKER_FIELDS.index(f)] if f in WORKER_FIELDS else 0)
        assert row[f] == want, f
    assert set(HOOK_FIELDS) | set(WORKER_FIELDS) == set(ENGINE_FIELDS)


H200 = Path(__file__).resolve().parents[2] / "shadow" / "data" / "h200_prefill.jsonl"


def test_interval_payloads_add_up_to_the_cumulative_one(tmp_path):
    from shadow.connector.recorder import Recorder

    # NOTE: tiers, a profile cost model and a recording: every part has keys
    rec = Recorder(str(tmp_path), block_size=B, keep_bytes=1 << 20)
    w = _worker(rec, record_dir=str(tmp_path), tiers="cpu:8blk:lru", tier_caches="all",
                bytes_per_block=100, cost_model=f"profile:{H200},model=llama3_8b")
    delta = PayloadDelta(8)
    hooks = [0] * len(HOOK_FIELDS)
    first = delta.next(w.snapshot, tuple(hooks))
    # the first payload names every key of every part, at 0
    for p in PARTS:
        keys = getattr(w.snapshot, p.keys)
        assert keys and set(first[p.payload]) == set(keys), p.payload
    assert delta.next(w.snapshot, tuple(hooks)) is None          # nothing new: nothing sent
    total = {p.payload: {k: (list(v) if not p.state else v) for k, v in first[p.payload].items()}
             for p in PARTS}
    e_total = dict(first[Payload.ENGINE])
    for t, names in enumerate((["a", "b"], ["a", "b", "c"], ["x"], ["a", "b"])):
        _request(w, f"r{t}", names, float(t))
        hooks[HOOK_FIELDS.index("observed_requests")] += 1
        d = delta.next(w.snapshot, tuple(hooks))
        assert d is not None
        for p in PARTS:
            for k, v in d.get(p.payload, {}).items():
                if p.state:
                    total[p.payload][k] = v
                else:
                    assert any(v), (p.payload, k)      # unmoved rows are left out
                    total[p.payload][k] = [a + b for a, b in zip(total[p.payload][k], v)]
        for f, v in d[Payload.ENGINE].items():
            e_total[f] += v
    cum = cumulative_payload(w.snapshot, tuple(hooks), 8)
    for p in PARTS:
        assert total[p.payload] == cum[p.payload], p.payload
    assert e_total == cum[Payload.ENGINE]
    assert cum[Payload.ENGINE]["observed_requests"] == 4
    assert any(any(row) for row in cum[Payload.TIERS].values())   # the tiers did serve
    assert any(row[1] for row in cum[Payload.PREFILL].values())   # the hits saved seconds
    assert cum[Payload.ENGINE]["engine_prefill_seconds"] > 0
    # the recording's gauges: its bytes on disk (the open segment), free space, the bound
    rd = str(tmp_path)
    assert cum[Payload.RECORDING_BYTES] == {rd: rec.bytes_on_disk} and rec.bytes_on_disk > 0
    assert cum[Payload.RECORDING_FREE][rd] > 0 and cum[Payload.RECORDING_LIMIT] == {rd: 1 << 20}
    w.stop()


def test_a_part_without_keys_stays_out_of_every_payload():
    w = _worker()
    d = PayloadDelta(8).next(w.snapshot, (0,) * len(HOOK_FIELDS))
    assert Payload.CACHES in d and Payload.STOPPED in d
    assert not {Payload.TIERS, Payload.TIER_OCCUPANCY, Payload.TIER_CAPACITY,
                Payload.PREFILL, Payload.RECORDING_BYTES, Payload.RECORDING_FREE,
                Payload.RECORDING_LIMIT} & set(d)
    w.stop()


def test_every_part_names_its_series_and_labels():
    names = exported_series()
    for p in PARTS:
        assert p.series and p.labels
        assert len(p.series) == 1 or not p.state
        for s in p.series:
            assert s.help and (s.name if s.gauge else s.name + "_total") in names
        key = "|".join(p.labels)
        assert p.split(key) == list(p.labels)
        if p.per_cache:
            assert p.cache_of(key) == "policy|capacity_blocks"
        else:
            assert p.state and not set(p.labels) & {"policy", "capacity_blocks"}


def test_the_parts_are_the_ones_the_live_caches_write():
    """Every column a live cache writes has its help; every part they write is a keyed part of
    the payload with a Snapshot field."""
    assert set(schema.CACHE_HELP) == set(livecaches.COUNTERS) == set(schema.CACHE_FIELDS)
    assert set(schema.TIER_HELP) == set(livecaches.TIER_COUNTERS) == set(schema.TIER_FIELDS)
    assert {p.snapshot for p in PARTS if p not in schema.WORKER_PARTS} == set(livecaches.PARTS)
    fields = set(Snapshot.__dataclass_fields__)
    assert {p.snapshot for p in PARTS} | {p.keys for p in PARTS} <= fields
    assert len({p.payload for p in PARTS}) == len(PARTS)
