"""A synthetic multi-turn trace with sessions, types and turns (``shadow synth``).

Deterministic from a seed, made of nothing but random numbers (licence-clean), written as lcp in
the live recorder's shape: per request its prompt's full blocks, then the full blocks of its
generated tokens (``floor((input_length + output_length - 1) / B)`` blocks in all: vLLM caches
the computed tokens, never the last sampled one).

What it models (docs/trace.md "Synth" gives the defaults):

* **Request types** (:data:`TYPES`): chat, code, agent, rag.  Each has a few system prompts
  (variants, drawn 8:4:2:1) shared by every session of the type: the cross-session reuse.
* **Sessions** arrive as a Poisson process (``rate`` per second) and pick a type by its weight.
  A session has a geometric number of turns (>= 1, the type's mean).  Turn 1's prompt is the system prompt
  and a user message; turn t's prompt is turn t-1's prompt, its output and a new user message
  (the conversation continues its history: the within-session reuse).  User messages and
  outputs are log-normal in tokens (the type's medians, sigma 0.8); an output is at least one
  block, so every request has a block of its own.
* **Branches**: from turn 3 on, with probability ``branch`` a turn edits the previous message:
  it continues turn t-2's history instead (two continuations of one history).
* **Context limit**: a prompt longer than ``max_context`` tokens keeps the system prompt and
  the most recent history that fits (a sliding window): its blocks past the system prompt are
  new, so it no longer continues its parent's prefix (prefix inference starts a new session
  there; the trace's own ``session_id`` does not).
* **Times**: a turn arrives a think time (exponential, the type's mean) after the previous turn
  completed, and runs ``0.05 s + input / 20,000 tok/s + output / 50 tok/s``; sessions
  interleave.  Records are sorted by completion time, like every converted trace.

Ground truth in the records: ``session_id`` (1-based, in session arrival order), ``turn`` (the
parent's + 1: the depth in the conversation, so a branch has its sibling's turn),
``type_id``, ``chat_id`` (1-based, in generation order) and ``parent_chat_id`` (the request
whose history the turn continues, -1 for turn 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from shadow.trace.annotate import TraceArrays, annotate
from shadow.trace.format import empty_records


@dataclass(frozen=True)
class RequestType:
    """One request type's shape (tokens and seconds)."""

    name: str
    weight: float
    system_tokens: tuple[int, ...]   # one system prompt per variant
    mean_turns: float
    user_median: int
    output_median: int
    think_s: float


#: The modelled types: the source of truth for the docs table and the tests.
TYPES: tuple[RequestType, ...] = (
    RequestType("chat", 0.45, (600, 900, 1200, 450), 4.0, 60, 250, 30.0),
    RequestType("code", 0.20, (2000, 2600), 3.0, 300, 400, 45.0),
    RequestType("agent", 0.15, (3000, 4500), 8.0, 250, 120, 3.0),
    RequestType("rag", 0.20, (1000, 1400), 2.0, 1800, 200, 40.0),
)
VARIANT_WEIGHTS = (8, 4, 2, 1)
SIGMA = 0.8
MAX_MESSAGE = 16384


@dataclass(frozen=True)
class SynthParams:
    """Everything the trace depends on (with the seed, the whole of it)."""

    seed: int = 0
    sessions: int = 400
    block_size: int = 16
    rate: float = 2.0
    branch: float = 0.05
    max_context: int = 16384


def _lognormal(rng: np.random.Generator, median: int, lo: int) -> int:
    return int(min(max(round(median * math.exp(SIGMA * rng.standard_normal())), lo), MAX_MESSAGE))


def generate(p: SynthParams) -> tuple[TraceArrays, dict[str, Any]]:
    """The annotated trace and a summary (counts of requests, branches, truncated prompts)."""
    if p.block_size < 1 or p.sessions < 0 or p.rate <= 0 or not 0 <= p.branch <= 1:
        raise ValueError("bad synth parameters")
    rng = np.random.default_rng(p.seed)
    B = p.block_size
    next_id = 1
    # system prompt blocks, per (type, variant): full blocks only; shared by every session
    sys_ids: list[list[list[int]]] = []
    for t in TYPES:
        per = []
        for s in t.system_tokens:
            per.append(list(range(next_id, next_id + s // B)))
            next_id += s // B
        sys_ids.append(per)
    if p.max_context <= max(s for t in TYPES for s in t.system_tokens) + 2 * B:
        raise ValueError("max_context must exceed the longest system prompt by two blocks")
    weights = np.array([t.weight for t in TYPES])
    weights /= weights.sum()
    vweights = np.array(VARIANT_WEIGHTS, dtype=float)
    rows: list[tuple] = []   # (start, complete, chat, parent, session, input, output, turn, type)
    blocks: list[list[int]] = []
    n_branch = n_trunc = 0
    arrival = 0.0
    chat = 0
    for sess in range(1, p.sessions + 1):
        arrival += rng.exponential(1.0 / p.rate)
        ti = int(rng.choice(len(TYPES), p=weights))
        t = TYPES[ti]
        nv = len(t.system_tokens)
        v = int(rng.choice(nv, p=vweights[:nv] / vweights[:nv].sum()))
        S = t.system_tokens[v]
        n_turns = int(rng.geometric(min(1.0, 1.0 / t.mean_turns)))
        # history after each request: (full block ids, tokens, chat id, turn)
        hist: list[tuple[list[int], int, int, int]] = [(list(sys_ids[ti][v]), S, -1, 0)]
        now = arrival
        for k in range(1, n_turns + 1):
            base = hist[-1]
            if k >= 3 and rng.random() < p.branch:
                base = hist[-2]
                n_branch += 1
            ids, L, parent, turn = list(base[0]), base[1], base[2], base[3] + 1
            u = _lognormal(rng, t.user_median, 1)
            o = _lognormal(rng, t.output_median, B)
            if L + u > p.max_context:
                # NOTE: keep the system prompt and the newest history: everything after the
                # system prompt shifts, so every block past it is new content
                n_trunc += 1
                L = max(S, p.max_context - u - (p.max_context - S) // 4)
                ids = list(sys_ids[ti][v])
            prompt = L + u
            total = prompt + o
            n_full = total // B
            if n_full > len(ids):
                ids.extend(range(next_id, next_id + n_full - len(ids)))
                next_id = int(ids[-1]) + 1
            chat += 1
            n_rec = (total - 1) // B
            start = now
            done = start + 0.05 + prompt / 20000.0 + o / 50.0
            rows.append((round(start * 1e6), round(done * 1e6), chat, parent, sess, prompt, o,
                         turn, ti + 1))
            blocks.append(ids[:n_rec])
            hist.append((ids, total, chat, turn))
            now = done + rng.exponential(t.think_s)
    n = len(rows)
    rec = empty_records(n)
    if n:
        cols = list(zip(*rows))
        for f, c in zip(("start_time_us", "complete_time_us", "chat_id", "parent_chat_id",
                         "session_id", "input_length", "output_length", "turn", "type_id"), cols):
            rec[f] = c
    lengths = np.fromiter((len(b) for b in blocks), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((i for b in blocks for i in b), dtype=np.int64, count=int(offsets[-1]))
    rec["n_blocks"] = lengths
    trace = TraceArrays(rec, offsets, flat, None, [t.name for t in TYPES], B)
    annotate(trace)
    summary = {"n_requests": n, "n_sessions": p.sessions, "n_block_accesses": trace.n_entries,
               "n_branches": n_branch, "n_truncated": n_trunc}
    return trace, summary


def write_synth(path: str, p: SynthParams, *, level: int = 1) -> dict[str, Any]:
    """Generate and write the trace (atomically, like ``shadow convert``); the summary."""
    from shadow import __version__
    from shadow.trace.convert import output_kind, write_lcp

    kind = output_kind(path)
    if kind == "jsonl":
        raise ValueError("shadow synth writes lcp (.lcp or .lcp.zst)")
    trace, summary = generate(p)
    producer = (f"shadow {__version__} synth seed={p.seed} sessions={p.sessions}"
                f" block-size={p.block_size} rate={p.rate} branch={p.branch}"
                f" max-context={p.max_context}")
    header = write_lcp(trace, path, producer=producer, compress=kind == "lcp.zst", level=level)
    summary["n_unique_blocks"] = header.n_unique_blocks
    summary["output"] = path
    return summary
