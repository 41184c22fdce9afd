"""vLLM's block rules, in one place: how many blocks a request looks up, holds and caches.

Every rule takes token counts and the block size ``B`` (ints or numpy integer arrays alike) and
states vLLM 0.32's behaviour (``vllm/v1/core/kv_cache_manager.py``,
``single_type_kv_cache_manager.py``).  The connector, the offline ``--lookup vllm`` mode, the
replay harness's engine model and the block pool (``vllm_pool.pyx``, which inlines the same
arithmetic in C) all follow them.
"""

from __future__ import annotations


def max_hit_blocks(num_tokens, block_size):
    """Blocks a prefix-cache lookup may return: ``(N - 1) // B``.

    NOTE: vLLM always recomputes the last prompt token (``max_cache_hit_length = num_tokens -
    1``) and hits are whole blocks, so a fully cached prompt of exactly k blocks reuses k - 1.
    """
    n = num_tokens - 1
    return (n * (n > 0)) // block_size


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
