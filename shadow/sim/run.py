"""One description of a simulation run (:class:`RunSpec`) and the one way to run it (:func:`run`).

A run is described by three sources: ``shadow simulate``'s options (:meth:`RunSpec.from_options`,
which ``shadow sweep`` also uses to check its options before planning), a sweep cell
(:meth:`RunSpec.from_cell`) and the live connector's configuration (:meth:`RunSpec.live`, no
trace).  A constructor only translates its source's values; every check that relates one setting
to another is made once, by the spec: ``__post_init__`` for those that need no trace,
:meth:`RunSpec.bind` for those that read the trace's header (block size, next-access times, a
model's ``config.json`` for the bytes of a block).

Invariant: a constructed RunSpec is valid (a bad combination raises :class:`ShadowError` with one
line) and never changes; the cost model is parsed once, into :attr:`RunSpec.cost`, whose
``unit`` (``relative`` or ``us``) says what its numbers are.  A bound spec (:meth:`bind`) has
``block_size`` from the trace and ``bytes_per_block`` resolved from ``kv_config``.

:func:`run` serves an open trace through the spec's caches with the driver the spec asks for
(serial: :func:`shadow.sim.core.simulator.run_trace`; ``--timing recorded|model``:
:func:`shadow.sim.timing.run.run_trace_recorded`; tiers:
:func:`shadow.sim.tiers.run.run_with_tiers`) and returns the caches' results and the tiers' (:class:`RunResults`).  The serve loop is not
touched: this module is set-up only.

A spec with routers (``routers``, ``replicas``; checked in :meth:`RunSpec._check_fleet` and
:meth:`RunSpec.bind`) runs every cache as a fleet of ``replicas`` behind each router
(:mod:`shadow.sim.fleet`, docs/fleet.md); with one replica every router gives the single
engine's figures.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from shadow.errors import ShadowError
from shadow.sim.category import DEFAULT_CATEGORY, check_category
from shadow.sim.cost.models import COST_UNITS, CostModel, parse_cost_model
from shadow.sim.core.results import CacheSpec, Result

if TYPE_CHECKING:
    from shadow.sim.core.prefill import PrefillTotals
    from shadow.sim.timing.service import ServiceModel
    from shadow.sim.core.simulator import Simulator
    from shadow.sim.fleet.router import RouterChoice
    from shadow.sim.fleet.run import FleetResult
    from shadow.sim.tiers.model import TierChainSpec, TierSpec
    from shadow.sim.tiers.run import ChainResult, TierResult

log = logging.getLogger(__name__)

#: How a run orders its requests: ``serial`` (each whole, file order), ``recorded`` and
#: ``model`` (``--timing``), ``live`` (the connector, driven by the engine's events).
RUN_TIMINGS = ("serial", "recorded", "model", "live")
#: Where a spec's values came from; it only decides how errors name the settings.
SOURCES = ("simulate", "sweep", "connector")
REPLAY_ORDERS = ("deepest-first", "prefix-order")
BLOCK_ID_MODES = ("prefix", "raw")


def check_policy_runs(name: str, params: str, timing: str) -> None:
    """The one check of a cache's policy under a run's timing: a known, built policy with
    parameters in range (:func:`shadow.sim.registry.check_policy`) and, live, not an oracle.
    The connector calls it per configured policy to name the key; :class:`RunSpec` per cache."""
    from shadow.sim.registry import check_policy, policy_info

    info = policy_info(name)       # NOTE: an unknown or unbuilt policy: its one-line error
    if timing == "live" and info.needs_next_access:
        raise ShadowError(f"policy {name!r} needs the future (next-access times) and cannot run "
                          "live; simulate it offline on the recording")
    check_policy(name, params or None)


def _flat_tiers(tiers: Iterable[Any]) -> list["TierSpec"]:
    """Every single tier of ``tiers``, a chain's host and disk tiers in order."""
    from shadow.sim.tiers.model import TierChainSpec

    return [one for t in tiers for one in (t.tiers if isinstance(t, TierChainSpec) else (t,))]


@dataclass(frozen=True, eq=False)
class RunSpec:
    """Everything a run needs besides the trace (module docstring); valid once constructed.

    ``lookup`` is the lookup asked for; :attr:`lookup_mode` the one that runs (vLLM's rules
    under a timing or tiers).  ``source`` only decides how an error names a setting.
    """

    caches: tuple[CacheSpec, ...]
    cost: CostModel
    pin: bool = True
    replay_order: str = "deepest-first"
    verify: bool = True
    lookup: str = "all"
    timing: str = "serial"
    #: ``--timing model``'s service model (its defaults when None is given with ``model``)
    service: "ServiceModel | None" = None
    tiers: tuple["TierSpec | TierChainSpec", ...] = ()
    bytes_per_block: int | None = None
    #: ``CONFIG[,DTYPE]``: a model's config.json whose KV bytes per block :meth:`bind` reads
    kv_config: str | None = None
    category: str = DEFAULT_CATEGORY
    block_id: str = "prefix"
    allow_truncated: bool = False
    threads: int | None = None
    dump_holes: str | None = None
    trace_name: str = ""
    #: tokens per block: the engine's (live), the trace header's once bound
    block_size: int = 0
    #: engines behind each router (the fleet): every cache is ``replicas`` caches of its size
    replicas: int = 1
    #: the routers, each ``name`` or ``name:k=v,...`` (a fleet per router; none: one engine)
    routers: tuple[str, ...] = ()
    source: str = "simulate"
    #: ``routers`` parsed (set in ``__post_init__``)
    router_choices: tuple["RouterChoice", ...] = field(init=False, default=(), repr=False)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ShadowError(f"unknown run source {self.source!r} ({', '.join(SOURCES)})")
        object.__setattr__(self, "caches", tuple(self.caches))
        object.__setattr__(self, "tiers", tuple(self.tiers))
        object.__setattr__(self, "routers", tuple(self.routers))
        if self.timing not in RUN_TIMINGS:
            raise ShadowError(f"unknown timing {self.timing!r} ({', '.join(RUN_TIMINGS)})")
        if not self.caches:
            raise ShadowError("no cache to simulate")
        for name, params in dict.fromkeys((c.policy, c.params) for c in self.caches):
            check_policy_runs(name, params, self.timing)
        if not isinstance(self.cost, CostModel) or self.cost.unit not in COST_UNITS:
            raise ShadowError(f"a run needs a parsed cost model with a unit in "
                              f"{', '.join(COST_UNITS)}, got {self.cost!r:.80}")
        from shadow.sim.engine.rules import LOOKUP_MODES

        if self.lookup not in LOOKUP_MODES:
            raise ShadowError(f"bad lookup mode {self.lookup!r} ({', '.join(LOOKUP_MODES)})")
        if self.replay_order not in REPLAY_ORDERS:
            raise ShadowError(f"bad replay order {self.replay_order!r} "
                              f"({' or '.join(REPLAY_ORDERS)})")
        if self.block_id not in BLOCK_ID_MODES:
            raise ShadowError(f"bad block-id mode {self.block_id!r} "
                              f"({' or '.join(BLOCK_ID_MODES)})")
        check_category(self.category)
        self._check_service()
        if self.timing != "live":
            self._check_block_bytes()
            self._check_tiers()
        if self.threads is not None and self.threads < 1:
            raise ShadowError(f"--threads must be at least 1, got {self.threads}")
        self._check_timing()
        self._check_fleet()

    # ---- the cross-checks, each once ----

    def _oracles(self) -> list[str]:
        """The caches' policies that read next-access times, sorted, each once."""
        from shadow.sim.registry import policy_info

        return sorted({c.policy for c in self.caches if policy_info(c.policy).needs_next_access})

    def _check_service(self) -> None:
        if self.service is not None and self.timing != "model":
            raise ShadowError(f"--service is --timing model's, not --timing {self.timing}'s")
        if self.timing == "model" and self.service is None:
            from shadow.sim.timing.service import parse_service

            object.__setattr__(self, "service", parse_service(None))

    def _check_block_bytes(self) -> None:
        """``--bytes-per-block`` and ``--kv-config``: one of them, and only to size a tier."""
        bpb, kv = self.bytes_per_block, self.kv_config
        if not self.tiers and (bpb is not None or kv is not None):
            raise ShadowError("--bytes-per-block and --kv-config size a --tier; no --tier given")
        if bpb is not None and kv is not None:
            raise ShadowError("--bytes-per-block and --kv-config both give a block's bytes: "
                              "one only")
        if bpb is not None and not 0 < bpb < 2**40:
            raise ShadowError(f"--bytes-per-block {bpb} is not a positive byte count")
        if kv is not None:
            cfg = kv.partition(",")[0]
            if not os.path.isfile(cfg):
                # NOTE: now, not in every sweep cell; bind() reads it with the block size
                raise ShadowError(f"--kv-config {cfg}: cannot read it: no such file")

    def _check_tiers(self) -> None:
        """Offline tiers: no oracle (they run through the live path), vLLM's block rules, and
        every size that needs no trace meets at least one chunk."""
        if not self.tiers:
            return
        oracles = self._oracles()
        if oracles:
            raise ShadowError(f"--tier cannot run {', '.join(oracles)} (an oracle): tiers run "
                              f"through the live path, which has no next-access times")
        if self.lookup not in ("all", "vllm"):
            raise ShadowError(f"--tier uses vLLM's block rules (--lookup vllm), not "
                              f"--lookup {self.lookup}")
        for t in _flat_tiers(self.tiers):
            if t.size_bytes is None or self.bytes_per_block is not None \
                    or self.kv_config is None:
                # NOTE: a size in bytes with neither bytes given: the "needs the bytes" error
                t.n_chunks(self.bytes_per_block)

    def _check_timing(self) -> None:
        """``--timing recorded|model``: vLLM's block rules, and no oracle (the next-access
        times follow the file's order, not the times)."""
        if self.timing not in ("recorded", "model"):
            return
        if self.lookup not in ("all", "vllm"):
            raise ShadowError(f"--timing {self.timing} uses vLLM's block rules (--lookup vllm), "
                              f"not --lookup {self.lookup}")
        oracles = self._oracles()
        if oracles:
            names = ", ".join(oracles)
            if self.source == "sweep":
                # NOTE: a sweep's --timing is repeatable; its error names both timed modes
                raise ShadowError(f"--timing recorded and model cannot run {names}: an oracle's "
                                  f"next-access times follow the file's order")
            raise ShadowError(f"--timing {self.timing} cannot run {names}: an oracle's "
                              f"next-access times follow the file's order, not the "
                              f"{self.timing} times")

    def _check_fleet(self) -> None:
        """The fleet's settings: a replica count in range, known routers with known parameters,
        a time model for a router that reads load, and nothing that cannot be split by replica
        (an oracle's next-access times, ``--dump-holes`` file names, offload tiers)."""
        from shadow.sim.fleet.router import check_replicas, parse_router

        check_replicas(self.replicas)
        if not self.routers:
            if self.replicas > 1:
                raise ShadowError(f"--replicas {self.replicas} needs a router to spread the "
                                  f"requests: --router R[,R...] (simulate --list-routers)")
            return
        if self.timing == "live":
            raise ShadowError("the connector runs in one engine: a router is simulate's")
        choices = tuple(parse_router(text) for text in self.routers)
        labels = [c.label for c in choices]
        if len(set(labels)) != len(labels):
            raise ShadowError("--router lists a router twice")
        object.__setattr__(self, "router_choices", choices)
        if self.cost.profile is not None:
            raise ShadowError(f"--cost-model {self.cost.name} meters one engine's prefill "
                              f"seconds: a fleet (--router) does not report them")
        if self.tiers:
            raise ShadowError("--tier runs behind one engine: a fleet (--router) has no "
                              "offload tiers")
        if self.timing == "serial":
            by_load = [c.label for c in choices if c.spec.needs_load]
            if by_load:
                raise ShadowError(f"router {by_load[0]} routes by load, which a time model "
                                  f"gives: --timing recorded or model (serial timing has "
                                  f"nothing in flight)")
        if self.replicas > 1:
            oracles = self._oracles()
            if oracles:
                raise ShadowError(f"{', '.join(oracles)} (an oracle) cannot run in a fleet of "
                                  f"{self.replicas}: its next-access times follow the whole "
                                  f"trace, not one replica's share")
            if self.dump_holes is not None:
                raise ShadowError("--dump-holes names its files by cache alone: it runs with "
                                  "one replica only")

    @property
    def is_fleet(self) -> bool:
        """Whether :func:`run` runs fleets (a router given) rather than one engine."""
        return bool(self.routers)

    # ---- derived values ----

    @property
    def lookup_mode(self) -> str:
        """The lookup that runs: vLLM's block rules under a timing or tiers, else ``lookup``."""
        if self.timing in ("recorded", "model") or (self.tiers and self.timing != "live"):
            return "vllm"
        return self.lookup

    def bind(self, header: Any, path: str | os.PathLike[str]) -> "RunSpec":
        """This spec checked against a trace's header (``path`` names the trace in errors):
        next-access times for an oracle, the block size for vLLM's block rules, the bytes of a
        block from ``kv_config`` and the tier sizes in bytes; a new spec with ``block_size``
        and ``bytes_per_block`` set."""
        if self.timing == "live":
            raise ShadowError("a live run has no trace to bind")
        oracles = self._oracles()
        if oracles and not getattr(header, "has_next_access", False):
            raise ShadowError(f"{path}: the trace has no next-access times, which "
                              f"{', '.join(oracles)} need{'s' if len(oracles) == 1 else ''} "
                              f"(convert it with `shadow convert`)")
        B = int(getattr(header, "block_size_tokens", 0) or 0)
        if (self.lookup_mode != "all" or self.cost.profile is not None) and B < 1:
            what = ("--tier" if self.tiers else f"--timing {self.timing}"
                    if self.timing != "serial" else f"--lookup {self.lookup_mode}"
                    if self.lookup_mode != "all" else f"--cost-model {self.cost.name}")
            raise ShadowError(f"{path}: {what} needs the block size in tokens, which the "
                              f"trace's header does not give")
        block_bytes = self.bytes_per_block
        if self.kv_config is not None:
            from shadow.sim.tiers.model import kv_bytes_per_block

            cfg, _, dtype = self.kv_config.partition(",")
            block_bytes = kv_bytes_per_block(cfg, B, dtype.strip() or "auto")
        for t in self.tiers:
            t.n_chunks(block_bytes)              # NOTE: a size that cannot be met: now
        self._bind_fleet(header, path)
        return replace(self, block_size=B, bytes_per_block=block_bytes, kv_config=None,
                       cost=self.cost.for_block_size(B))

    def _bind_fleet(self, header: Any, path: str | os.PathLike[str]) -> None:
        """The routers against the trace: a block size for those that count tokens, and
        ``recorded`` replays a merged recording's replicas, as many as the fleet has."""
        B = int(getattr(header, "block_size_tokens", 0) or 0)
        for c in self.router_choices:
            if c.spec.needs_block_size and B < 1:
                raise ShadowError(f"{path}: router {c.label} needs the block size in tokens "
                                  f"({c.spec.needs_block_size}), which the trace's header "
                                  f"does not give")
        if not any(c.name == "recorded" for c in self.router_choices):
            return
        n = int(getattr(header, "n_replicas", 0) or 0)
        if n == 0:
            raise ShadowError(f"{path}: router recorded needs a merged recording (the replica "
                              f"of each request: shadow convert of the replicas' recordings), "
                              f"which this trace is not")
        if n != self.replicas:
            raise ShadowError(f"{path}: router recorded replays the {n} replicas this "
                              f"recording names: --replicas {n}, not {self.replicas}")

    def setup_notes(self) -> list[str]:
        """What a setting defeats, per policy, before the run (asym_cache under a uniform
        cost); each line once, in cache order."""
        from shadow.sim.registry import make_policy

        out: list[str] = []
        for name, params in dict.fromkeys((c.policy, c.params) for c in self.caches):
            notes = getattr(make_policy(name, 64, params or None), "setup_notes", None)
            for line in notes(self.cost.name) if notes is not None else ():
                if line not in out:
                    out.append(line)
        return out

    def open_trace(self, path: str | os.PathLike[str]):
        """``path`` opened as this run reads it (block-id mode, truncation, decode threads)."""
        from shadow.sim.core.simulator import sim_decode_threads
        from shadow.trace import open_trace

        return open_trace(path, allow_truncated=self.allow_truncated, block_id=self.block_id,
                          decode_threads=sim_decode_threads())

    def simulator_kwargs(self) -> dict[str, Any]:
        """:class:`~shadow.sim.core.simulator.Simulator`'s keyword arguments for this spec (all
        but the caches): what every simulator of the run is built with (one, or one per replica
        of a fleet)."""
        return dict(cost_model=self.cost, pin=self.pin, replay_order=self.replay_order,
                    verify=self.verify, dump_holes_dir=self.dump_holes,
                    trace_name=self.trace_name, block_id=self.block_id,
                    lookup=self.lookup_mode, block_size_tokens=self.block_size,
                    threads=self.threads, category=self.category)

    def simulator(self) -> "Simulator":
        """The caches of this spec, built (a bound spec's block size; offline verify)."""
        from shadow.sim.core.simulator import Simulator

        return Simulator(list(self.caches), **self.simulator_kwargs())

    # ---- constructors, one per source ----

    @classmethod
    def from_options(cls, caches: Sequence[CacheSpec], *, cost_model: str | CostModel = "uniform",
                     pin: bool = True, replay_order: str = "deepest-first", verify: bool = True,
                     timing: str = "serial", service: str | None = None,
                     tiers: Iterable[str] = (), bytes_per_block: int | None = None,
                     kv_config: str | None = None, lookup: str = "all",
                     threads: int | None = None, dump_holes: str | None = None,
                     trace_name: str = "", block_id: str = "prefix",
                     allow_truncated: bool = False, category: str = DEFAULT_CATEGORY,
                     replicas: int = 1, router: str | None = None,
                     router_params: Iterable[str] = (),
                     source: str = "simulate") -> "RunSpec":
        """From ``shadow simulate``'s option values (texts as given; a parsed ``cost_model``
        may be passed to parse it once for many specs).  ``router``: ``--router R[,R...]``,
        with ``router_params`` the ``--router-params`` values."""
        from shadow.sim.fleet.router import router_texts
        from shadow.sim.timing.service import parse_service
        from shadow.sim.tiers.model import parse_tiers

        if router is not None and not router.strip():
            raise ShadowError("--router is empty")
        routers = tuple(router_texts(router, router_params)) if router is not None else ()
        if router is None and any(p.strip() for p in router_params):
            raise ShadowError("--router-params without --router")

        cost = cost_model if isinstance(cost_model, CostModel) else parse_cost_model(cost_model)
        svc = parse_service(service) if service is not None else None
        return cls(caches=tuple(caches), cost=cost, pin=pin, replay_order=replay_order,
                   verify=verify, lookup=lookup, timing=timing, service=svc,
                   tiers=tuple(t for text in tiers for t in parse_tiers(text)),
                   bytes_per_block=bytes_per_block, kv_config=kv_config, category=category,
                   block_id=block_id, allow_truncated=allow_truncated, threads=threads,
                   dump_holes=dump_holes, trace_name=trace_name, replicas=replicas,
                   routers=routers, source=source)

    @classmethod
    def from_cell(cls, cell: Any, cost: CostModel | None = None) -> "RunSpec":
        """From a sweep cell (:class:`shadow.sweep.plan.Cell`): its one cache, its timing
        (``model:SERVICE`` carries the service), its tier and block bytes (``N`` or
        ``CONFIG[,DTYPE]``), its router (``name:k=v,...``) and replica count.  ``cost``: the
        cell's cost model already parsed."""
        timing, _, service = cell.timing.partition(":")
        router, _, router_params = cell.router.partition(":")
        kv = cell.kv_bytes
        return cls.from_options(
            (CacheSpec(cell.algo, cell.capacity, cell.params),),
            cost_model=cost if cost is not None else cell.cost_model, pin=cell.pin,
            replay_order=cell.replay_order, timing=timing, service=service or None,
            tiers=(cell.tier,) if cell.tier else (),
            bytes_per_block=int(kv) if kv.isdigit() else None,
            kv_config=kv if kv and not kv.isdigit() else None, trace_name=cell.trace_name,
            block_id=cell.block_id, allow_truncated=cell.allow_truncated,
            category=cell.category, replicas=cell.replicas, router=router or None,
            router_params=(router_params,) if router_params else (), source="sweep")

    @classmethod
    def live(cls, caches: Sequence[CacheSpec], *, cost: CostModel, block_size: int,
             pin: bool = True, category: str = DEFAULT_CATEGORY, match: str = "vllm",
             tiers: Iterable[Any] = (), bytes_per_block: int | None = None,
             trace_name: str = "") -> "RunSpec":
        """The connector's caches (``kv_connector_extra_config``, already parsed key by key):
        no trace, the engine's block size, ``match`` ``vllm`` (vLLM's lookup) or ``full``
        (every full prompt block), no verify step (the serving loop never stops for it)."""
        return cls(caches=tuple(caches), cost=cost.for_block_size(block_size), pin=pin,
                   verify=False, lookup="vllm" if match == "vllm" else "prompt", timing="live",
                   tiers=tuple(tiers), bytes_per_block=bytes_per_block, category=category,
                   block_size=block_size, trace_name=trace_name, source="connector")


@dataclass
class RunResults:
    """What :func:`run` returns: per cache (``spec.caches`` order) its :class:`Result`; per
    (cache, tier) pair, caches outer, its tier result (none without tiers); the lines the
    caches' policies say about what the trace lacked, each once; and with a profile cost model
    (``cost.profile``) per cache its prefill seconds (:class:`~shadow.sim.core.prefill.
    PrefillTotals`, ``spec.caches`` order; none otherwise).

    A fleet run (routers given) has one :class:`~shadow.sim.fleet.run.FleetResult` per
    (router, cache) in ``fleet``, routers outer, and ``caches`` holds their totals in the same
    order (``caches[i] is fleet[i].total``)."""

    caches: list[Result]
    tiers: list["TierResult | ChainResult"] = field(default_factory=list)
    trace_notes: list[str] = field(default_factory=list)
    fleet: list["FleetResult"] = field(default_factory=list)
    prefill: list["PrefillTotals"] = field(default_factory=list)

    def fleet_of(self, r: Result) -> "FleetResult | None":
        """The fleet whose totals ``r`` is (None outside a fleet run)."""
        return next((f for f in self.fleet if f.total is r), None)

    def result_lines(self, r: Result) -> list[str]:
        """A cache's RESULT line; with tiers, one per tier with the tier keys appended; a
        fleet's totals with the fleet keys appended; with a profile, the prefill keys
        (:data:`~shadow.sim.core.prefill.PREFILL_KEYS`) last."""
        fleet = self.fleet_of(r)
        if fleet is not None:
            return [fleet.result_line()]
        mine = [t for t in self.tiers if t.spec == r.spec]
        lines = [f"{r.result_line()} {t.suffix()}" for t in mine] if mine else [r.result_line()]
        if self.prefill:
            k = next(i for i, c in enumerate(self.caches) if c is r)
            lines = [f"{line} {self.prefill[k].suffix()}" for line in lines]
        return lines

    def lines(self) -> list[str]:
        """Every cache's RESULT lines, caches without an error, in order."""
        return [line for r in self.caches if not r.error for line in self.result_lines(r)]


def run(spec: RunSpec, tr: Any, progress: Callable[[int, int], None] | None = None,
        on_start: Callable[[], None] | None = None) -> RunResults:
    """Serve the open trace ``tr`` (:func:`shadow.trace.open_trace`; its ``path`` names it in
    errors) through ``spec``'s caches, bound to its header, with the driver the spec asks for.

    ``progress(block accesses, requests)`` is called as the run goes; ``on_start()`` once the
    caches are built, before the first request (a fleet builds its replicas' caches as it
    goes: before them).  On any failure the caches are aborted (no partial hole files).

    A spec with routers runs a fleet per router (:func:`shadow.sim.fleet.run.run_routers`)."""
    if spec.timing == "live":
        raise ShadowError("a live run is driven by the engine, not by run()")
    path = tr.path
    spec = spec.bind(tr.header, path)
    if spec.is_fleet:
        from shadow.sim.fleet.run import run_routers

        if on_start is not None:
            on_start()
        fleet = run_routers(spec, tr, progress)
        notes = list(dict.fromkeys(line for f in fleet for line in f.notes))
        return RunResults([f.total for f in fleet], [], notes, fleet)
    sim = spec.simulator()
    try:
        if on_start is not None:
            on_start()
    except BaseException:
        sim.abort()
        raise
    tier_results: list = []
    meter = None
    if spec.cost.profile is not None:
        from shadow.sim.core.prefill import PrefillMeter

        meter = PrefillMeter(spec.cost.profile, spec.block_size, len(spec.caches), str(path))
    if spec.tiers:
        from shadow.sim.tiers.run import run_with_tiers
        from shadow.sim.timing.run import SerialOrder

        order = (spec.service if spec.timing == "model" else None if spec.timing == "recorded"
                 else SerialOrder())
        tier_results = run_with_tiers(sim, tr, path, spec.block_size, list(spec.tiers),
                                      spec.bytes_per_block, spec.cost, service=order,
                                      progress=progress, meter=meter)
    elif spec.timing != "serial":
        from shadow.sim.timing.run import run_trace_recorded

        run_trace_recorded(sim, tr, path, spec.block_size, progress=progress,
                           service=spec.service, meter=meter)
    else:
        from shadow.sim.core.simulator import run_trace

        run_trace(sim, tr, path, progress=progress, meter=meter)
    from shadow.sim.core.simulator import policy_notes

    return RunResults(sim.results(), tier_results, policy_notes([sim]),
                      prefill=meter.totals if meter is not None else [])
