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

:class:`BlockPoolModel` replays such requests through a plain-Python copy of vLLM's ``BlockPool``
behaviour (0.27+): a free queue whose head is reused first, lazy eviction when a cached block is
reallocated, hits ``touch`` blocks out of the queue, a finished request frees its blocks tail first
with unhashed blocks prepended at the head and hashed ones appended at the tail, and duplicate
physical copies of one hash allowed.  It is the cross-check for the simulator's ``vllm`` policy.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from itertools import count
from typing import Iterator

from shadow.sim.vllm_rules import computed_tokens, full_blocks, max_hit_blocks, partial_tail_blocks

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
    """vLLM's block pool with ``num_blocks - 1`` usable blocks (block 0 is the null block)."""

    def __init__(self, num_blocks: int) -> None:
        self.capacity = num_blocks - 1
        self.free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.key_of: list[int | None] = [None] * num_blocks
        self.by_key: dict[int, dict[int, None]] = {}
        self.evictions = 0
        self.held: dict[int, list[int]] = {}

    def _pop(self) -> int:
        if not self.free:
            raise RuntimeError("block pool exhausted: a request larger than the cache")
        blk, _ = self.free.popitem(last=False)
        key = self.key_of[blk]
        if key is not None:  # lazy eviction: a cached block is dropped only when reused
            copies = self.by_key[key]
            del copies[blk]
            if not copies:
                del self.by_key[key]
            self.key_of[blk] = None
            self.evictions += 1
        self.ref[blk] = 1
        return blk

    def _cache(self, blk: int, key: int) -> None:
        self.key_of[blk] = key
        self.by_key.setdefault(key, {})[blk] = None

    def lookup(self, req: EngineRequest) -> list[int]:
        """The blocks a lookup would hit (read-only): first miss stops, at most ``max_hit``."""
        hit_blocks = []
        for key in req.prompt_keys[:req.max_hit]:
            copies = self.by_key.get(key)
            if not copies:
                break
            hit_blocks.append(next(iter(copies)))
        return hit_blocks

    def fits(self, req: EngineRequest) -> bool:
        """Whether the free queue holds every block the request needs beyond its hit."""
        hit = self.lookup(req)
        free_after_touch = len(self.free) - sum(1 for b in hit if self.ref[b] == 0)
        need = len(req.prompt_keys) - len(hit) + len(req.gen_keys) + req.n_partial
        return need <= free_after_touch

    def admit(self, rid: int, req: EngineRequest) -> int:
        """Look up, touch and allocate; return the hit in blocks (first miss stops)."""
        hit_blocks = self.lookup(req)
        for blk in hit_blocks:  # touch
            if self.ref[blk] == 0:
                del self.free[blk]
            self.ref[blk] += 1
        blocks = list(hit_blocks)
        for key in req.prompt_keys[len(hit_blocks):]:
            blk = self._pop()
            self._cache(blk, key)  # NOTE: a duplicate copy when the key is already cached
            blocks.append(blk)
        for key in req.gen_keys:
            blk = self._pop()
            self._cache(blk, key)
            blocks.append(blk)
        for _ in range(req.n_partial):
            blocks.append(self._pop())
        self.held[rid] = blocks
        return len(hit_blocks)

    def release(self, rid: int) -> None:
        """Free tail first: unhashed to the head (reused first), hashed to the tail (LRU)."""
        first, last = [], []
        for blk in reversed(self.held.pop(rid)):
            self.ref[blk] -= 1
            if self.ref[blk] == 0:
                (first if self.key_of[blk] is None else last).append(blk)
        for blk in reversed(first):
            self.free[blk] = None
            self.free.move_to_end(blk, last=False)
        for blk in last:
            self.free[blk] = None

    def n_cached(self) -> int:
        return sum(1 for k in self.key_of if k is not None)
