"""vLLM's block rules, in one place: how many blocks a request looks up, holds and caches.

Every rule takes token counts and the block size ``B`` (ints or numpy integer arrays alike) and
states vLLM 0.32's behaviour (``vllm/v1/core/kv_cache_manager.py``,
``single_type_kv_cache_manager.py``).  The connector, the offline ``--lookup vllm`` mode, the
replay harness's engine model and the block pool (``engine/pool.pyx``, which inlines the same
arithmetic in C) all follow them.
"""

from __future__ import annotations

import numpy as np


def max_hit_blocks(num_tokens, block_size):
    """Blocks a prefix-cache lookup may return: ``(N - 1) // B``.

    NOTE: vLLM always recomputes the last prompt token (``max_cache_hit_length = num_tokens -
    1``) and hits are whole blocks, so a fully cached prompt of exactly k blocks reuses k - 1.
    """
    n = num_tokens - 1
    return (n * (n > 0)) // block_size


def prefill_cached_tokens(num_tokens, hit_blocks, block_size):
    """Tokens a prefill of ``N`` prompt tokens skips with ``h`` first-miss hit blocks:
    ``min(h * B, N - 1)`` (0 for a prompt of at most one token); it computes the rest.

    NOTE: vLLM always computes the last prompt token (its logits give the first output token), so
    even a prompt whose every block is resident computes one; under ``--lookup vllm`` the hit is
    at most ``(N - 1) // B`` blocks (:func:`max_hit_blocks`) and the cap never binds, under
    ``--lookup all`` a trace's partial last block (or a recording's generated blocks) may count
    as hit beyond the prompt and the cap keeps the prefill to the prompt's tokens.
    """
    return np.minimum(hit_blocks * block_size, np.maximum(num_tokens - 1, 0))


def full_blocks(num_tokens, block_size):
    """Blocks completely filled by ``num_tokens`` tokens (the hashed ones): ``N // B``."""
    return num_tokens // block_size


def blocks_held(num_tokens, block_size):
    """Blocks holding ``num_tokens`` tokens: ``ceil(N / B)`` (``allocate_slots``)."""
    return -(-num_tokens // block_size)


def partial_tail_blocks(num_computed_tokens, n_full_blocks, block_size):
    """Blocks vLLM holds for a finished request beyond its ``n_full_blocks`` hashed ones (0/1 for
    a recording).

    NOTE: ``allocate_slots`` covers the tokens a step computes; the last sampled token is never
    computed, so a request ends holding ``ceil(num_computed_tokens / B)`` blocks.  For a recorded
    request ``num_computed_tokens = input_length + output_length - 1``.
    """
    extra = blocks_held(num_computed_tokens, block_size) - n_full_blocks
    return extra * (extra > 0)


def computed_tokens(input_length, output_length):
    """Tokens vLLM computed for a finished request: the last sampled one never is."""
    return input_length + output_length - 1


#: ``lookup`` modes: which of a request's blocks are looked up (counted in the statistics).
LOOKUP_MODES = ("all", "prompt", "vllm")


def lookup_counts(records: np.ndarray, n_blocks: np.ndarray, mode: str, block_size: int) -> np.ndarray | None:
    """Per request, how many leading blocks are looked up; None for ``all`` (every block).

    A recorded request holds its prompt blocks and then its generated-token blocks;
    ``input_length`` says where the prompt ends.  ``prompt``: the prompt's full blocks,
    ``input_length // B``.  ``vllm``: ``(input_length - 1) // B``, since vLLM always recomputes the
    prompt's last token (a prompt of exactly k blocks can reuse only k - 1).  Capped at the
    request's block count and at 0.
    """
    if mode == "all":
        return None
    inp = records["input_length"].astype(np.int64)
    if mode == "prompt":
        k = full_blocks(inp, block_size)
    else:
        k = max_hit_blocks(inp, block_size)
    return np.ascontiguousarray(np.clip(k, 0, n_blocks), dtype=np.int64)


def vllm_anonymous_counts(records: np.ndarray, n_blocks: np.ndarray, block_size: int) -> np.ndarray:
    """Per request, the slots vLLM holds beyond the request's recorded blocks (``--lookup vllm``).

    vLLM allocates slots for the tokens it computes, ``input_length + output_length - 1`` of them
    (the last sampled token never is), so a request holds ``ceil(that / B)`` blocks; in a
    recording (full prompt blocks, then full generated blocks) that is one more than its blocks
    when the computed length is not a multiple of B: the final partial block, allocated
    (evicting when the cache is full) and freed unhashed.  Where a trace names fewer of the
    request's blocks (a converted trace without its output blocks) the others count the same way:
    room held while the request runs, nothing cached (:func:`partial_tail_blocks`).
    """
    inp = records["input_length"].astype(np.int64)
    out = np.maximum(records["output_length"].astype(np.int64), 1)
    return np.ascontiguousarray(partial_tail_blocks(computed_tokens(inp, out), n_blocks,
                                                    block_size), dtype=np.int64)
