"""The prediction: what the engine's prefix cache should have hit, request by request.

The measured requests are replayed, in the order the engine saw them, through

* the simulator (:mod:`shadow.sim`), one cache per policy at the engine's capacity
  (``num_gpu_blocks - 1``: vLLM keeps block 0 as its null block), driven by the live API
  ``admit``/``release``: the prompt's full engine blocks (:func:`replay.engine_model.engine_request`)
  with ``n_match = (N - 1) // B``; ``n_anonymous`` = every block the request holds beyond them
  (the blocks decoding fills, and the last partial one); at release the blocks filled by decoding
  as extra (unique) block ids, which take the reserved slots.  The ``vllm`` cache is *the* prediction; the
  others say what another policy would have saved;
* :class:`replay.engine_model.BlockPoolModel`, vLLM's block pool (the connector's
  ``VllmBlockPool``), as a cross-check.

Order: a request is admitted when it was sent and released when its stream ended; releases at
the same instant come first.  With one request at a time this is exactly the engine's order and
the prediction must equal the measurement for every request; with several in flight, admission
order and the time a decode block is allocated are approximations (see docs/replay.md).
Requests that never reached the engine (refused connection, HTTP error) are not replayed.  A
request that does not fit next to the running ones waits, first come first served, as in vLLM's
scheduler.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shadow.errors import ShadowError

from replay.engine_model import BlockPoolModel, EngineRequest, engine_request, unique_keys
from replay.results import RequestResult

if TYPE_CHECKING:
    from shadow.sim.cost import CostModel

logger = logging.getLogger(__name__)

DEFAULT_POLICIES = ("lru", "fifo", "clock", "sieve", "s3fifo", "twoq", "arc", "slru", "lfu", "gdsf")


@dataclass
class Prediction:
    policies: list[str]  # cache order of the per-request lists; "vllm" first
    block_size: int
    capacity_blocks: int
    # per request seq -> per policy predicted cached tokens
    cached: dict[int, dict[str, int]] = field(default_factory=dict)
    model_cached: dict[int, int] = field(default_factory=dict)  # BlockPoolModel
    skipped_policies: dict[str, str] = field(default_factory=dict)
    result_lines: list[str] = field(default_factory=list)


def bound_cost(cost_model: "str | CostModel", block_size: int) -> "CostModel":
    """The cost model parsed (once) and bound to the engine's block size (a ``profile:``'s
    block costs need it; :meth:`shadow.sim.cost.CostModel.for_block_size`)."""
    from shadow.sim.cost import CostModel, parse_cost_model

    cost = cost_model if isinstance(cost_model, CostModel) else parse_cost_model(cost_model)
    return cost.for_block_size(block_size)


def _make_simulator(policies: list[str], capacity: int, cost_model: "str | CostModel"):
    from shadow.sim import CacheSpec, Simulator, list_policies

    available = set(list_policies())
    specs, used, skipped = [], [], {}
    for name in policies:
        if name not in available:
            skipped[name] = "not a policy"
            continue
        try:
            sim = Simulator([CacheSpec(name, capacity)], cost_model=cost_model, pin=True)
            if sim.needs_next_access:
                # NOTE: an oracle reads next-access times, which a live replay does not have
                skipped[name] = "an oracle: needs next-access times, which a live replay lacks"
                continue
            del sim
        except ShadowError as exc:
            skipped[name] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a policy that cannot run live is skipped, said why
            skipped[name] = f"{type(exc).__name__}: {exc}"
            continue
        specs.append(CacheSpec(name, capacity))
        used.append(name)
    if "vllm" not in used:
        why = skipped.get("vllm", "not available")
        raise ShadowError(f"the simulator's vllm policy cannot run: {why}")
    return Simulator(specs, cost_model=cost_model, pin=True, trace_name="replay"), used, skipped


def engine_order(results: list[RequestResult]) -> list[tuple[float, int, RequestResult]]:
    """Admit/release events ``(time, kind, result)``; kind 0 = release, 1 = admit."""
    ev = []
    for r in results:
        if not r.reached_engine or r.sent_s is None:
            continue
        ev.append((r.sent_s, 1, r))
        ev.append((r.end_s if r.end_s is not None else r.sent_s, 0, r))
    ev.sort(key=lambda e: (e[0], e[1], e[2].seq))
    return ev


def predict(results: list[RequestResult], *, tokens_per_block: int, block_size: int,
            num_gpu_blocks: int, policies: list[str] | None = None,
            cost_model: "str | CostModel" = "uniform",
            use_simulator: bool = True) -> Prediction:
    if num_gpu_blocks < 2:
        raise ShadowError(f"bad engine capacity {num_gpu_blocks} blocks")
    if tokens_per_block % block_size:
        raise ShadowError(f"tokens per block {tokens_per_block} is not a multiple of the engine's "
                          f"block size {block_size}")
    capacity = num_gpu_blocks - 1
    wanted = ["vllm"] + [p for p in (policies if policies is not None else DEFAULT_POLICIES)
                         if p != "vllm"]
    pred = Prediction(policies=[], block_size=block_size, capacity_blocks=capacity)
    cost_model = bound_cost(cost_model, block_size)
    sim = None
    if use_simulator:
        sim, pred.policies, pred.skipped_policies = _make_simulator(wanted, capacity, cost_model)
    model = BlockPoolModel(num_gpu_blocks, block_size)
    fresh = unique_keys()
    reqs: dict[int, EngineRequest] = {}
    adms: dict[int, Any] = {}
    waiting: deque[tuple[RequestResult, EngineRequest]] = deque()

    def do_admit(r: RequestResult, er: EngineRequest, t: float) -> None:
        reqs[r.seq] = er
        pred.model_cached[r.seq] = model.admit(r.seq, er) * block_size
        if sim is not None:
            # NOTE: the anonymous reservation covers every block the request will hold beyond its
            # prompt (decode blocks and the last partial one): the engine allocates them while
            # the request runs, so they must evict before release; release drops the
            # reservation and the decode blocks take its slots without further eviction.
            adm = sim.admit(list(er.prompt_keys), n_match=er.max_hit,
                            n_anonymous=len(er.gen_keys) + er.n_partial, timestamp_s=float(t))
            adms[r.seq] = adm
            pred.cached[r.seq] = {p: int(h) * block_size for p, h in zip(pred.policies, adm.prefix_hits)}

    def do_release(r: RequestResult) -> None:
        er = reqs.pop(r.seq)
        model.release(r.seq)
        if sim is not None:
            sim.release(adms.pop(r.seq), extra_block_ids=list(er.gen_keys))

    for t, kind, r in engine_order(results):
        if kind == 1:
            out = r.output_tokens if r.output_tokens else r.max_tokens
            er = engine_request(r.blocks, r.tail, tokens_per_block, block_size, out, fresh)
            if len(er.prompt_keys) + len(er.gen_keys) + er.n_partial > capacity:
                logger.warning("request %d needs more blocks than the cache holds; not predicted", r.seq)
                continue
            # NOTE: like vLLM's FIFO scheduler, a request that does not fit waits (and so does
            # every later one) until running requests free their blocks.
            if waiting or not model.fits(er):
                waiting.append((r, er))
            else:
                do_admit(r, er, t)
        else:
            if r.seq in reqs:
                do_release(r)
            else:
                late = next((w for w in waiting if w[0].seq == r.seq), None)
                if late is None:
                    continue
                waiting.remove(late)
                if model.fits(late[1]):  # finished before the model found room: admit it now
                    do_admit(late[0], late[1], t)
                    do_release(late[0])
                else:
                    logger.warning("request %d never found room in the predicted cache; not predicted",
                                   r.seq)
            while waiting and model.fits(waiting[0][1]):
                w = waiting.popleft()
                do_admit(w[0], w[1], t)
    if sim is not None:
        try:
            pred.result_lines = [res.result_line() for res in sim.results()]
        except Exception as exc:  # noqa: BLE001 - the RESULT lines are a bonus, not the prediction
            logger.info("no RESULT lines from the simulator: %s", exc)
    return pred


def _recording_batches(path: str):
    """The batches of a connector recording: one lcp file (``shadow convert``'s join), or a
    directory of the connector's segments (``.partial`` ones read up to their last flush)."""
    import os

    from shadow.trace.segments import list_segments
    from shadow.trace import open_trace

    paths = list_segments(path) if os.path.isdir(path) else [path]
    if not paths:
        raise ShadowError(f"{path}: no recording segments in this directory")
    batches, block_size = [], 0
    for p in paths:
        with open_trace(p, allow_truncated=p.endswith(".partial")) as tr:
            b = tr.header.block_size_tokens
            if block_size and b != block_size:
                raise ShadowError(f"{p}: block size {b} differs from the first segment's "
                                  f"{block_size}")
            block_size = b
            batches.extend(tr)
    return batches, block_size


def predict_recorded(results: list[RequestResult], recording: str, *, block_size: int,
                     num_gpu_blocks: int, policies: list[str] | None = None,
                     cost_model: "str | CostModel" = "uniform") -> Prediction:
    """The prediction from the engine's own recording (the ShadowConnector's, ``record_dir``),
    served with ``shadow simulate --timing recorded`` (:mod:`shadow.sim.timing.run`): every
    admission and release in the engine's order, as the connector stamped them, queueing and
    preemptions included.  For a replay that ran requests concurrently this replaces the
    send-order approximation of :func:`predict`.

    The recording names no request: a replayed request (in send order) takes the earliest
    admission not yet taken (in the recording's start order) whose ``input_length`` is its prompt
    length; a re-admission after a preemption (its input holds the output so far) or a
    ``preempted`` record of another request is passed over the same way.  A request with no such
    admission (the recording started later, another client's traffic) is not predicted.
    """
    import numpy as np

    from shadow.sim import CacheSpec, Simulator, list_policies
    from shadow.sim.registry import policy_info
    from shadow.sim.timing.run import run_trace_recorded

    batches, rec_block = _recording_batches(recording)
    if rec_block != block_size:
        raise ShadowError(f"{recording}: the recording's block size is {rec_block} tokens, the "
                          f"engine's {block_size}")
    if num_gpu_blocks < 2:
        raise ShadowError(f"bad engine capacity {num_gpu_blocks} blocks")
    capacity = num_gpu_blocks - 1
    wanted = ["vllm"] + [p for p in (policies if policies is not None else DEFAULT_POLICIES)
                         if p != "vllm"]
    pred = Prediction(policies=[], block_size=block_size, capacity_blocks=capacity)
    available = set(list_policies())
    for name in wanted:
        if name not in available:
            pred.skipped_policies[name] = "not a policy"
        elif policy_info(name).needs_next_access:
            pred.skipped_policies[name] = "an oracle: needs next-access times in file order"
        else:
            pred.policies.append(name)
    sim = Simulator([CacheSpec(p, capacity) for p in pred.policies], cost_model=cost_model,
                    lookup="vllm", block_size_tokens=block_size, trace_name=str(recording))
    n = sum(b.n_requests for b in batches)
    hits = np.zeros((n, len(pred.policies)), dtype=np.int64)
    run_trace_recorded(sim, batches, recording, block_size, prefix_hits=hits)
    start = np.concatenate([b.records["start_time_us"] for b in batches]) if n else np.zeros(0)
    inp = np.concatenate([b.records["input_length"] for b in batches]) if n else np.zeros(0)
    free: dict[int, deque[int]] = {}
    for j in np.argsort(start, kind="stable").tolist():
        free.setdefault(int(inp[j]), deque()).append(j)
    sent = sorted((r for r in results if r.reached_engine and r.sent_s is not None),
                  key=lambda r: (r.sent_s, r.seq))
    for r in sent:
        n_prompt = r.prompt_tokens_reported or r.prompt_tokens
        q = free.get(int(n_prompt))
        if not q:
            logger.warning("request %d: no admission of %d prompt tokens in the recording; not "
                           "predicted", r.seq, n_prompt)
            continue
        j = q.popleft()
        pred.cached[r.seq] = {p: max(int(h), 0) * block_size
                              for p, h in zip(pred.policies, hits[j])}
    pred.result_lines = [res.result_line() for res in sim.results()]
    return pred
