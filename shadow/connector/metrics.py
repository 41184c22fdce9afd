"""Metrics of the live shadow: vLLM's connector-stats path and an own Prometheus endpoint.

Names and labels are the contract in docs/metrics.md; the payload and every series are declared
once in :mod:`shadow.connector.schema` (its parts), which both routes below read.

* **vLLM's /metrics**: the scheduler-side connector returns interval deltas from
  ``get_kv_connector_stats`` (a :class:`ShadowStats`); vLLM ships them to the frontend process,
  where :class:`ShadowPromMetrics` (built by ``ShadowConnector.build_prom_metrics``) adds them to
  counters labelled ``model_name``, ``engine``, ``replica`` (+ each part's labels).  Needs
  ``log_stats`` (no ``--disable-log-stats``).  Each engine's ``replica`` comes from the same
  configuration as the engine core's (``config.replica_of``).
* **own endpoint** (``metrics_port``): a ``prometheus_client`` server in the engine-core process on
  its own registry, bound to ``metrics_host`` (127.0.0.1 by default), port ``metrics_port +
  dp_rank``; :class:`ShadowCollector` reads the cumulative counters at scrape time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (KVConnectorPromMetrics,
                                                                  KVConnectorStats)

from shadow.connector.schema import (CACHE_FIELDS, CACHES, CAPACITY, ENGINE_FIELDS,
                                     ENGINE_LABELS, ENGINE_SERIES, PARTS, RECORDING,
                                     REPLICA_LABEL, TIER_FIELDS, Part, Payload, Series, part_keys)

logger = logging.getLogger(__name__)


class ShadowStats(KVConnectorStats):
    """Interval deltas of the shadow counters (what ``get_kv_connector_stats`` returns)."""

    def reset(self) -> None:
        self.data = {}

    def is_empty(self) -> bool:
        d = self.data
        if not d:
            return True
        if any(v for v in d.get(Payload.ENGINE, {}).values()):
            return False
        for p in PARTS:
            part = d.get(p.payload)
            if part and (p.state or any(any(row) for row in part.values())):
                return False
        return True

    def aggregate(self, other: KVConnectorStats) -> "ShadowStats":
        o = other.data if other is not None else {}
        if not o:
            return self
        if not self.data:
            self.data = {Payload.ENGINE: dict(o.get(Payload.ENGINE, {})),
                         Payload.RECORDING: o.get(Payload.RECORDING, -1),
                         Payload.CAPACITY: o.get(Payload.CAPACITY, 0)}
            for p in PARTS:
                if p.payload in o:
                    self.data[p.payload] = (dict(o[p.payload]) if p.state else
                                            {k: list(v) for k, v in o[p.payload].items()})
            return self
        for p in PARTS:
            part = o.get(p.payload)
            if not part:
                continue
            mine = self.data.setdefault(p.payload, {})
            if p.state:  # NOTE: a state, not a count: the later interval's value wins
                mine.update(part)
                continue
            for k, row in part.items():
                m = mine.get(k)
                mine[k] = list(row) if m is None else [a + b for a, b in zip(m, row)]
        e = self.data.setdefault(Payload.ENGINE, {})
        for k, v in o.get(Payload.ENGINE, {}).items():
            e[k] = e.get(k, 0) + v
        if o.get(Payload.RECORDING, -1) >= 0:
            self.data[Payload.RECORDING] = o[Payload.RECORDING]
        if o.get(Payload.CAPACITY):
            self.data[Payload.CAPACITY] = o[Payload.CAPACITY]
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


def _fast_inc(child: Any) -> Callable[[float], None]:
    """The cheapest correct ``inc`` of a labelled counter child.

    NOTE: ``prometheus_client.Counter.inc`` re-checks observability, the sign and the exemplar
    on every call; ``observe`` adds up to 240 positive deltas per engine step, on the engine's
    own thread when the engine runs in-process, so for a plain prometheus_client child it calls
    the value's ``inc`` (the same lock and, in multiprocess mode, the same mmap write; less than
    half the time: docs/performance.md, "Measured choices").  Other counter classes (vLLM's Ray
    wrappers) keep their own ``inc``.
    """
    value = getattr(child, "_value", None)
    if isinstance(child, Counter) and callable(getattr(value, "inc", None)):
        return value.inc
    return child.inc


def expected_keys(vllm_config, n_engines: int) -> tuple[dict[str, tuple[str, ...]], int]:
    """The keys per keyed part (by its Snapshot keys field: ``cache_keys``, ``tier_keys``) and
    the engine capacity an engine of ``vllm_config`` will report, as the frontend can tell
    before any stats arrive (``({}, 0)`` when it cannot).

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
        return {}, 0
    ktc = vllm_config.kv_transfer_config
    extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
    block_size = int(vllm_config.cache_config.block_size or 16)
    cfg = parse_extra_config(extra, block_size=block_size, engine_blocks=per_engine,
                             bytes_per_block=1)
    if not cfg.enabled:
        return {}, 0
    return part_keys(cfg), per_engine


def frontend_replicas(vllm_config, engines: Iterable[int]) -> dict[int, str]:
    """Each engine's replica name as the frontend can tell it from the configuration (the
    engine index is its DP rank); the default name when the configuration cannot be read."""
    from shadow.connector.config import default_replica, replica_name, replica_of

    ktc = getattr(vllm_config, "kv_transfer_config", None)
    extra = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
    pc = getattr(vllm_config, "parallel_config", None)
    dp_size = int(getattr(pc, "data_parallel_size", 1) or 1)
    out = {}
    for idx in engines:
        try:
            out[idx] = replica_of(extra, int(idx), dp_size)
        except Exception:  # noqa: BLE001 - the engine core validates; never break the frontend
            out[idx] = replica_name(default_replica(), int(idx), dp_size)
    return out


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


class ShadowPromMetrics(KVConnectorPromMetrics):
    """Registers the shadow series on vLLM's registry and adds each stats interval to them."""

    def __init__(self, vllm_config, metric_types, labelnames: list[str],
                 per_engine_labelvalues: dict[int, list[object]]) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        every = [s for p in PARTS for s in p.series] + [*ENGINE_SERIES, RECORDING, CAPACITY]
        _unregister(REGISTRY, [s.name for s in every])
        # NOTE: vLLM's labels, then the replica's name, on every series
        base = [*labelnames, REPLICA_LABEL]
        replicas = frontend_replicas(vllm_config, per_engine_labelvalues)
        #: engine -> its label values (vLLM's, then its replica)
        self._values = {idx: [str(v) for v in values] + [replicas[idx]]
                        for idx, values in per_engine_labelvalues.items()}
        #: per part (payload key), one family per series
        self._fams = {p.payload: [self._family(s, base + list(p.labels)) for s in p.series]
                      for p in PARTS}
        self._engine = {f: self._family(s, base) for f, s in zip(ENGINE_FIELDS, ENGINE_SERIES)}
        self._rec = self._family(RECORDING, base)
        self._cap = self._family(CAPACITY, base)
        # (engine, payload key, key) -> pre-bound incs of a rows part's counters
        self._children: dict[tuple[int, str, str], list] = {}
        # engine -> (label values, field -> inc, [last recording gauge, last capacity gauge])
        self._per_engine: dict[int, tuple[list[str], dict, list]] = {}
        # engine -> the keys (per Snapshot keys field) created up front, checked against its
        # first payload
        self._guessed: dict[int, dict[str, list[str]]] = {}
        try:
            keys, cap = expected_keys(vllm_config, len(per_engine_labelvalues))
        except Exception:  # noqa: BLE001 - the engine core validates; never break the frontend
            logger.debug("shadow connector: no series up front", exc_info=True)
            keys, cap = {}, 0
        for idx, values in self._values.items():
            for f in ENGINE_FIELDS:
                self._engine[f].labels(*values)
            self._rec.labels(*values)
            # NOTE: every series exists at 0 from the first scrape, so a PromQL rate() window
            # that starts at start-up sees the first requests as an increase (a series born
            # with its first nonzero value has no earlier sample: its first increment is lost).
            if cap:
                self._cap.labels(*values).set(cap)
            labels = values
            for p in PARTS:
                for key in keys.get(p.keys, ()):
                    if not p.state:
                        self._children[(idx, p.payload, key)] = self._incs(p, labels, key)
                    elif p.initial is not None:
                        self._fams[p.payload][0].labels(*labels, *p.split(key)).set(p.initial)
            self._guessed[idx] = keys

    def _family(self, s: Series, labelnames: list[str]):
        if s.gauge:
            return self._gauge_cls(name=s.name, documentation=s.help, labelnames=labelnames,
                                   multiprocess_mode="mostrecent")
        return self._counter_cls(name=s.name, documentation=s.help, labelnames=labelnames)

    def _incs(self, p: Part, base: list[str], key: str) -> list[Callable[[float], None]]:
        """Pre-bound incs of a rows part's counters for one key, in column order."""
        lv = p.split(key)
        return [_fast_inc(fam.labels(*base, *lv)) for fam in self._fams[p.payload]]

    def _engine_children(self, engine_idx: int) -> tuple[list[str], dict, list]:
        """Label values, pre-bound engine-counter incs and last gauge values of one engine."""
        st = self._per_engine.get(engine_idx)
        if st is None:
            base = self._values.get(engine_idx) or list(next(iter(self._values.values()), []))
            incs = {f: _fast_inc(self._engine[f].labels(*base)) for f in ENGINE_FIELDS}
            st = self._per_engine[engine_idx] = (base, incs, [None, None])
        return st

    def _drop_wrong_guesses(self, engine_idx: int, base: list[str], reported) -> None:
        """Remove series created up front that the engine does not report (its capacity
        differs from the frontend's estimate, e.g. data-parallel engines of unequal memory);
        a key of any part goes with the cache it belongs to."""
        guessed = self._guessed.pop(engine_idx, {})
        reported = set(reported)
        for p in PARTS:
            if not p.per_cache:
                continue   # NOTE: the engine's own parts (the sampled curve) are no guess
            for key in guessed.get(p.keys, ()):
                if p.cache_of(key) in reported:
                    continue
                lv = p.split(key)
                for fam in self._fams[p.payload]:
                    try:
                        fam.remove(*base, *lv)
                    except KeyError:
                        pass
                self._children.pop((engine_idx, p.payload, key), None)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        try:
            d = transfer_stats_data
            base, engine_incs, last = self._engine_children(engine_idx)
            rows = d.get(Payload.CACHES)
            if rows is not None and engine_idx in self._guessed:
                self._drop_wrong_guesses(engine_idx, base, rows)
            for p in PARTS:
                part = d.get(p.payload)
                if not part:
                    continue
                if p.state:
                    # NOTE: rare (every key in an engine's first payload, then changes only)
                    fam = self._fams[p.payload][0]
                    for key, v in part.items():
                        fam.labels(*base, *p.split(key)).set(v)
                else:
                    self._add_rows(p, part, engine_idx, base)
            for f, v in d.get(Payload.ENGINE, {}).items():
                if v > 0:
                    inc = engine_incs.get(f)
                    if inc is not None:
                        inc(v)
            rec = d.get(Payload.RECORDING, -1)
            if rec is not None and rec >= 0 and rec != last[0]:
                self._rec.labels(*base).set(rec)
                last[0] = rec
            cap = d.get(Payload.CAPACITY)
            if cap and cap != last[1]:
                self._cap.labels(*base).set(cap)
                last[1] = cap
        except Exception:  # noqa: BLE001 - never break vLLM's stat logger
            logger.exception("shadow connector: could not record metrics")

    def _add_rows(self, p: Part, rows: dict[str, Sequence[float]], engine_idx: int,
                  base: list[str]) -> None:
        """Add each key's row of deltas to its counters.

        NOTE: pre-bound incs cached per (engine, part, key): labels() costs microseconds per
        call; unchanged counters (zero deltas) are skipped."""
        children = self._children
        for key, row in rows.items():
            incs = children.get((engine_idx, p.payload, key))
            if incs is None:
                incs = children[(engine_idx, p.payload, key)] = self._incs(p, base, key)
            for inc, v in zip(incs, row):
                if v > 0:
                    inc(v)


class ShadowCollector:
    """Collector for the own endpoint: reads the connector's cumulative payload at scrape time."""

    def __init__(self, payload_fn, model_name: str, engine: str, replica: str) -> None:
        self._payload = payload_fn
        self._base = [model_name, engine, replica]   # ENGINE_LABELS values

    def collect(self):
        d = self._payload()
        base = self._base
        for p in PARTS:
            part = d.get(p.payload)
            if not part and p is not CACHES:
                continue   # NOTE: a part without keys (no tiers) exposes no family
            labels = [*ENGINE_LABELS, *p.labels]
            fams = [GaugeMetricFamily(s.name, s.help, labels=labels) if s.gauge
                    else CounterMetricFamily(s.name, s.help, labels=labels) for s in p.series]
            for key, v in (part or {}).items():
                lv = base + p.split(key)
                if p.state:
                    fams[0].add_metric(lv, float(v))
                else:
                    for fam, x in zip(fams, v):
                        fam.add_metric(lv, float(x))
            yield from fams
        for f, s in zip(ENGINE_FIELDS, ENGINE_SERIES):
            fam = CounterMetricFamily(s.name, s.help, labels=list(ENGINE_LABELS))
            fam.add_metric(base, float(d.get(Payload.ENGINE, {}).get(f, 0)))
            yield fam
        for s, v in ((RECORDING, max(d.get(Payload.RECORDING, 0), 0)),
                     (CAPACITY, d.get(Payload.CAPACITY, 0))):
            g = GaugeMetricFamily(s.name, s.help, labels=list(ENGINE_LABELS))
            g.add_metric(base, float(v))
            yield g


def start_endpoint(host: str, port: int, collector: ShadowCollector):
    """Serve ``collector`` on ``host:port`` (own registry); returns the server to shut down."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server = start_http_server(port, addr=host, registry=registry)
    return server[0] if isinstance(server, tuple) else server
