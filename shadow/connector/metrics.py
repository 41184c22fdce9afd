"""Metrics of the live shadow: vLLM's connector-stats path and an own Prometheus endpoint.

Names and labels are the contract in docs/metrics.md.  Two routes, same series:

* **vLLM's /metrics**: the scheduler-side connector returns interval deltas from
  ``get_kv_connector_stats`` (a :class:`ShadowStats`); vLLM ships them to the frontend process,
  where :class:`ShadowPromMetrics` (built by ``ShadowConnector.build_prom_metrics``) adds them to
  counters labelled ``model_name``, ``engine`` (+ ``policy``, ``capacity_blocks``).  Needs
  ``log_stats`` (no ``--disable-log-stats``).
* **own endpoint** (``metrics_port``): a ``prometheus_client`` server in the engine-core process on
  its own registry, bound to ``metrics_host`` (127.0.0.1 by default), port ``metrics_port +
  dp_rank``; :class:`ShadowCollector` reads the cumulative counters at scrape time.

Stats payload (``ShadowStats.data``, plain JSON-able types so it survives vLLM's IPC)::

    {"c": {"<policy label>|<capacity>": [12 numbers in CACHE_FIELDS order]},
     "e": {"observed_requests": n, ...},  "rec": 1 | 0, "cap": engine blocks,
     "s": {"<policy label>|<capacity>": 1 | 0},
     # only with offload tiers configured, keys "<policy label>|<capacity>|<tier label>":
     "t": {key: [5 numbers in TIER_FIELDS order]}, "to": {key: bytes held}, "tc": {key: bytes}}

An engine's first payload names every cache; later ones only the caches whose counters moved
(:func:`rows_delta`) and, in ``"s"``, whose stopped state changed (:func:`stopped_delta`); the
tiers likewise (``"to"``/``"tc"`` are states, the latest value wins).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                  KVConnectorStats)

from shadow.connector.worker import CACHE_FIELDS, TIER_FIELDS, cache_key, tier_key

logger = logging.getLogger(__name__)

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


#: Per-engine counters (the payload's "e" keys), in exposition order.
ENGINE_FIELDS = ("observed_requests", "dropped_requests", "recorded_requests", "recorded_bytes",
                 "errors", "engine_query_tokens", "engine_hit_tokens")

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
ENGINE_HELP = {
    "observed_requests": "Requests the shadow connector saw admitted.",
    "dropped_requests": "Requests dropped because the shadow worker queue was full.",
    "recorded_requests": "Requests written to the lcp recording.",
    "recorded_bytes": "Compressed bytes written to the lcp recording.",
    "errors": "Exceptions caught inside the shadow (the engine kept serving).",
    "engine_query_tokens": "The engine's own prefix-cache query tokens, as seen by the connector.",
    "engine_hit_tokens": "The engine's own prefix-cache hit tokens, as seen by the connector.",
}
RECORDING_GAUGE = "shadow_recording_enabled"
RECORDING_HELP = "1 while the shadow records lcp, 0 after recording was turned off (or never on)."
STOPPED_GAUGE = "shadow_cache_stopped"
STOPPED_HELP = ("1 while this shadow cache is stopped (it failed, e.g. out of memory; its counters "
                "freeze and the log says why), 0 while it serves; a prefix-cache reset restarts it.")
TIER_HELP = {
    "hit_tokens": "Prompt tokens the offload tier behind this shadow cache would load (GPU misses "
                  "it holds).",
    "loaded_bytes": "Bytes the offload tier would load (chunks loaded x chunk bytes).",
    "stored_bytes": "Bytes the offload tier would store (chunks stored x chunk bytes).",
    "evictions": "Chunks evicted from the offload tier.",
    "store_failures": "Stores that stored nothing (too few chunks could be evicted).",
}
TIER_OCCUPANCY_GAUGE = "shadow_tier_occupancy_bytes"
TIER_OCCUPANCY_HELP = "Bytes the offload tier holds now (chunks held x chunk bytes)."
TIER_CAPACITY_GAUGE = "shadow_tier_capacity_bytes"
TIER_CAPACITY_HELP = "The offload tier's capacity in bytes (whole chunks)."
#: The labels of the tier series after model_name and engine.
TIER_LABELS = ("policy", "capacity_blocks", "tier")
CAPACITY_GAUGE = "shadow_engine_capacity_blocks"
CAPACITY_HELP = ("The engine's usable KV block count (without the null block): the capacity_blocks "
                 "label of the fidelity shadow caches.")


def split_key(key: str) -> tuple[str, str]:
    """``"lru|1024"`` -> ``("lru", "1024")``."""
    policy, _, cap = key.rpartition("|")
    return policy, cap


def split_tier_key(key: str) -> tuple[str, str, str]:
    """``"vllm|27|cpu:4g:lru"`` -> ``("vllm", "27", "cpu:4g:lru")`` (TIER_LABELS values)."""
    cache, _, tier = key.rpartition("|")
    return (*split_key(cache), tier)


def tier_counter_name(f: str) -> str:
    return f"shadow_tier_{f}"


def exported_series() -> set[str]:
    """Every series name the connector exports, as Prometheus exposes it (counters end in
    ``_total``): the one list docs/metrics.md and deploy/ are checked against."""
    counters = ([f"shadow_{f}" for f in CACHE_FIELDS + ENGINE_FIELDS]
                + [tier_counter_name(f) for f in TIER_FIELDS])
    return {n + "_total" for n in counters} | {RECORDING_GAUGE, STOPPED_GAUGE, CAPACITY_GAUGE,
                                                TIER_OCCUPANCY_GAUGE, TIER_CAPACITY_GAUGE}


class ShadowStats(KVConnectorStats):
    """Interval deltas of the shadow counters (what ``get_kv_connector_stats`` returns)."""

    def reset(self) -> None:
        self.data = {}

    def is_empty(self) -> bool:
        d = self.data
        if not d:
            return True
        if d.get(Payload.STOPPED) or any(v for v in d.get(Payload.ENGINE, {}).values()):
            return False
        if d.get(Payload.TIER_OCCUPANCY) or d.get(Payload.TIER_CAPACITY) or \
                any(any(row) for row in d.get(Payload.TIERS, {}).values()):
            return False
        return not any(any(row) for row in d.get(Payload.CACHES, {}).values())

    def aggregate(self, other: KVConnectorStats) -> "ShadowStats":
        o = other.data if other is not None else {}
        if not o:
            return self
        if not self.data:
            self.data = {
                Payload.CACHES: {k: list(v) for k, v in o.get(Payload.CACHES, {}).items()},
                Payload.ENGINE: dict(o.get(Payload.ENGINE, {})),
                Payload.RECORDING: o.get(Payload.RECORDING, -1),
                Payload.CAPACITY: o.get(Payload.CAPACITY, 0),
                Payload.STOPPED: dict(o.get(Payload.STOPPED, {}))}
            for part in (Payload.TIERS, Payload.TIER_OCCUPANCY, Payload.TIER_CAPACITY):
                if part in o:
                    self.data[part] = {k: list(v) if isinstance(v, list) else v
                                       for k, v in o[part].items()}
            return self
        for part in (Payload.CACHES, Payload.TIERS):
            if part not in o:
                continue
            c = self.data.setdefault(part, {})
            for k, row in o[part].items():
                mine = c.get(k)
                c[k] = list(row) if mine is None else [a + b for a, b in zip(mine, row)]
        for part in (Payload.TIER_OCCUPANCY, Payload.TIER_CAPACITY):
            if o.get(part):  # states: the later interval's value wins
                self.data.setdefault(part, {}).update(o[part])
        e = self.data.setdefault(Payload.ENGINE, {})
        for k, v in o.get(Payload.ENGINE, {}).items():
            e[k] = e.get(k, 0) + v
        if o.get(Payload.RECORDING, -1) >= 0:
            self.data[Payload.RECORDING] = o[Payload.RECORDING]
        if o.get(Payload.CAPACITY):
            self.data[Payload.CAPACITY] = o[Payload.CAPACITY]
        if o.get(Payload.STOPPED):  # a state, not a count: the later interval's value wins
            self.data.setdefault(Payload.STOPPED, {}).update(o[Payload.STOPPED])
        return self

    def reduce(self) -> dict[str, int | float]:
        """One line for vLLM's periodic connector log: prefix hit ratio per shadow cache."""
        out: dict[str, int | float] = {}
        ql, hl = CACHE_FIELDS.index("block_lookups"), CACHE_FIELDS.index("block_prefix_hits")
        for k, row in self.data.get(Payload.CACHES, {}).items():
            look = row[ql]
            out[f"{k} prefix_hit_ratio"] = round(row[hl] / look, 4) if look else 0.0
        for k, v in self.data.get(Payload.STOPPED, {}).items():
            if v:
                out[f"{k} stopped"] = 1
        ht = TIER_FIELDS.index("hit_tokens")
        for k, row in self.data.get(Payload.TIERS, {}).items():
            if row[ht]:
                out[f"{k} tier_hit_tokens"] = row[ht]
        for k, v in self.data.get(Payload.ENGINE, {}).items():
            if v:
                out[k] = v
        return out


def rows_delta(keys: Sequence[str], rows: Sequence[Sequence[float]],
               prev: Sequence[Sequence[float]] | None) -> dict[str, list[float]]:
    """Per-cache ``rows - prev`` for the caches whose counters changed (all of them when ``prev``
    is None): the ``"c"`` part of a stats payload.

    NOTE: called on the engine thread whenever the worker published a new snapshot; a cache whose
    row is unchanged adds nothing to any counter, so it is left out rather than sent as zeros.
    """
    if prev is None:
        return {k: list(r) for k, r in zip(keys, rows)}
    return {k: [a - b for a, b in zip(r, p)] for k, r, p in zip(keys, rows, prev) if r != p}


def stopped_delta(keys: Sequence[str], stopped: Sequence[int],
                  prev: Sequence[int] | None) -> dict[str, int]:
    """The ``"s"`` part of a stats payload: every cache's stopped state in the first payload
    (``prev`` None), then only the caches whose state changed."""
    if prev is None:
        return dict(zip(keys, stopped))
    if stopped == prev:  # NOTE: nearly always (once per published snapshot, engine thread)
        return {}
    return {k: v for k, v, p in zip(keys, stopped, prev) if v != p}


def _fast_inc(child: Any) -> Callable[[float], None]:
    """The cheapest correct ``inc`` of a labelled counter child.

    NOTE: ``prometheus_client.Counter.inc`` re-checks observability, the sign and the exemplar
    on every call (~1.8 us); ``observe`` adds up to 240 positive deltas per engine step, on the
    engine's own thread when the engine runs in-process, so for a plain prometheus_client child
    it calls the value's ``inc`` (~0.7 us, the same lock and, in multiprocess mode, the same
    mmap write).  Other counter classes (vLLM's Ray wrappers) keep their own ``inc``.
    """
    value = getattr(child, "_value", None)
    if isinstance(child, Counter) and callable(getattr(value, "inc", None)):
        return value.inc
    return child.inc


def expected_cache_keys(vllm_config, n_engines: int) -> tuple[list[str], int]:
    """The cache keys and engine capacity an engine of ``vllm_config`` will report, as the
    frontend can tell before any stats arrive (``([], 0)`` when it cannot)."""
    keys, _tiers, cap = expected_keys(vllm_config, n_engines)
    return keys, cap


def expected_keys(vllm_config, n_engines: int) -> tuple[list[str], list[str], int]:
    """The cache keys, tier keys and engine capacity an engine of ``vllm_config`` will report,
    as the frontend can tell before any stats arrive (``([], [], 0)`` when it cannot).

    NOTE: the frontend does not know the engine's bytes per KV block; tier labels do not depend
    on it, so a placeholder of 1 byte lets sizes in bytes parse (the engine core checks them).

    NOTE: the engines' handshake leaves the *sum* of their KV block counts in the frontend's
    ``cache_config.num_gpu_blocks``; each engine's usable capacity is its share minus the null
    block, as in ``ShadowConnector._parse_config``.
    """
    from shadow.connector.config import parse_extra_config

    total = int(getattr(vllm_config.cache_config, "num_gpu_blocks", 0) or 0)
    per_engine = total // max(1, int(n_engines)) - 1
    if per_engine <= 0:
        return [], [], 0
    ktc = vllm_config.kv_transfer_config
    extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
    block_size = int(vllm_config.cache_config.block_size or 16)
    cfg = parse_extra_config(extra, block_size=block_size, engine_blocks=per_engine,
                             bytes_per_block=1)
    if not cfg.enabled:
        return [], [], 0
    keys = [cache_key(p.label, c) for p, c in cfg.caches]
    tiers = [tier_key(keys[i], t.label) for i in cfg.tier_targets for t in cfg.tiers]
    return keys, tiers, per_engine


def _unregister(registry: CollectorRegistry, names: Iterable[str]) -> None:
    # NOTE: a second engine in one process (tests; vLLM re-creating its stat loggers) would
    # otherwise fail with "Duplicated timeseries"; vLLM does the same for its vllm: names.
    names_to = getattr(registry, "_names_to_collectors", {})
    for n in names:
        for full in (n, n + "_total", n + "_created"):
            col = names_to.get(full)
            if col is not None:
                try:
                    registry.unregister(col)
                except KeyError:
                    pass


def _add_rows(rows: dict[str, Sequence[float]], children: dict[tuple[int, str], list],
              engine_idx: int, base: list[str],
              make: Callable[[list[str], str], list[Callable[[float], None]]]) -> None:
    """Add each key's row of deltas to its counters (``make`` binds them on first use).

    NOTE: pre-bound incs cached per (engine, key): labels() costs microseconds per call;
    unchanged counters (zero deltas) are skipped."""
    for key, row in rows.items():
        incs = children.get((engine_idx, key))
        if incs is None:
            incs = children[(engine_idx, key)] = make(base, key)
        for inc, v in zip(incs, row):
            if v > 0:
                inc(v)


class ShadowPromMetrics(KVConnectorPromMetrics):
    """Registers the shadow series on vLLM's registry and adds each stats interval to them."""

    def __init__(self, vllm_config, metric_types, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        names = [f"shadow_{f}" for f in CACHE_FIELDS + ENGINE_FIELDS] + [
            RECORDING_GAUGE, CAPACITY_GAUGE, STOPPED_GAUGE, TIER_OCCUPANCY_GAUGE,
            TIER_CAPACITY_GAUGE] + [tier_counter_name(f) for f in TIER_FIELDS]
        _unregister(REGISTRY, names)
        tier_labels = list(labelnames) + list(TIER_LABELS)
        self._tier = {f: self._counter_cls(name=tier_counter_name(f), documentation=TIER_HELP[f],
                                           labelnames=tier_labels) for f in TIER_FIELDS}
        self._tier_occ = self._gauge_cls(name=TIER_OCCUPANCY_GAUGE,
                                         documentation=TIER_OCCUPANCY_HELP,
                                         labelnames=tier_labels, multiprocess_mode="mostrecent")
        self._tier_cap = self._gauge_cls(name=TIER_CAPACITY_GAUGE, documentation=TIER_CAPACITY_HELP,
                                         labelnames=tier_labels, multiprocess_mode="mostrecent")
        self._tier_children: dict[tuple[int, str], list] = {}
        cache_labels = list(labelnames) + ["policy", "capacity_blocks"]
        self._cache = {f: self._counter_cls(name=f"shadow_{f}", documentation=CACHE_HELP[f],
                                            labelnames=cache_labels) for f in CACHE_FIELDS}
        self._engine = {f: self._counter_cls(name=f"shadow_{f}", documentation=ENGINE_HELP[f],
                                             labelnames=list(labelnames)) for f in ENGINE_FIELDS}
        self._rec = self._gauge_cls(name=RECORDING_GAUGE, documentation=RECORDING_HELP,
                                    labelnames=list(labelnames), multiprocess_mode="mostrecent")
        self._cap = self._gauge_cls(name=CAPACITY_GAUGE, documentation=CAPACITY_HELP,
                                    labelnames=list(labelnames), multiprocess_mode="mostrecent")
        self._stopped = self._gauge_cls(name=STOPPED_GAUGE, documentation=STOPPED_HELP,
                                        labelnames=cache_labels, multiprocess_mode="mostrecent")
        self._children: dict[tuple[int, str], list] = {}
        # engine -> (label values, field -> inc, [last recording gauge, last capacity gauge])
        self._per_engine: dict[int, tuple[list[str], dict, list]] = {}
        # engine -> cache keys created up front, checked against its first payload
        self._guessed: dict[int, set[str]] = {}
        try:
            keys, tier_keys, cap = expected_keys(vllm_config, len(per_engine_labelvalues))
        except Exception:  # noqa: BLE001 - the engine core validates; never break the frontend
            logger.debug("shadow connector: no series up front", exc_info=True)
            keys, tier_keys, cap = [], [], 0
        for idx, values in per_engine_labelvalues.items():
            for f in ENGINE_FIELDS:
                self._engine[f].labels(*values)
            self._rec.labels(*values)
            # NOTE: every series exists at 0 from the first scrape, so a PromQL rate() window
            # that starts at start-up sees the first requests as an increase (a series born
            # with its first nonzero value has no earlier sample: its first increment is lost).
            if cap:
                self._cap.labels(*values).set(cap)
            base = [str(v) for v in values]
            for key in keys:
                self._children[(idx, key)] = self._cache_children(base, key)
                self._stopped.labels(*base, *split_key(key)).set(0)
            for key in tier_keys:
                self._tier_children[(idx, key)] = self._tier_counter_children(base, key)
                self._tier_occ.labels(*base, *split_tier_key(key)).set(0)
            self._guessed[idx] = set(keys)

    def _tier_counter_children(self, base: list[str], key: str) -> list[Callable[[float], None]]:
        labels = split_tier_key(key)
        return [_fast_inc(self._tier[f].labels(*base, *labels)) for f in TIER_FIELDS]

    def _cache_children(self, base: list[str], key: str) -> list[Callable[[float], None]]:
        policy, cap = split_key(key)
        return [_fast_inc(self._cache[f].labels(*base, policy, cap)) for f in CACHE_FIELDS]

    def _engine_children(self, engine_idx: int) -> tuple[list[str], dict, list]:
        """Label values, pre-bound engine-counter incs and last gauge values of one engine."""
        st = self._per_engine.get(engine_idx)
        if st is None:
            base = [str(v) for v in self.per_engine_labelvalues.get(
                engine_idx, next(iter(self.per_engine_labelvalues.values()), []))]
            incs = {f: _fast_inc(self._engine[f].labels(*base)) for f in ENGINE_FIELDS}
            st = self._per_engine[engine_idx] = (base, incs, [None, None])
        return st

    def _drop_wrong_guesses(self, engine_idx: int, base: list[str], keys) -> None:
        """Remove series created up front that the engine does not report (its capacity
        differs from the frontend's estimate, e.g. data-parallel engines of unequal memory)."""
        for key in self._guessed.pop(engine_idx, set()) - set(keys):
            policy, cap = split_key(key)
            for metric in [self._cache[f] for f in CACHE_FIELDS] + [self._stopped]:
                try:
                    metric.remove(*base, policy, cap)
                except KeyError:
                    pass
            self._children.pop((engine_idx, key), None)
        # NOTE: a tier guessed behind a cache the engine does not report goes with it
        reported = set(keys)
        for idx, key in [k for k in self._tier_children if k[0] == engine_idx]:
            if key.rpartition("|")[0] not in reported:
                labels = split_tier_key(key)
                for metric in [self._tier[f] for f in TIER_FIELDS] + [self._tier_occ,
                                                                      self._tier_cap]:
                    try:
                        metric.remove(*base, *labels)
                    except KeyError:
                        pass
                del self._tier_children[(idx, key)]

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        try:
            base, engine_incs, last = self._engine_children(engine_idx)
            rows = transfer_stats_data.get(Payload.CACHES)
            if rows is not None and engine_idx in self._guessed:
                self._drop_wrong_guesses(engine_idx, base, rows)
            if rows:
                _add_rows(rows, self._children, engine_idx, base, self._cache_children)
            for f, v in transfer_stats_data.get(Payload.ENGINE, {}).items():
                if v > 0:
                    inc = engine_incs.get(f)
                    if inc is not None:
                        inc(v)
            for key, v in (transfer_stats_data.get(Payload.STOPPED) or {}).items():
                # NOTE: rare (every cache in an engine's first payload, then a change of state)
                self._stopped.labels(*base, *split_key(key)).set(v)
            if Payload.TIERS in transfer_stats_data:
                self._observe_tiers(transfer_stats_data, engine_idx, base)
            rec = transfer_stats_data.get(Payload.RECORDING, -1)
            if rec is not None and rec >= 0 and rec != last[0]:
                self._rec.labels(*base).set(rec)
                last[0] = rec
            cap = transfer_stats_data.get(Payload.CAPACITY)
            if cap and cap != last[1]:
                self._cap.labels(*base).set(cap)
                last[1] = cap
        except Exception:  # noqa: BLE001 - never break vLLM's stat logger
            logger.exception("shadow connector: could not record metrics")


    def _observe_tiers(self, d: dict[str, Any], engine_idx: int, base: list[str]) -> None:
        """The tier rows (deltas) and states (occupancy, capacity) of one payload."""
        _add_rows(d[Payload.TIERS], self._tier_children, engine_idx, base,
                  self._tier_counter_children)
        for part, gauge in ((Payload.TIER_OCCUPANCY, self._tier_occ),
                            (Payload.TIER_CAPACITY, self._tier_cap)):
            for key, v in (d.get(part) or {}).items():
                gauge.labels(*base, *split_tier_key(key)).set(v)


class ShadowCollector:
    """Collector for the own endpoint: reads the connector's cumulative payload at scrape time."""

    def __init__(self, payload_fn, model_name: str, engine: str) -> None:
        self._payload = payload_fn
        self._base = [model_name, engine]

    def collect(self):
        d = self._payload()
        fams = {f: CounterMetricFamily(f"shadow_{f}", CACHE_HELP[f],
                                       labels=["model_name", "engine", "policy",
                                               "capacity_blocks"]) for f in CACHE_FIELDS}
        for key, row in d.get(Payload.CACHES, {}).items():
            policy, cap = split_key(key)
            for f, v in zip(CACHE_FIELDS, row):
                fams[f].add_metric(self._base + [policy, cap], float(v))
        yield from fams.values()
        for f in ENGINE_FIELDS:
            fam = CounterMetricFamily(f"shadow_{f}", ENGINE_HELP[f],
                                      labels=["model_name", "engine"])
            fam.add_metric(self._base, float(d.get(Payload.ENGINE, {}).get(f, 0)))
            yield fam
        g = GaugeMetricFamily(RECORDING_GAUGE, RECORDING_HELP, labels=["model_name", "engine"])
        g.add_metric(self._base, float(max(d.get(Payload.RECORDING, 0), 0)))
        yield g
        g = GaugeMetricFamily(CAPACITY_GAUGE, CAPACITY_HELP, labels=["model_name", "engine"])
        g.add_metric(self._base, float(d.get(Payload.CAPACITY, 0)))
        yield g
        g = GaugeMetricFamily(STOPPED_GAUGE, STOPPED_HELP,
                              labels=["model_name", "engine", "policy", "capacity_blocks"])
        for key, v in d.get(Payload.STOPPED, {}).items():
            g.add_metric(self._base + list(split_key(key)), float(v))
        yield g
        tiers = d.get(Payload.TIERS)
        if not tiers:
            return
        labels = ["model_name", "engine", *TIER_LABELS]
        fams = {f: CounterMetricFamily(tier_counter_name(f), TIER_HELP[f], labels=labels)
                for f in TIER_FIELDS}
        for key, row in tiers.items():
            for f, v in zip(TIER_FIELDS, row):
                fams[f].add_metric(self._base + list(split_tier_key(key)), float(v))
        yield from fams.values()
        for part, name, doc in ((Payload.TIER_OCCUPANCY, TIER_OCCUPANCY_GAUGE, TIER_OCCUPANCY_HELP),
                                (Payload.TIER_CAPACITY, TIER_CAPACITY_GAUGE, TIER_CAPACITY_HELP)):
            g = GaugeMetricFamily(name, doc, labels=labels)
            for key, v in d.get(part, {}).items():
                g.add_metric(self._base + list(split_tier_key(key)), float(v))
            yield g


def start_endpoint(host: str, port: int, collector: ShadowCollector):
    """Serve ``collector`` on ``host:port`` (own registry); returns the server to shut down."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = start_http_server(port, addr=host, registry=registry)
    return server[0] if isinstance(server, tuple) else server
