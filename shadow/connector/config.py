"""``kv_connector_extra_config`` of the shadow connector: parsed and validated once, at start-up.

Every key is optional; with none given the connector simulates the default policies at the
engine's own capacity x 0.5, 1, 2 and 4, records nothing and serves metrics only through vLLM's
``/metrics``.  A bad value raises :class:`shadow.errors.ShadowError` from the connector's
constructor, i.e. while the engine starts, with a one-line message naming the key
(``kv_connector_extra_config.capacities[1]: ...``); nothing is validated later in the serving
loop.

This module imports no vLLM: the connector hands it plain numbers read from vLLM's configs.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping
from typing import Any

from shadow.errors import ShadowError
from shadow.connector.recorder import SEGMENT_MAX_BYTES, SEGMENT_MAX_SECONDS
from shadow.sim.category import DEFAULT_CATEGORY, check_category
from shadow.trace.sessions import DEFAULT_SESSION_WINDOW

logger = logging.getLogger(__name__)

PREFIX = "kv_connector_extra_config"

#: Policies simulated when ``policies`` is not given (``vllm`` first: it is the fidelity check).
DEFAULT_POLICIES = ("vllm", "lru", "s3fifo", "arc", "sieve")
#: Capacities as multiples of the engine's own block count, when ``capacity_factors`` is not given.
DEFAULT_CAPACITY_FACTORS = (0.5, 1.0, 2.0, 4.0)

MATCH_MODES = ("vllm", "full")

KNOWN_KEYS = frozenset({
    "policies", "capacities", "capacity_factors", "cost_model", "pin", "match", "record_dir",
    "segment_max_bytes", "segment_max_seconds", "record_flush_ms", "record_session_window",
    "record_max_bytes", "record_max_age",
    "metrics_port", "metrics_host", "queue_size", "worker_nice", "id_horizon_s",
    "prediction_log_size", "engine_id", "dp_rank", "enabled", "category",
    "tiers", "tier_caches", "bytes_per_block", "mrc", "replica", "fleet_key",
    "fleet_key_file",
})

#: Which shadow caches the ``tiers`` go behind: ``engine`` (default) the ``vllm`` cache at the
#: engine's own capacity, ``all`` every configured cache.
TIER_CACHES = ("engine", "all")
#: At most this many (cache, tier) pairs: each is a pure-Python tier model on the worker thread.
MAX_TIER_PAIRS = 64


@dataclass(frozen=True)
class PolicySpec:
    """One policy name with its ``k=v,k=v`` parameters (empty for the defaults)."""

    name: str
    params: str = ""

    @property
    def label(self) -> str:
        return self.name if not self.params else f"{self.name}({self.params})"


@dataclass(frozen=True)
class MrcConfig:
    """The live sampled miss-ratio curve (``mrc``; shadow.sim.lockstep.curve): at most ``max_ids``
    tracked ids (the rate falls as needed), or a fixed ``rate`` (``max_ids`` 0)."""

    max_ids: int = 16384
    rate: float = 1.0


@dataclass(frozen=True)
class ShadowConfig:
    """The validated configuration.  ``caches`` is the policies x capacities product."""

    block_size: int
    engine_blocks: int
    policies: tuple[PolicySpec, ...]
    capacities: tuple[int, ...]
    cost_model: str = "uniform"
    category: str = DEFAULT_CATEGORY
    pin: bool = True
    match: str = "vllm"
    record_dir: str | None = None
    #: rotation (the recorder's defaults: shadow.connector.recorder)
    segment_max_bytes: int = SEGMENT_MAX_BYTES
    segment_max_seconds: float = SEGMENT_MAX_SECONDS
    record_flush_ms: float = 20.0
    record_session_window: int = DEFAULT_SESSION_WINDOW
    #: retention of the engine's (DP rank's) segments: bytes on disk, seconds; 0 = unbounded
    record_max_bytes: int = 0
    record_max_age: float = 0.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    queue_size: int = 8192
    worker_nice: int = 0
    id_horizon_s: float = 600.0
    prediction_log_size: int = 1024
    engine_id: str = "0"
    dp_rank: int = 0
    enabled: bool = True
    #: offload tiers (shadow.sim.tiers.model.TierSpec), one per size, and their capacities in chunks
    tiers: tuple = ()
    tier_chunks: tuple[int, ...] = ()
    tier_caches: str = "engine"
    #: bytes of one engine KV block (the engine's KV cache spec, or the ``bytes_per_block`` key)
    bytes_per_block: int | None = None
    #: the live sampled curve (None: off)
    mrc: MrcConfig | None = MrcConfig()
    #: this engine's (DP rank's) name in a fleet: the recording's replica and the series' label
    replica: str = "0"
    #: the block keys' BLAKE2b key (shadow.connector.blockkey), from ``fleet_key`` or
    #: ``fleet_key_file``; random per process when neither is given (``fleet_key_set`` False)
    fleet_key: bytes = field(default=b"", compare=False, repr=False)
    fleet_key_set: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: the simulation these keys describe (:meth:`shadow.sim.run.RunSpec.live`): the caches,
    #: the cost model parsed once, pins, category, tiers; what the worker builds from
    run: Any = field(default=None, compare=False, repr=False)

    @property
    def caches(self) -> list[tuple[PolicySpec, int]]:
        return [(p, c) for p in self.policies for c in self.capacities]

    @property
    def tier_targets(self) -> list[int]:
        """Indexes into :attr:`caches` of the caches the tiers go behind (``tier_caches``)."""
        if not self.tiers:
            return []
        if self.tier_caches == "all":
            return list(range(len(self.caches)))
        return [i for i, (p, c) in enumerate(self.caches)
                if p.name == "vllm" and not p.params and c == self.engine_blocks]


def _err(key: str, msg: str) -> ShadowError:
    return ShadowError(f"{PREFIX}.{key}: {msg}")


def _as_list(value: Any, key: str) -> list:
    if isinstance(value, str):
        return [x.strip() for x in value.split(";" if ":" in value else ",") if x.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise _err(key, f"expected a list or a comma-separated string, got {type(value).__name__}")


def _int(value: Any, key: str, *, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str, float)):
        raise _err(key, f"expected an integer, got {value!r}")
    try:
        f = float(value)
        v = int(f)
        if v != f:
            raise ValueError
    except (ValueError, OverflowError):
        raise _err(key, f"expected an integer, got {value!r}") from None
    if lo is not None and v < lo:
        raise _err(key, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise _err(key, f"must be <= {hi}, got {v}")
    return v


def _float(value: Any, key: str, *, lo: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool):
        raise _err(key, f"expected a number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise _err(key, f"expected a number, got {value!r}") from None
    if not math.isfinite(v):
        raise _err(key, f"expected a finite number, got {value!r}")
    if positive and v <= 0:
        raise _err(key, f"must be > 0, got {v:g}")
    if lo is not None and v < lo:
        raise _err(key, f"must be >= {lo:g}, got {v:g}")
    return v


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false",
                                                    "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _err(key, f"expected true or false, got {value!r}")


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.I)


def _bytes(value: Any, key: str) -> int:
    """An integer byte count, or a string like ``64MiB`` / ``1G``."""
    if isinstance(value, str):
        m = _SIZE.match(value)
        if not m:
            raise _err(key, f"expected a byte count such as 268435456 or '256MiB', got {value!r}")
        unit = (m.group(2) or "b").lower()[0]
        mult = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[unit]
        v = int(float(m.group(1)) * mult)
    else:
        v = _int(value, key)
    if v < 4096:
        raise _err(key, f"must be at least 4096 bytes, got {v}")
    return v


def record_dir_of(extra: dict[str, Any]) -> str | None:
    """The ``record_dir`` key as an absolute path (None: not recording)."""
    record_dir = extra.get("record_dir")
    if record_dir is None:
        return None
    if not isinstance(record_dir, str) or not record_dir.strip():
        raise _err("record_dir", f"expected a directory path, got {record_dir!r}")
    return os.path.abspath(os.path.expanduser(record_dir))


def _check_policy_with_registry(name: str, params: str) -> None:
    """Refuse what cannot run live: unbuilt policies, oracles, bad parameters (the check a
    live :class:`shadow.sim.run.RunSpec` makes, per key here so the error names it)."""
    from shadow.sim.run import check_policy_runs

    check_policy_runs(name, params, "live")


def _policies(value: Any, known: list[str] | None,
              check: Callable[[str, str], None] | None) -> tuple[PolicySpec, ...]:
    items = _as_list(value, "policies")
    if not items:
        raise _err("policies", "is empty: give at least one policy")
    out: list[PolicySpec] = []
    for i, item in enumerate(items):
        key = f"policies[{i}]"
        if isinstance(item, dict):
            name, params = item.get("name") or item.get("policy"), item.get("params", "")
            if isinstance(params, Mapping):
                params = ",".join(f"{k}={v}" for k, v in params.items())
            elif params is None:
                params = ""
            elif not isinstance(params, str):
                raise _err(f"{key}.params", f"expected a k=v,k=v string or a mapping, got "
                           f"{type(params).__name__} {params!r:.80}")
        elif isinstance(item, str):
            name, _, params = item.partition(":")
        else:
            raise _err(key, f"expected a policy name, got {item!r}")
        if not isinstance(name, str) or not name.strip():
            raise _err(key, f"expected a policy name, got {item!r}")
        name, params = name.strip(), params.strip()
        if known is not None and name not in known:
            raise _err(key, f"unknown policy {name!r} (known: {', '.join(sorted(known))})")
        if check is not None:
            try:
                check(name, params)
            except ShadowError as exc:
                raise _err(key, str(exc)) from None
        spec = PolicySpec(name, params)
        if spec in out:
            raise _err(key, f"policy {spec.label!r} is listed twice")
        out.append(spec)
    return tuple(out)


def default_cost_model(model_config_json: str | None, block_size: int) -> tuple[str, Any]:
    """The cost model without a ``cost_model`` key, as (text, parsed model): the served model's
    architecture costs (``model:CONFIG,BLOCK``, docs/sim.md "Cost models") when its
    ``config.json`` is at hand and has what the costs need, else ``uniform`` (with one warning
    line saying why)."""
    from shadow.sim.cost.models import parse_cost_model

    if model_config_json:
        spec = f"model:{model_config_json},{block_size}"
        try:
            return spec, parse_cost_model(spec)
        except ShadowError as exc:
            logger.warning("shadow connector: cost_model uniform (the served model's costs are "
                           "not usable: %s)", exc)
    return "uniform", parse_cost_model("uniform")


def default_replica() -> str:
    """The replica name when none is configured: the host's name (unique per pod)."""
    import socket

    return socket.gethostname() or "0"


def replica_name(base: str, dp_rank: int, dp_size: int) -> str:
    """The name of one engine: ``base``, or ``base@rank`` when the server runs several DP ranks
    (each its own KV cache), the last ``REPLICA_NAME_SIZE`` bytes (the lcp replica table's
    slot; a host name's end tells pods apart)."""
    from shadow.trace.format import REPLICA_NAME_SIZE

    suffix = f"@{dp_rank}" if dp_size > 1 else ""
    room = REPLICA_NAME_SIZE - len(suffix.encode())
    raw = base.encode("utf-8")[-room:]
    return raw.decode("utf-8", "ignore") + suffix


def replica_of(extra: Mapping[str, Any], dp_rank: int, dp_size: int) -> str:
    """The replica name of DP rank ``dp_rank`` under ``kv_connector_extra_config`` ``extra``:
    the one place both the engine core (its recording, its own endpoint) and vLLM's frontend
    (the series' ``replica`` label) take it from."""
    from shadow.trace.format import REPLICA_NAME_SIZE

    if "replica" not in extra:
        return replica_name(default_replica(), dp_rank, dp_size)
    v = extra["replica"]
    if not isinstance(v, str) or not v or not v.isprintable():
        raise _err("replica", f"expected a printable name, got {v!r}")
    name = replica_name(v, dp_rank, dp_size)
    if not name.startswith(v):
        raise _err("replica", f"{v!r} is longer than {REPLICA_NAME_SIZE} bytes"
                              + (" with the DP rank suffix" if dp_size > 1 else ""))
    return name


def _fleet_key(extra: Mapping[str, Any]) -> tuple[bytes, bool]:
    from shadow.connector.blockkey import derive_key, random_key

    if "fleet_key" in extra and "fleet_key_file" in extra:
        raise _err("fleet_key_file", "give fleet_key or fleet_key_file, not both")
    if "fleet_key" in extra:
        v = extra["fleet_key"]
        if not isinstance(v, str) or not v:
            raise _err("fleet_key", "expected a non-empty secret string")
        return derive_key(v), True
    if "fleet_key_file" in extra:
        path = extra["fleet_key_file"]
        if not isinstance(path, str) or not path:
            raise _err("fleet_key_file", f"expected a file path, got {path!r}")
        try:
            with open(os.path.expanduser(path), "rb") as f:
                secret = f.read().strip()
        except OSError as exc:
            raise _err("fleet_key_file", f"{path}: {exc.strerror or exc}") from None
        if not secret:
            raise _err("fleet_key_file", f"{path}: empty")
        return derive_key(secret), True
    return random_key(), False


def parse_extra_config(extra: dict[str, Any] | None, *, block_size: int, engine_blocks: int,
                       engine_id: str = "0", dp_rank: int = 0, dp_size: int = 1,
                       known_policies: list[str] | None = None,
                       check_policy: Callable[[str, str], None] | None = None,
                       bytes_per_block: int | None = None,
                       model_config_json: str | None = None) -> ShadowConfig:
    """Validate ``kv_connector_extra_config`` against the engine's block size and block count.

    ``engine_blocks`` is the engine's usable KV block count (without vLLM's null block);
    default capacities are ``round(engine_blocks * f)`` for each of ``capacity_factors``, then
    ``capacities`` (absolute block counts) are added; duplicates collapse.  ``bytes_per_block``
    is the engine's KV bytes per block (None: unknown), which the ``bytes_per_block`` key
    overrides; tier sizes in bytes need one of them.  ``model_config_json`` is the served
    model's ``config.json`` when it is a local file: without a ``cost_model`` key the caches then
    use that model's architecture costs (``model:CONFIG,BLOCK``), else ``uniform``.
    ``dp_size`` is the server's data-parallel size (the replica name of each rank then ends in
    ``@rank``).
    """
    if extra is not None and not isinstance(extra, Mapping):
        raise ShadowError(f"{PREFIX}: expected a mapping of keys to values, got "
                          f"{type(extra).__name__} {extra!r:.80}")
    extra = dict(extra or {})
    if not isinstance(block_size, int) or block_size <= 0:
        raise ShadowError(f"shadow connector: the engine's block size {block_size!r} is unusable")
    if engine_blocks <= 0:
        raise ShadowError(f"shadow connector: the engine reports {engine_blocks} KV blocks")
    # NOTE: other connectors' keys may share a MultiConnector child's dict only through nesting,
    # so an unknown key here is a typo, not someone else's setting.
    unknown = sorted(k for k in extra if k not in KNOWN_KEYS)
    if unknown:
        raise _err(unknown[0], f"unknown key (known: {', '.join(sorted(KNOWN_KEYS))})")

    if known_policies is None:
        from shadow.sim.registry import is_built, list_policies

        known_policies = list(list_policies())
        check_policy = check_policy or _check_policy_with_registry
        built = [p for p in DEFAULT_POLICIES if is_built(p)]
    else:
        built = [p for p in DEFAULT_POLICIES if p in known_policies]
    if "policies" in extra:
        policies = _policies(extra["policies"], known_policies, check_policy)
    else:
        policies = tuple(PolicySpec(p) for p in built)
        if not policies:
            raise ShadowError("shadow connector: none of the default policies "
                              f"{', '.join(DEFAULT_POLICIES)} is built")

    factors = (_as_list(extra["capacity_factors"], "capacity_factors")
               if "capacity_factors" in extra else list(DEFAULT_CAPACITY_FACTORS))
    caps: list[int] = []
    from shadow.sim.registry import MAX_CAPACITY

    for i, f in enumerate(factors):
        v = _float(f, f"capacity_factors[{i}]", positive=True)
        cap = max(1, int(round(engine_blocks * v)))
        if cap > MAX_CAPACITY:
            raise _err(f"capacity_factors[{i}]", f"{v} x {engine_blocks} engine blocks = {cap} "
                       f"blocks, more than a shadow cache holds ({MAX_CAPACITY})")
        caps.append(cap)
    if "capacities" in extra:
        for i, c in enumerate(_as_list(extra["capacities"], "capacities")):
            caps.append(_int(c, f"capacities[{i}]", lo=1, hi=MAX_CAPACITY))
    capacities = tuple(sorted(set(caps)))
    if not capacities:
        raise _err("capacities", "no capacity left: capacity_factors and capacities are both "
                   "empty")

    if "cost_model" in extra:
        from shadow.sim.cost.models import parse_cost_model

        cost_model = str(extra["cost_model"])
        try:
            cost = parse_cost_model(cost_model)
        except ShadowError as exc:
            raise _err("cost_model", str(exc)) from None
    else:
        cost_model, cost = default_cost_model(model_config_json, block_size)

    category = str(extra.get("category", DEFAULT_CATEGORY))
    check_category(category, f"{PREFIX}.category")

    match = str(extra.get("match", "vllm"))
    if match not in MATCH_MODES:
        raise _err("match", f"unknown match mode {match!r} (known: {', '.join(MATCH_MODES)})")

    record_dir = record_dir_of(extra)
    if record_dir is not None:
        if os.path.exists(record_dir) and not os.path.isdir(record_dir):
            raise _err("record_dir", f"{record_dir} exists and is not a directory")
        above = os.path.dirname(record_dir)
        while not os.path.exists(above) and os.path.dirname(above) != above:
            above = os.path.dirname(above)
        if not os.path.isdir(above):
            # NOTE: the recorder makes the missing directories later; below a file it cannot
            raise _err("record_dir", f"{record_dir} is below {above}, which is not a directory")

    segment_max_bytes = _bytes(extra.get("segment_max_bytes", SEGMENT_MAX_BYTES),
                               "segment_max_bytes")
    record_max_bytes = extra.get("record_max_bytes", 0)
    record_max_bytes = 0 if record_max_bytes == 0 else _bytes(record_max_bytes, "record_max_bytes")
    if 0 < record_max_bytes < segment_max_bytes:
        raise _err("record_max_bytes", f"{record_max_bytes} is below segment_max_bytes "
                                       f"({segment_max_bytes}): retention would delete every "
                                       f"finished segment")

    metrics_port = extra.get("metrics_port")
    if metrics_port is not None:
        metrics_port = _int(metrics_port, "metrics_port", lo=0, hi=65535)
    metrics_host = extra.get("metrics_host", "127.0.0.1")
    if not isinstance(metrics_host, str) or not metrics_host:
        raise _err("metrics_host", f"expected a host name or address, got {metrics_host!r}")

    if "bytes_per_block" in extra:
        bytes_per_block = _int(extra["bytes_per_block"], "bytes_per_block", lo=1, hi=1 << 40)
    tiers, tier_chunks, tier_caches = _tiers(extra, block_size, bytes_per_block)
    pin = _bool(extra.get("pin", True), "pin")
    dp_rank = _int(extra.get("dp_rank", dp_rank), "dp_rank", lo=0)
    fleet_key, fleet_key_set = _fleet_key(extra)

    from shadow.sim.core.results import CacheSpec
    from shadow.sim.run import RunSpec

    run = RunSpec.live([CacheSpec(p.name, c, p.params) for p in policies for c in capacities],
                       cost=cost, block_size=block_size, pin=pin, category=category, match=match,
                       tiers=tiers, bytes_per_block=bytes_per_block)
    cfg = ShadowConfig(
        block_size=block_size,
        engine_blocks=engine_blocks,
        policies=policies,
        capacities=capacities,
        cost_model=cost_model,
        category=category,
        pin=pin,
        match=match,
        record_dir=record_dir,
        segment_max_bytes=segment_max_bytes,
        segment_max_seconds=_float(extra.get("segment_max_seconds", SEGMENT_MAX_SECONDS),
                                   "segment_max_seconds", positive=True),
        record_flush_ms=_float(extra.get("record_flush_ms", 20.0), "record_flush_ms", lo=0.0),
        record_session_window=_int(extra.get("record_session_window", DEFAULT_SESSION_WINDOW),
                                   "record_session_window", lo=0, hi=1 << 40),
        record_max_bytes=record_max_bytes,
        record_max_age=_float(extra.get("record_max_age", 0.0), "record_max_age", lo=0.0),
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        queue_size=_int(extra.get("queue_size", 8192), "queue_size", lo=1, hi=1 << 24),
        worker_nice=_int(extra.get("worker_nice", 0), "worker_nice", lo=0, hi=19),
        id_horizon_s=_float(extra.get("id_horizon_s", 600.0), "id_horizon_s", positive=True),
        prediction_log_size=_int(extra.get("prediction_log_size", 1024), "prediction_log_size",
                                 lo=0, hi=1 << 24),
        engine_id=str(extra.get("engine_id", engine_id)),
        dp_rank=dp_rank,
        enabled=_bool(extra.get("enabled", True), "enabled"),
        tiers=tiers,
        tier_chunks=tier_chunks,
        tier_caches=tier_caches,
        bytes_per_block=bytes_per_block,
        mrc=_mrc(extra.get("mrc", True)),
        replica=replica_of(extra, dp_rank, dp_size),
        fleet_key=fleet_key,
        fleet_key_set=fleet_key_set,
        extra=extra,
        run=run,
    )
    if tiers:
        n = len(cfg.tier_targets)
        if n == 0:
            raise _err("tier_caches", f"'engine' puts the tiers behind the vllm cache at the "
                       f"engine's capacity ({engine_blocks} blocks), which is not configured: "
                       f"add vllm to policies and 1 to capacity_factors, or set tier_caches "
                       f"to all")
        if n * len(tiers) > MAX_TIER_PAIRS:
            raise _err("tiers", f"{len(tiers)} tiers behind {n} caches make "
                       f"{n * len(tiers)} tier models, more than {MAX_TIER_PAIRS}: give fewer "
                       f"sizes or tier_caches engine")
    return cfg


def _mrc(value: Any) -> MrcConfig | None:
    """The ``mrc`` key: true (the default: at most 16,384 tracked ids), false (off), or a
    mapping with one of ``max_ids`` (an integer >= 64) and ``rate`` (a fixed rate in (0, 1])."""
    if not isinstance(value, Mapping):
        try:
            return MrcConfig() if _bool(value, "mrc") else None
        except ShadowError:
            raise _err("mrc", f"expected true, false or a mapping with max_ids or rate, got "
                       f"{value!r}") from None
    unknown = sorted(set(value) - {"max_ids", "rate"})
    if unknown:
        raise _err(f"mrc.{unknown[0]}", "unknown key (known: max_ids, rate)")
    if "max_ids" in value and "rate" in value:
        raise _err("mrc", "max_ids and rate both set the sampling: one only")
    if "rate" in value:
        rate = _float(value["rate"], "mrc.rate", positive=True)
        if rate > 1:
            raise _err("mrc.rate", f"{rate} is not a sampling rate in (0, 1]")
        return MrcConfig(max_ids=0, rate=rate)
    return MrcConfig(max_ids=_int(value.get("max_ids", 16384), "mrc.max_ids", lo=64,
                                  hi=1 << 26))


def _tiers(extra: Mapping[str, Any], block_size: int,
           bytes_per_block: int | None) -> tuple[tuple, tuple[int, ...], str]:
    """The ``tiers`` entries (``--tier`` text or mappings, shadow.sim.tiers.model.parse_tier_entry),
    their capacities in chunks, and ``tier_caches``; every check done here, at start-up."""
    from shadow.sim.tiers.model import parse_tier_entry

    tier_caches = str(extra.get("tier_caches", "engine"))
    if tier_caches not in TIER_CACHES:
        raise _err("tier_caches", f"unknown value {tier_caches!r} (known: "
                   f"{', '.join(TIER_CACHES)})")
    if "tiers" not in extra:
        return (), (), tier_caches
    value = extra["tiers"]
    entries = [value] if isinstance(value, (str, Mapping)) else value
    if not isinstance(entries, (list, tuple)) or not entries:
        raise _err("tiers", f"expected a tier (MEDIUM:SIZES:POLICY[:k=v,...] or a mapping) or "
                   f"a non-empty list of them, got {value!r:.80}")
    specs = []
    chunks = []
    for i, entry in enumerate(entries):
        where = f"{PREFIX}.tiers[{i}]"
        for t in parse_tier_entry(entry, where, block_size):
            chunks.append(t.n_chunks(bytes_per_block, where,
                                     f"the engine's KV cache spec gave none: set "
                                     f"{PREFIX}.bytes_per_block"))
            if t in specs:
                raise _err(f"tiers[{i}]", f"tier {t.label} is listed twice")
            specs.append(t)
    return tuple(specs), tuple(chunks), tier_caches
