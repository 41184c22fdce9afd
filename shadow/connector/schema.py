"""The live shadow's counters, their payload and their Prometheus series: the one table.

The live caches (:mod:`shadow.sim.lockstep.caches`) make the rows (their columns: ``COUNTERS``,
``TIER_COUNTERS``, written into the Snapshot fields their ``PARTS`` name); the worker fills a
:class:`Snapshot`; the connector turns snapshots into stats payloads
(:func:`cumulative_payload`, :class:`PayloadDelta`); :mod:`shadow.connector.metrics` turns
payloads into Prometheus series.  All three read the parts below, so a counter or a family of
series is added here and where its values are made, nowhere else.  The contract with ``deploy/``
is docs/metrics.md, checked against :func:`exported_series`.

Stats payload (plain JSON-able types, so it survives vLLM's IPC)::

    {"c": {"<policy label>|<capacity>": [12 numbers in CACHE_FIELDS order]},
     "e": {"observed_requests": n, ...},  "rec": 1 | 0, "cap": engine blocks,
     "s": {"<policy label>|<capacity>": 1 | 0},
     # only with offload tiers configured, keys "<policy label>|<capacity>|<tier label>":
     "t": {key: [5 numbers in TIER_FIELDS order]}, "to": {key: bytes held}, "tc": {key: bytes},
     # only with a profile cost model (profile:FILE), keys as "c":
     "p": {key: [2 numbers in PREFILL_FIELDS order]},
     # only while recording, key the recording directory:
     "rb": {dir: bytes on disk}, "rf": {dir: bytes free}, "rl": {dir: record_max_bytes}}

Two kinds of part: **rows** (a row of counters per key; an interval's payload carries the
deltas of the rows that moved, an aggregate adds them) and **states** (one value per key, e.g. a
gauge; a payload carries the values that changed, the latest wins).  An engine's first payload
names every key of every part it has.

This module imports neither vLLM nor prometheus_client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import add, attrgetter, itemgetter
from typing import Any

from shadow.sim.lockstep.caches import COUNTERS, TIER_COUNTERS


class Payload:
    """Keys of the stats payload (module docstring).

    NOTE: the payload stays a plain dict: it crosses from the engine core to the frontend inside
    vLLM's ``KVConnectorStats`` every step, and short keys keep that message small.
    """

    CACHES = "c"        # cache key -> counter row (CACHE_FIELDS order)
    ENGINE = "e"        # ENGINE_FIELDS name -> count
    RECORDING = "rec"   # 1 recording, 0 off, -1 unknown
    CAPACITY = "cap"    # the engine's usable block count
    STOPPED = "s"       # cache key -> 1 stopped, 0 serving
    TIERS = "t"         # tier key -> counter row (TIER_FIELDS order)
    TIER_OCCUPANCY = "to"   # tier key -> bytes held
    TIER_CAPACITY = "tc"    # tier key -> capacity in bytes
    MRC_CAPACITY = "mc"     # target share -> capacity in blocks (the sampled curve)
    MRC_RATIO = "mr"        # capacity fraction -> hit ratio (the sampled curve)
    PREFILL = "p"           # cache key -> prefill seconds row (PREFILL_FIELDS order)
    RECORDING_BYTES = "rb"  # record_dir -> bytes of this engine's segments on disk
    RECORDING_FREE = "rf"   # record_dir -> bytes free on its file system
    RECORDING_LIMIT = "rl"  # record_dir -> record_max_bytes (0: unbounded)


# -- labels and keys ---------------------------------------------------------------------------
#: The label naming the engine's replica in a fleet (``kv_connector_extra_config.replica``:
#: the name its recording carries, ``shadow.connector.config.replica_of``).
REPLICA_LABEL = "replica"
#: The engine's labels on every series: on vLLM's /metrics vLLM's own labelnames (the same first
#: two, ``model_name`` and ``engine``) and then :data:`REPLICA_LABEL`.
ENGINE_LABELS = ("model_name", "engine", REPLICA_LABEL)
#: The labels a cache key stands for, after the engine's.
CACHE_LABELS = ("policy", "capacity_blocks")
#: The labels a tier key stands for, after the engine's.
TIER_LABELS = ("policy", "capacity_blocks", "tier")


def cache_key(label: str, capacity: int) -> str:
    """``"lru"``, 1024 -> ``"lru|1024"`` (CACHE_LABELS values joined)."""
    return f"{label}|{capacity}"


def tier_key(key: str, tier_label: str) -> str:
    """``"vllm|27"``, ``"cpu:4g:lru"`` -> ``"vllm|27|cpu:4g:lru"`` (tier labels hold no ``|``)."""
    return f"{key}|{tier_label}"


def part_keys(cfg: Any) -> dict[str, tuple[str, ...]]:
    """The keys of a configuration's keyed parts, by Snapshot keys field: its caches
    (``cfg.caches`` order), the tiers behind them (caches in that order, tiers inside), the
    sampled curve's targets and capacity fractions (none when ``mrc`` is off), the caches
    again for their prefill seconds (none without a profile cost model) and its recording
    directory (none without recording).  ``cfg``: a ``shadow.connector.config.ShadowConfig``."""
    from shadow.sim.lockstep.curve import keys as mrc_keys

    caches = tuple(cache_key(p.label, c) for p, c in cfg.caches)
    tiers = tuple(tier_key(caches[i], t.label) for i in cfg.tier_targets for t in cfg.tiers)
    mrc = mrc_keys() if getattr(cfg, "mrc", None) is not None else {k: () for k in mrc_keys()}
    prefill = caches if cfg.run.cost.profile is not None else ()
    record_dir = getattr(cfg, "record_dir", None)
    return {"cache_keys": caches, "tier_keys": tiers, "prefill_keys": prefill, **mrc,
            "recording_keys": (record_dir,) if record_dir else ()}


def split_key(key: str) -> tuple[str, str]:
    """``"lru|1024"`` -> ``("lru", "1024")``."""
    policy, _, cap = key.rpartition("|")
    return policy, cap


def split_tier_key(key: str) -> tuple[str, str, str]:
    """``"vllm|27|cpu:4g:lru"`` -> ``("vllm", "27", "cpu:4g:lru")`` (TIER_LABELS values)."""
    cache, _, tier = key.rpartition("|")
    return (*split_key(cache), tier)


# -- the counters ------------------------------------------------------------------------------
#: Per-cache cumulative counters: a live cache's row (Prometheus: ``shadow_<field>_total``).
CACHE_FIELDS = COUNTERS
CACHE_HELP = {
    "requests": "Requests served by this shadow cache.",
    "skipped_requests": "Requests with more distinct blocks than the shadow cache (not served).",
    "block_lookups": "Blocks looked up (prompt blocks a vLLM lookup would consider).",
    "block_hits": "Looked-up blocks resident (gap-spanning: counts after an earlier miss).",
    "block_prefix_hits": "Looked-up blocks resident before the first miss (what vLLM reuses).",
    "cost_lookup": "Cost (cost model) of the looked-up blocks.",
    "cost_saved": "Cost of the gap-spanning hits.",
    "cost_prefix_saved": "Cost of the first-miss hits.",
    "query_tokens": "Prompt tokens looked up (as vllm:prefix_cache_queries).",
    "prefix_hit_tokens": "First-miss hit tokens (as vllm:prefix_cache_hits).",
    "evictions": "Blocks evicted to make room.",
    "self_evictions": "Evicted blocks the arriving request needed.",
}

#: Per (cache, tier) cumulative counters: a tier's row (Prometheus: ``shadow_tier_<f>_total``).
TIER_FIELDS = TIER_COUNTERS
TIER_HELP = {
    "hit_tokens": "Prompt tokens the offload tier behind this shadow cache would load (GPU misses "
                  "it holds).",
    "loaded_bytes": "Bytes the offload tier would load (chunks loaded x chunk bytes).",
    "stored_bytes": "Bytes the offload tier would store (chunks stored x chunk bytes).",
    "evictions": "Chunks evicted from the offload tier.",
    "store_failures": "Stores that stored nothing (too few chunks could be evicted).",
}

#: Per-cache prefill seconds from a profile cost model (``profile:FILE``), in row order
#: (Prometheus: ``shadow_<field>_total``), over the admissions the cache counted (re-admissions
#: after a preemption left out, as the token counters).
PREFILL_HELP = {
    "prefill_seconds": "Prefill seconds of the admissions this shadow cache served, with its "
                       "first-miss hits (the profile cost model's table).",
    "prefill_seconds_saved": "Prefill (TTFT) seconds this shadow cache's first-miss hits saved: "
                             "the profile's no-hit time minus prefill_seconds.",
}
PREFILL_FIELDS = tuple(PREFILL_HELP)

#: Per-engine counters (the payload's "e" keys), in exposition order.
ENGINE_HELP = {
    "observed_requests": "Requests the shadow connector saw admitted.",
    "dropped_requests": "Requests dropped because the shadow worker queue was full.",
    "recorded_requests": "Requests written to the lcp recording.",
    "recorded_bytes": "Compressed bytes written to the lcp recording.",
    "errors": "Exceptions caught inside the shadow (the engine kept serving).",
    "engine_query_tokens": "The engine's own prefix-cache query tokens, as seen by the connector.",
    "engine_hit_tokens": "The engine's own prefix-cache hit tokens, as seen by the connector.",
    "engine_prefill_seconds": "Prefill seconds of the admissions the shadow served, with the "
                              "engine's own hits, from the profile cost model (0 without one).",
    "engine_prefill_seconds_saved": "Prefill seconds the engine's own hits saved on those "
                                    "admissions: the profile's no-hit time minus the above (0 "
                                    "without a profile).",
    "recording_segments_deleted": "Finished recording segments deleted by retention "
                                  "(record_max_bytes, record_max_age).",
}
ENGINE_FIELDS = tuple(ENGINE_HELP)
#: The per-engine counters the scheduler-side hooks keep (ShadowConnector), in row order.
HOOK_FIELDS = ("observed_requests", "dropped_requests", "errors", "engine_query_tokens",
               "engine_hit_tokens")
#: The per-engine counters the worker thread keeps (``Snapshot.worker``), in row order; an engine
#: counter named in both rows is their sum.
WORKER_FIELDS = ("recorded_requests", "recorded_bytes", "errors", "engine_prefill_seconds",
                 "engine_prefill_seconds_saved", "recording_segments_deleted")


# NOTE: per engine field, its index in a HOOK_FIELDS row and in a WORKER_FIELDS row (-1: the 0
# that engine_row appends to each), as item getters: engine_row runs on the engine's thread
# whenever the worker published a new snapshot
_FROM_HOOKS = itemgetter(*[HOOK_FIELDS.index(f) if f in HOOK_FIELDS else -1
                           for f in ENGINE_FIELDS])
_FROM_WORKER = itemgetter(*[WORKER_FIELDS.index(f) if f in WORKER_FIELDS else -1
                            for f in ENGINE_FIELDS])


def engine_row(hooks: Sequence[float], worker: Sequence[float]) -> tuple[float, ...]:
    """The ENGINE_FIELDS values from a HOOK_FIELDS row and a WORKER_FIELDS row (a counter kept
    on both threads, ``errors``, is their sum)."""
    return tuple(map(add, _FROM_HOOKS((*hooks, 0)), _FROM_WORKER((*worker, 0))))


# -- the series --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Series:
    """One Prometheus family: counters are exposed as ``name + "_total"``."""

    name: str
    help: str
    gauge: bool = False


RECORDING_GAUGE = "shadow_recording_enabled"
CAPACITY_GAUGE = "shadow_engine_capacity_blocks"
STOPPED_GAUGE = "shadow_cache_stopped"
TIER_OCCUPANCY_GAUGE = "shadow_tier_occupancy_bytes"
TIER_CAPACITY_GAUGE = "shadow_tier_capacity_bytes"

RECORDING = Series(RECORDING_GAUGE, "1 while the shadow records lcp, 0 after recording was "
                   "turned off (or never on).", gauge=True)
CAPACITY = Series(CAPACITY_GAUGE, "The engine's usable KV block count (without the null "
                  "block): the capacity_blocks label of the fidelity shadow caches.", gauge=True)
ENGINE_SERIES = tuple(Series(f"shadow_{f}", h) for f, h in ENGINE_HELP.items())


@dataclass(frozen=True)
class Part:
    """One keyed part of the payload and of a :class:`Snapshot`.

    ``series[j]`` is the family of column ``j`` (rows) or the one family of a state.  ``initial``:
    the value a state's series gets when the frontend creates it before the engine reports (None:
    it waits for the engine's value).  Keys are ``|``-joined ``labels`` values."""

    payload: str
    snapshot: str            # the Snapshot field holding the values (a tuple, one per key)
    keys: str                # the Snapshot field holding the keys
    labels: tuple[str, ...]
    series: tuple[Series, ...]
    state: bool = False
    initial: float | None = None

    def split(self, key: str) -> list[str]:
        """A key's label values (``labels`` order)."""
        return key.rsplit("|", len(self.labels) - 1)

    @property
    def per_cache(self) -> bool:
        """Whether a key names a cache (and a tier): else the part is the engine's own."""
        return self.labels[:len(CACHE_LABELS)] == CACHE_LABELS

    def cache_of(self, key: str) -> str:
        """The cache key a key of this part belongs to (itself in a part keyed by caches);
        only for a part :attr:`per_cache`."""
        extra = len(self.labels) - len(CACHE_LABELS)
        return key.rsplit("|", extra)[0] if extra else key


STOPPED_SERIES = Series(STOPPED_GAUGE, "1 while this shadow cache is stopped (it failed, e.g. "
                        "out of memory; its counters freeze and the log says why), 0 while it "
                        "serves; a prefix-cache reset restarts it.", gauge=True)
TIER_OCCUPANCY_SERIES = Series(TIER_OCCUPANCY_GAUGE, "Bytes the offload tier holds now (chunks "
                               "held x chunk bytes).", gauge=True)
TIER_CAPACITY_SERIES = Series(TIER_CAPACITY_GAUGE, "The offload tier's capacity in bytes (whole "
                              "chunks).", gauge=True)
#: The labels a recording key stands for, after the engine's.
RECORDING_LABELS = ("record_dir",)
RECORDING_BYTES_SERIES = Series("shadow_recording_bytes", "Bytes of this engine's recording "
                                "segments on disk (finished ones and the open one).", gauge=True)
RECORDING_FREE_SERIES = Series("shadow_recording_disk_free_bytes", "Bytes free (for an "
                               "unprivileged writer) on the recording directory's file system.",
                               gauge=True)
RECORDING_LIMIT_SERIES = Series("shadow_recording_max_bytes", "The retention bound on this "
                                "engine's recording (record_max_bytes; 0: unbounded).",
                                gauge=True)


def tier_counter_name(f: str) -> str:
    return f"shadow_tier_{f}"


CACHES = Part(Payload.CACHES, "caches", "cache_keys", CACHE_LABELS,
              tuple(Series(f"shadow_{f}", CACHE_HELP[f]) for f in CACHE_FIELDS))
STOPPED = Part(Payload.STOPPED, "stopped", "cache_keys", CACHE_LABELS, (STOPPED_SERIES,),
               state=True, initial=0)
TIERS = Part(Payload.TIERS, "tiers", "tier_keys", TIER_LABELS,
             tuple(Series(tier_counter_name(f), TIER_HELP[f]) for f in TIER_FIELDS))
TIER_OCCUPANCY = Part(Payload.TIER_OCCUPANCY, "tier_occupancy", "tier_keys", TIER_LABELS,
                      (TIER_OCCUPANCY_SERIES,), state=True, initial=0)
TIER_CAPACITY = Part(Payload.TIER_CAPACITY, "tier_capacity", "tier_keys", TIER_LABELS,
                     (TIER_CAPACITY_SERIES,), state=True)
#: The sampled miss-ratio curve's gauges (shadow.sim.lockstep.curve: one value per target share,
#: one per capacity fraction), the engine's own parts.
MRC_CAPACITY_GAUGE = "shadow_mrc_capacity_blocks"
MRC_RATIO_GAUGE = "shadow_mrc_hit_ratio"
MRC_CAPACITY = Part(Payload.MRC_CAPACITY, "mrc_capacity", "mrc_targets", ("target",),
                    (Series(MRC_CAPACITY_GAUGE, "The smallest capacity (blocks) whose estimated "
                            "hit ratio reaches `target` times an infinite cache's, from the "
                            "sampled miss-ratio curve of the engine's lookups (+Inf past 16 x "
                            "the engine's capacity).", gauge=True),), state=True)
MRC_RATIO = Part(Payload.MRC_RATIO, "mrc_ratio", "mrc_fractions", ("capacity_fraction",),
                 (Series(MRC_RATIO_GAUGE, "The estimated hit ratio of the engine's lookups in an "
                         "lru-ranked cache of capacity_fraction x the engine's capacity (1: its "
                         "own), from the sampled miss-ratio curve.", gauge=True),), state=True)
PREFILL = Part(Payload.PREFILL, "prefill", "prefill_keys", CACHE_LABELS,
               tuple(Series(f"shadow_{f}", h) for f, h in PREFILL_HELP.items()))
# NOTE: keyed by the recording directory; without recording the parts have no keys and stay out
# of every payload and exposition, as the tier parts without tiers
RECORDING_BYTES = Part(Payload.RECORDING_BYTES, "recording_bytes", "recording_keys",
                       RECORDING_LABELS, (RECORDING_BYTES_SERIES,), state=True)
RECORDING_FREE = Part(Payload.RECORDING_FREE, "recording_free", "recording_keys",
                      RECORDING_LABELS, (RECORDING_FREE_SERIES,), state=True)
RECORDING_LIMIT = Part(Payload.RECORDING_LIMIT, "recording_limit", "recording_keys",
                       RECORDING_LABELS, (RECORDING_LIMIT_SERIES,), state=True)
#: The recorder's parts (the worker writes them from its recorder).
RECORDING_PARTS = (RECORDING_BYTES, RECORDING_FREE, RECORDING_LIMIT)
#: The parts the worker writes itself (from the caches' hits, from its recorder), not a live
#: cache kind.
WORKER_PARTS = (PREFILL, *RECORDING_PARTS)
#: Every keyed part, in exposition order.
PARTS = (CACHES, STOPPED, TIERS, TIER_OCCUPANCY, TIER_CAPACITY, PREFILL, MRC_CAPACITY,
         MRC_RATIO, *RECORDING_PARTS)


def exported_series() -> set[str]:
    """Every series name the connector exports, as Prometheus exposes it (counters end in
    ``_total``): the one list docs/metrics.md and deploy/ are checked against."""
    every = [s for p in PARTS for s in p.series] + [*ENGINE_SERIES, RECORDING, CAPACITY]
    return {s.name if s.gauge else s.name + "_total" for s in every}


# -- snapshots and payloads --------------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    """Cumulative worker-side counters at one moment (immutable; swapped by reference).

    Per part (:data:`PARTS`), its keys and one value per key.  ``caches`` rows are in
    CACHE_FIELDS order, ``tiers`` rows in TIER_FIELDS order; ``stopped`` is 1 while a cache is
    stopped (it failed: out of memory mid-request, say; its counters freeze and the log says
    why), 0 while it serves (a reset starts every cache afresh); the tier parts are empty
    without tiers, the curve's without ``mrc``, the prefill part (PREFILL_FIELDS rows) without
    a profile cost model, the recording parts (one key: the directory) without recording."""

    cache_keys: tuple[str, ...]
    caches: tuple[tuple[float, ...], ...]
    worker: tuple[float, ...]            # WORKER_FIELDS
    recording_enabled: int
    stopped: tuple[int, ...]
    tier_keys: tuple[str, ...] = ()
    tiers: tuple[tuple[float, ...], ...] = ()
    tier_occupancy: tuple[int, ...] = ()
    tier_capacity: tuple[int, ...] = ()
    mrc_targets: tuple[str, ...] = ()
    mrc_capacity: tuple[float, ...] = ()
    mrc_fractions: tuple[str, ...] = ()
    mrc_ratio: tuple[float, ...] = ()
    prefill_keys: tuple[str, ...] = ()
    prefill: tuple[tuple[float, ...], ...] = ()
    recording_keys: tuple[str, ...] = ()
    recording_bytes: tuple[int, ...] = ()
    recording_free: tuple[int, ...] = ()
    recording_limit: tuple[int, ...] = ()


def empty_payload() -> dict[str, Any]:
    """The cumulative payload of an engine without a worker (the shadow is off)."""
    return {Payload.CACHES: {}, Payload.ENGINE: {}, Payload.RECORDING: 0, Payload.CAPACITY: 0,
            Payload.STOPPED: {}}


def cumulative_payload(snap: Snapshot, hooks: Sequence[float], capacity: int) -> dict[str, Any]:
    """Every cumulative value of ``snap`` and the HOOK_FIELDS row ``hooks`` (the own endpoint's
    values)."""
    out: dict[str, Any] = {
        Payload.ENGINE: dict(zip(ENGINE_FIELDS, engine_row(hooks, snap.worker))),
        Payload.RECORDING: snap.recording_enabled,
        Payload.CAPACITY: capacity}
    for p in PARTS:
        keys = getattr(snap, p.keys)
        values = getattr(snap, p.snapshot)
        out[p.payload] = (dict(zip(keys, values)) if p.state
                          else {k: list(v) for k, v in zip(keys, values)})
    return out


def rows_delta(keys: Sequence[str], rows: Sequence[Sequence[float]],
               prev: Sequence[Sequence[float]] | None) -> dict[str, list[float]]:
    """Per-key ``rows - prev`` for the keys whose counters changed (all of them when ``prev`` is
    None): a rows part of a stats payload.

    NOTE: called on the engine thread whenever the worker published a new snapshot; a cache whose
    row is unchanged adds nothing to any counter, so it is left out rather than sent as zeros.
    """
    if prev is None:
        return {k: list(r) for k, r in zip(keys, rows)}
    return {k: [a - b for a, b in zip(r, p)] for k, r, p in zip(keys, rows, prev) if r != p}


def stopped_delta(keys: Sequence[str], stopped: Sequence[Any],
                  prev: Sequence[Any] | None) -> dict[str, Any]:
    """A state part of a stats payload: every key's value in the first payload (``prev``
    None), then only the keys whose value changed."""
    if prev is None:
        return dict(zip(keys, stopped))
    if stopped == prev:  # NOTE: nearly always (once per published snapshot, engine thread)
        return {}
    return {k: v for k, v, p in zip(keys, stopped, prev) if v != p}


_DELTA_PARTS = tuple((p.payload, attrgetter(p.keys), attrgetter(p.snapshot), p.state)
                     for p in PARTS)


class PayloadDelta:
    """Interval payloads of one engine: what changed since the last payload built.

    NOTE: :meth:`next` runs on the engine's thread every step (``get_kv_connector_stats``): with
    nothing new it returns after comparing the snapshot's reference and the hooks' row; else the
    delta is built from the snapshot's rows directly, leaving out the keys that did not move.
    """

    __slots__ = ("capacity", "_snap", "_hooks", "_engine", "_rec")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._snap: Snapshot | None = None
        self._hooks: tuple = ()
        self._engine: tuple = (0,) * len(ENGINE_FIELDS)
        self._rec = -1

    def next(self, snap: Snapshot, hooks: tuple) -> dict[str, Any] | None:
        """The payload from the last one to ``snap`` and ``hooks`` (a HOOK_FIELDS row), or None
        when nothing changed (the first payload always goes out, so the gauges appear before
        traffic)."""
        prev = self._snap
        if snap is prev and hooks == self._hooks:
            return None
        e_now = engine_row(hooks, snap.worker)
        e_prev = self._engine
        self._snap, self._hooks, self._engine = snap, hooks, e_now
        data: dict[str, Any] = {}
        moved = e_now != e_prev
        for payload, keys_of, values_of, state in _DELTA_PARTS:
            keys = keys_of(snap)
            if not keys:
                continue   # NOTE: a part without keys (no tiers) stays out of every payload
            old = None if prev is None else values_of(prev)
            if state:
                d = stopped_delta(keys, values_of(snap), old)
                moved = moved or bool(d)
            else:
                # NOTE: against a previous snapshot only the rows that moved are in ``d``
                d = rows_delta(keys, values_of(snap), old)
                moved = moved or (bool(d) if old is not None else
                                  any(any(r) for r in d.values()))
            data[payload] = d
        rec = snap.recording_enabled
        if not moved and rec == self._rec:
            return None
        self._rec = rec
        data[Payload.ENGINE] = dict(zip(ENGINE_FIELDS, [a - b for a, b in zip(e_now, e_prev)]))
        data[Payload.RECORDING] = rec
        data[Payload.CAPACITY] = self.capacity
        return data
