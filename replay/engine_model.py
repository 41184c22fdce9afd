"""What one replayed request is, in the engine's blocks, and a direct model of vLLM's block pool.

:func:`engine_request` turns a measured request (trace ids of its full blocks, request-keyed tail
tokens, output tokens generated) into the engine's view at block size B (``k = T // B`` engine
blocks per trace block):

* ``prompt_keys``: one key per full engine block of the prompt.  Trace block ``b`` gives keys
  ``b*k + 1 .. b*k + k`` (equal trace ids, equal keys, equal engine hashes); full engine blocks of
  the request-keyed tail get fresh unique keys (they are cached but nobody shares them).
* ``max_hit``: ``(N - 1) // B``; vLLM recomputes the last prompt token, so a hit is at most that
  many blocks, and it stops at the first miss.
* ``gen_keys``: fresh unique keys for the blocks that fill up while decoding.  The engine holds
  ``N + O - 1`` tokens of KV at the end (the last sampled token is never fed back), so
  ``(N + O - 1) // B - N // B`` more blocks are cached; they only take capacity, since no later
  prompt contains generated tokens.
* ``n_partial``: 1 if ``(N + O - 1) % B`` (the last, partial block: held, never cached), else 0.

:class:`BlockPoolModel` replays such requests through vLLM's block pool as
:class:`shadow.sim.engine.pool.VllmBlockPool` models it (the live connector's ``vllm`` caches,
tested against the engine after every step): duplicate physical copies of one hash included.
It is the cross-check for the simulator's ``vllm`` policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import Iterator

from shadow.sim.engine.pool import VllmBlockPool
from shadow.sim.engine.rules import computed_tokens, full_blocks, max_hit_blocks, partial_tail_blocks

UNIQUE_BASE = 1 << 52  # above every trace-derived key: b*k + j for trace ids < 2**40


@dataclass(frozen=True)
class EngineRequest:
    prompt_keys: tuple[int, ...]
    max_hit: int
    gen_keys: tuple[int, ...]
    n_partial: int
    prompt_tokens: int
    block_size: int


def unique_keys(start: int = UNIQUE_BASE) -> Iterator[int]:
    return count(start)


def engine_request(blocks: list[int] | tuple[int, ...], tail: int, tokens_per_block: int,
                   block_size: int, output_tokens: int, fresh: Iterator[int]) -> EngineRequest:
    """The engine-block view of one request (see the module docstring)."""
    k = tokens_per_block // block_size
    keys = [b * k + j + 1 for b in blocks for j in range(k)]
    keys.extend(next(fresh) for _ in range(tail // block_size))
    n = len(blocks) * tokens_per_block + tail
    kv = computed_tokens(n, max(1, output_tokens))
    n_gen = full_blocks(kv, block_size) - full_blocks(n, block_size)
    return EngineRequest(prompt_keys=tuple(keys), max_hit=max_hit_blocks(n, block_size),
                         gen_keys=tuple(next(fresh) for _ in range(n_gen)),
                         n_partial=partial_tail_blocks(kv, full_blocks(kv, block_size),
                                                       block_size),
                         prompt_tokens=n, block_size=block_size)


class BlockPoolModel:
    """vLLM's block pool with ``num_blocks - 1`` usable blocks, for whole replayed requests.

    A thin adapter over :class:`shadow.sim.engine.pool.VllmBlockPool`, the pool the live connector
    runs and tests against the engine step by step: a request is admitted with its prompt (the
    lookup stops at the first miss, at most ``max_hit`` blocks), then grows to the tokens the
    engine computes (its generated blocks cached, the last partial block held), and is freed
    tail first at release.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.capacity = num_blocks - 1
        self.block_size = block_size
        self.pool = VllmBlockPool(self.capacity, block_size)

    def _end_tokens(self, req: EngineRequest) -> int:
        n_full = len(req.prompt_keys) + len(req.gen_keys)
        return n_full * self.block_size + (1 if req.n_partial else 0)

    def fits(self, req: EngineRequest) -> bool:
        """Whether the free queue holds every block the request needs beyond its hit."""
        return self.pool.fits(list(req.prompt_keys), req.prompt_tokens, self._end_tokens(req))

    def admit(self, rid: int, req: EngineRequest) -> int:
        """Look up, touch and allocate; return the hit in blocks (first miss stops)."""
        ids = list(req.prompt_keys)
        res = self.pool.admit(rid, ids, req.prompt_tokens, req.prompt_tokens)
        if res is None:
            raise RuntimeError("block pool exhausted: admit only requests that fit")
        ids.extend(req.gen_keys)
        if not self.pool.grow(rid, self._end_tokens(req)):
            raise RuntimeError("block pool exhausted: admit only requests that fit")
        return res[2]

    def release(self, rid: int) -> None:
        """Free tail first: unhashed to the head (reused first), hashed to the tail (LRU)."""
        self.pool.free(rid)

    @property
    def evictions(self) -> int:
        return self.pool.n_eviction

    def n_cached(self) -> int:
        return sum(self.pool.copies().values())
