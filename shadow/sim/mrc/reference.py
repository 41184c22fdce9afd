"""Pure-Python references for the curve: slow, obviously correct, the oracles of the tests.

* :func:`discrete_curve` runs the reference serve loop (:class:`~shadow.sim.reference.loop.
  RefCache` with the reference ``lru`` or ``vllm`` policy) at every capacity asked, one cache
  each, request after request: what ``simulate`` computes, by definition.
* :func:`stack_curve` is the one-pass idea written plainly: a Python list is the LRU stack
  (entries are block ids or holes), each looked-up block's distance is its index before the
  request, and the hits at ``C`` are the distances ``<= C``.  The fast
  :class:`~shadow.sim.mrc.stack.StackPass` is tested against both.

A request is ``(ids, n_match, n_anonymous)``: its block ids in prefix order, how many leading
blocks are looked up, and the anonymous slots it holds (``--lookup vllm``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shadow.sim.cost.models import CostModel, parse_cost_model
from shadow.sim.reference import make_reference
from shadow.sim.reference.loop import RefCache

Request = tuple[Sequence[int], int, int]


def discrete_curve(requests: Sequence[Request], sizes: Sequence[int], *, algo: str = "lru",
                   pin: bool = False, replay_order: str = "deepest-first",
                   cost: CostModel | None = None) -> dict[int, dict[str, float]]:
    """Per capacity, the reference loop's counters after serving every request in order."""
    cost = cost or parse_cost_model("uniform")
    out = {}
    for c in sizes:
        cache = RefCache(make_reference(algo, c), c, cost_model=cost, pin=pin,
                         replay_order=replay_order)
        for ids, m, a in requests:
            cache.serve(ids, n_match=m, n_anonymous=a)
        out[c] = cache.stats()
    return out


class _Hole:
    """A stack entry that held an anonymous slot (no block): a free slot in every cache that
    holds it."""


class _Phantom:
    """An anonymous slot while its request runs: an entry without a block, not free."""


def stack_curve(requests: Sequence[Request], *, deepest_first: bool = True,
                cost: CostModel | None = None) -> dict[str, object]:
    """Histograms of distances by the plain stack: ``block``/``prefix`` map a distance to the
    looked-up blocks at it (``cost_*`` to their cost); ``inf`` the never-seen ones; ``need`` the
    largest room a request needs (distinct blocks + anonymous slots)."""
    cost = cost or parse_cost_model("uniform")
    stack: list[object] = []           # index 0 = most recent
    block: dict[int, int] = {}
    prefix: dict[int, int] = {}
    cost_block: dict[int, float] = {}
    cost_prefix: dict[int, float] = {}
    need = 0
    for ids, m, a in requests:
        ids = list(ids)
        need = max(need, len(set(ids)) + a)
        pm = 0
        for i, b in enumerate(ids[:m]):
            d = stack.index(b) + 1 if b in stack else 0       # 0: never seen
            c = cost.cost(i)
            if d:
                block[d] = block.get(d, 0) + 1
                cost_block[d] = cost_block.get(d, 0.0) + c
            if d == 0 or pm < 0:
                pm = -1
            else:
                pm = max(pm, d)
                prefix[pm] = prefix.get(pm, 0) + 1
                cost_prefix[pm] = cost_prefix.get(pm, 0.0) + c
        order = reversed(ids) if deepest_first else ids
        for b in order:
            _touch(stack, b)
        # the anonymous slots: phantom blocks on top (each takes a hole, as a slot taken from
        # the free ones); once the request is over each one is a hole where it stands
        phantoms = [_Phantom() for _ in range(a)]
        for ph in phantoms:
            _touch(stack, ph)
        stack[:] = [_Hole() if isinstance(e, _Phantom) else e for e in stack]
    return {"block": block, "prefix": prefix, "cost_block": cost_block,
            "cost_prefix": cost_prefix, "need": need}


def _touch(stack: list[object], b: object) -> None:
    """Move ``b`` to the top; the shallowest hole above its old place (anywhere, for a block
    not in the stack) takes that place instead of every entry above it moving down."""
    old = stack.index(b) if b in stack else None
    above = len(stack) if old is None else old
    hole = next((i for i in range(above) if isinstance(stack[i], _Hole)), None)
    if hole is not None:
        h = stack.pop(hole)
        if old is not None:
            stack[old - 1] = h                 # the hole drops into the block's old place
    elif old is not None:
        del stack[old]
    stack.insert(0, b)


def ratios_from(hist: dict[str, object], c: int, n_blocks: int,
                total_cost: float) -> dict[str, float]:
    """The four ratios at ``c`` from :func:`stack_curve`'s histograms."""
    hits = sum(v for d, v in hist["block"].items() if d <= c)
    phits = sum(v for d, v in hist["prefix"].items() if d <= c)
    saved = sum(v for d, v in hist["cost_block"].items() if d <= c)
    psaved = sum(v for d, v in hist["cost_prefix"].items() if d <= c)
    return {"n_hits": hits, "n_prefix_hits": phits, "saved_cost": saved,
            "prefix_saved_cost": psaved, "n_blocks": n_blocks, "total_cost": total_cost}
