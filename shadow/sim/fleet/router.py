"""The router interface, the registry of router models and their ``k=v,k=v`` parameters.

A router model is one module ``shadow/sim/fleet/<name>.py`` (``random`` is ``random_pick.py``)
with a module-level ``SPEC`` (:class:`RouterSpec`: what it reads, its defaults and where its
rules come from) and ``make(replicas, params, ctx: FleetContext) -> Router``.  :data:`ROUTERS` maps every
name to its module, in ``--list-routers`` order; the CLI, the fleet driver, the benchmarks and
the tests read their lists from here.

What a router sees per request (:class:`Query`) is what the real router has when the request
arrives: its prompt's blocks (block ids stand for the router's hashes of the prompt's full
blocks), its token count, its session and user, the time, and the fleet's load signals
(:class:`FleetView`).  A router whose decisions read the replicas' caches (``reads_caches``)
gets each replica's resident prefix through the view; the driver then runs one fleet per cache
(policy, capacity), since each cache gives other routing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.params import ParamValue, check_name_list, parse_params, split_named_params

#: Router name -> module, in ``--list-routers`` order.
ROUTERS: dict[str, str] = {
    "round_robin": "shadow.sim.fleet.round_robin",
    "random": "shadow.sim.fleet.random_pick",
    "consistent_hash": "shadow.sim.fleet.consistent_hash",
    "power_of_two": "shadow.sim.fleet.power_of_two",
    "least_load": "shadow.sim.fleet.least_load",
    "sticky_least_loaded": "shadow.sim.fleet.sticky_least_loaded",
    "cache_aware": "shadow.sim.fleet.cache_aware",
    "kv_aware": "shadow.sim.fleet.kv_aware",
    "llm_d": "shadow.sim.fleet.llm_d",
    "dynamo": "shadow.sim.fleet.dynamo",
    "recorded": "shadow.sim.fleet.recorded",
}

#: The most replicas a fleet may have.
MAX_REPLICAS = 4096


@dataclass(frozen=True)
class RouterSpec:
    """What a router model is, declared once in its module as ``SPEC``."""

    description: str
    #: where its rules come from: repository or package, file and line (docs/fleet.md repeats it)
    source: str
    #: parameters and their defaults, ``k=v,k=v`` (types inferred from the values)
    defaults: str = ""
    #: decisions read the replicas' resident blocks (one fleet per cache)
    reads_caches: bool = False
    #: decisions read in-flight load, which only a time model gives (refused under serial timing)
    needs_load: bool = False
    #: why it needs the trace's block size in tokens ('' if it does not; refused without one)
    needs_block_size: str = ""

    def __post_init__(self) -> None:
        if not self.description or not self.source:
            raise ValueError("a router needs a description and a source")
        parse_params(None, self.defaults, where="RouterSpec.defaults")


@dataclass
class Query:
    """One request as the router sees it when it arrives.

    ``blocks`` are the prompt's full blocks in prefix order (the ids the replicas' caches hold);
    ``t`` the arrival in seconds on the trace's clock (-1 when the trace has no times);
    ``session``/``user`` -1 when the request has none; ``replica`` the replica a merged
    recording says it went to (-1 unknown).
    """

    index: int
    blocks: np.ndarray
    input_tokens: int
    output_tokens: int
    session: int
    user: int
    t: float
    replica: int = -1


@dataclass(frozen=True)
class FleetContext:
    """What a router is built with besides its parameters."""

    #: the replicas' names (the real router's worker URLs: a hash ring reads them)
    names: tuple[str, ...]
    #: tokens per block (the trace header's; 0 when it gives none)
    block_size: int


class FleetView(Protocol):
    """The fleet's signals a router may read at a decision (the driver's, not the router's)."""

    #: replicas in the fleet
    replicas: int

    def in_flight(self, r: int) -> int:
        """Requests routed to replica ``r`` and not yet complete (the router's load counter)."""

    def waiting(self, r: int) -> int:
        """Requests routed to ``r`` that have arrived and not yet started (its queue)."""

    def prefill_tokens(self, r: int) -> int:
        """Prompt tokens of the requests routed to ``r`` still in prefill (not past their first
        token: the service model's prefill end, a recording's admission)."""

    def decode_blocks(self, r: int) -> int:
        """Prompt blocks of the requests routed to ``r`` and not yet complete."""

    def kv_usage(self, r: int) -> float:
        """Fraction of ``r``'s cache that running requests hold (vLLM's kv_cache_usage)."""

    def prefix(self, q: Query) -> np.ndarray:
        """Per replica, how many leading blocks of ``q.blocks`` its cache holds (contiguous from
        block 0); only for a router whose spec ``reads_caches``."""

    def resident(self, r: int, block: int) -> bool:
        """Whether replica ``r``'s cache holds ``block`` (``reads_caches`` only)."""

    def resident_mask(self, r: int, blocks: np.ndarray) -> np.ndarray:
        """Per block of ``blocks``, whether replica ``r``'s cache holds it (``reads_caches``
        only)."""

    def resident_blocks(self) -> int:
        """Blocks resident in all the replicas' caches together (``reads_caches`` only)."""


class Router:
    """A router model: :meth:`route` picks the replica of each request, in arrival order.

    Invariant: decisions depend only on what :class:`Query` and :class:`FleetView` say and on
    the router's own state (its draws come from its ``seed``), so a run is reproducible.
    """

    #: the name it is registered under
    name = ""

    def route(self, q: Query, view: FleetView) -> int:
        raise NotImplementedError

    def route_all(self, n: int) -> np.ndarray | None:
        """Every decision at once, for a router whose decisions depend on the request count
        alone (round_robin, random): the replicas of requests 0 .. n-1 in arrival order; None
        (the default) to be asked one request at a time."""
        return None

    def index_size(self, view: FleetView) -> int:
        """Entries the router's index holds now (blocks, summed over replicas); 0 if it has
        none."""
        return 0

    def placed(self, r: int, prefill_end_us: int) -> None:
        """The request just routed went to ``r`` and is in prefill until ``prefill_end_us``
        (the fleet's schedule); a router that tracks its own prefill load reads it."""

    def wants_stores(self) -> bool:
        """True if :meth:`stored` must hear of every block a replica stores (an index that sees
        stores late, or speculates)."""
        return False

    def stored(self, r: int, blocks, t: float, view: FleetView) -> None:
        """Replica ``r`` stored ``blocks`` (newly resident) at ``t`` seconds."""

    def needs_clock(self) -> str | None:
        """Why this router, as configured, needs arrival times (None if it does not)."""
        return None


def _module(name: str) -> ModuleType:
    key = name.strip().lower()
    if key not in ROUTERS:
        raise ShadowError(f"unknown router {name!r} (known: {', '.join(ROUTERS)})")
    return importlib.import_module(ROUTERS[key])


def router_spec(name: str) -> RouterSpec:
    """The spec of router ``name`` (ShadowError if unknown)."""
    spec = getattr(_module(name), "SPEC", None)
    if not isinstance(spec, RouterSpec):
        raise ShadowError(f"router {name}: its module declares no SPEC")
    return spec


def router_specs() -> dict[str, RouterSpec]:
    """Name -> spec of every registered router, in registry order."""
    return {name: router_spec(name) for name in ROUTERS}


@dataclass(frozen=True)
class RouterChoice:
    """A router as a run names it: its name and its parameters (typed, defaults filled in)."""

    name: str
    params: dict[str, ParamValue]
    #: the parameters as given (``k=v,...``), for labels
    given: str = ""

    @property
    def spec(self) -> RouterSpec:
        return router_spec(self.name)

    @property
    def label(self) -> str:
        """``name`` or ``name:k=v,...`` (the parameters given): the RESULT line's ``router=``."""
        return self.name if not self.given else f"{self.name}:{self.given}"

    def make(self, replicas: int, ctx: FleetContext) -> Router:
        router = _module(self.name).make(replicas, dict(self.params), ctx)
        router.name = self.name
        return router


def parse_router(text: str, params_text: str | None = None) -> RouterChoice:
    """``name`` or ``name:k=v,k=v`` (with ``params_text`` more ``k=v,...``) as a
    :class:`RouterChoice`; unknown names and parameters are ShadowErrors naming the router."""
    head, _, inline = text.partition(":")
    name = head.strip().lower()
    spec = router_spec(name)
    given = ",".join(p for p in (inline.strip(), (params_text or "").strip()) if p)
    params = parse_params(given, spec.defaults, where=f"router {name}")
    mod = _module(name)
    check = getattr(mod, "check", None)
    if check is not None:
        check(params)
    return RouterChoice(name, params, given)


def router_texts(text: str, router_params: Iterable[str] = ()) -> list[str]:
    """``--router R[,R...]`` with ``--router-params`` (``k=v,...`` for every router, or
    ``router:k=v,...`` for one; :func:`shadow.sim.params.split_named_params`, as
    ``--algo-params``) as one ``name`` or ``name:k=v,...`` text per router, in order; the
    parameters are checked when each text is parsed (:func:`parse_router`)."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    check_name_list(names, option="--router", what="router")
    for n in names:
        if ":" in n or "=" in n:
            raise ShadowError(f"--router {n!r}: --router names routers (R[,R...]); their "
                              f"parameters go to --router-params R:k=v,...")
        _module(n)                          # NOTE: an unknown router: its one-line error now
    extra = split_named_params(router_params, names, ROUTERS, option="--router-params",
                               listing="--router")
    return [f"{n}:{extra[n]}" if extra[n] else n for n in names]


def parse_router_list(text: str, router_params: Iterable[str] = ()) -> list[RouterChoice]:
    """:func:`router_texts`, each parsed."""
    return [parse_router(t) for t in router_texts(text, router_params)]


def check_replicas(n: int, where: str = "--replicas") -> int:
    """``n`` if it is a valid replica count (1 .. :data:`MAX_REPLICAS`), else ShadowError."""
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_REPLICAS:
        raise ShadowError(f"{where} must be between 1 and {MAX_REPLICAS}, got {n}")
    return n


def default_names(replicas: int) -> list[str]:
    """Replica names when the trace names none: ``r0`` .. ``r{N-1}``."""
    return [f"r{i}" for i in range(replicas)]
