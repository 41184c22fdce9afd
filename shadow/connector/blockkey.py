"""Block keys: one identity for vLLM's blocks across a fleet, with no tokens or vLLM hashes in
the recording.

vLLM 0.32 hashes block ``j`` of a request (``vllm/v1/core/kv_cache_utils.py``:
``request_block_hasher``, ``hash_block_tokens``) as

    hash_j = H((hash_{j-1} or NONE_HASH, tuple(tokens_j), extra_keys_j))

with ``tokens_j = all_token_ids[j*B:(j+1)*B]`` (B the hash block size),
``extra_keys_j = generate_block_hash_extra_keys(request, j*B, (j+1)*B, ...)`` (the LoRA name and
path, the multimodal items overlapping the block with their offsets, the cache salt on block 0,
digests of prompt embeddings) and ``H`` the configured algorithm (sha256, xxhash, ...).
``NONE_HASH`` comes from ``PYTHONHASHSEED`` when it is set (else a fixed seed for sha256, a random
one for xxhash), so two replicas agree on hashes only when configured alike.

A block key is the same chain over the same three parts with ``H`` replaced by BLAKE2b keyed
with the fleet's key (``kv_connector_extra_config.fleet_key``):

    key_j = BLAKE2b-64_K(key_{j-1} as 8 bytes LE, 0 for block 0 || u32 n || n tokens as u32 LE
                         || canonical(extra_keys_j)) >> 1        (0 -> 1)

Invariant: under one fleet key, two blocks have one key exactly when vLLM, with one hash seed
and algorithm on every replica, would give them one hash (up to 63-bit collisions: about
n**2 / 2**64 over n distinct blocks); nothing about the tokens can be learnt from keys without
the fleet key.  ``canonical`` encodes vLLM's extra keys (tuples of str, int, bytes, None, ...)
unambiguously and independently of ``PYTHONHASHSEED`` (:func:`canonical`).

Keys are computed once per interned block id (:class:`BlockKeys` with the id table's memo), on
the worker thread, from references to the request's own token list: nothing is copied on the
scheduler's thread.  A block whose tokens cannot be read (an event without its request) gets a
key private to this process (:func:`private_keys`), which equals no other recording's.

This module imports no vLLM: the connector hands it vLLM's extra-keys function.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

#: BLAKE2b's personalisation of the derived fleet key (at most 16 bytes).
_PERSON = b"shadow-fleet-key"
_KEY_MASK = (1 << 63) - 1


def derive_key(secret: str | bytes) -> bytes:
    """The 32-byte BLAKE2b key of a fleet secret (any length)."""
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    return hashlib.blake2b(raw, digest_size=32, person=_PERSON).digest()


def random_key() -> bytes:
    """A key private to this process (no fleet key configured: keys merge with no other
    recording's)."""
    return os.urandom(32)


def canonical(value: Any) -> bytes:
    """An unambiguous byte encoding of vLLM's extra keys (nested tuples of str, bytes, int,
    float, bool and None); raises TypeError for anything else."""
    out = bytearray()
    _encode(value, out)
    return bytes(out)


def _encode(v: Any, out: bytearray) -> None:
    if v is None:
        out += b"N"
    elif v is True or v is False:
        out += b"T" if v else b"F"
    elif isinstance(v, int):
        s = str(int(v)).encode()
        out += b"i%d:" % len(s) + s
    elif isinstance(v, str):
        b = v.encode("utf-8", "surrogatepass")
        out += b"s%d:" % len(b) + b
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        out += b"b%d:" % len(b) + b
    elif isinstance(v, float):
        s = v.hex().encode()
        out += b"f%d:" % len(s) + s
    elif isinstance(v, (tuple, list)):
        out += b"(%d:" % len(v)
        for x in v:
            _encode(x, out)
        out += b")"
    else:
        raise TypeError(f"a block hash extra key of type {type(v).__name__} ({v!r:.60})")


def block_key(key: bytes, parent: int, tokens: Sequence[int], extra: Any) -> int:
    """The key of one block: its parent's key (0 for block 0), its tokens, vLLM's extra keys."""
    h = hashlib.blake2b(digest_size=8, key=key)
    n = len(tokens)
    h.update(struct.pack(f"<QI{n}I", parent, n, *tokens))
    if extra is not None:
        h.update(canonical(extra))
    k = int.from_bytes(h.digest(), "little") >> 1
    return k or 1


def private_keys(key: bytes, salt: bytes, ids: Sequence[int]) -> list[int]:
    """Keys for blocks whose tokens are unknown: a function of (``salt``, id) only, so they
    match nothing another process writes."""
    out = []
    for i in ids:
        h = hashlib.blake2b(salt + int(i).to_bytes(8, "little"), digest_size=8, key=key)
        out.append((int.from_bytes(h.digest(), "little") >> 1) or 1)
    return out


class BlockKeys:
    """Block keys of recorded requests, memoised per block id (the id table's ``keys``).

    ``extra_keys(request, start, end)`` is vLLM's ``generate_block_hash_extra_keys`` for the
    tokens ``start:end`` (the connector passes it; None: no extra keys).
    """

    def __init__(self, key: bytes, block_size: int,
                 extra_keys: Callable[[Any, int, int], Any] | None = None) -> None:
        self.key = key
        self.block_size = int(block_size)
        self.extra_keys = extra_keys
        self.salt = os.urandom(16)
        self.n_computed = 0     # keys computed from tokens
        self.n_private = 0      # keys given without tokens

    def of_request(self, request: Any, ids: Sequence[int],
                   memo: MutableMapping[int, int]) -> list[int]:
        """The keys of ``ids``, blocks 0.. of ``request`` in order (computed where the memo has
        none, and remembered there)."""
        out: list[int] = []
        get = memo.get
        parent = 0
        tokens = None
        b = self.block_size
        for j, i in enumerate(ids):
            k = get(i)
            if k is None:
                if tokens is None:
                    tokens = getattr(request, "all_token_ids", None) if request is not None \
                        else None
                    if tokens is None:
                        return self._private(ids, out, memo)
                toks = tokens[j * b:(j + 1) * b]
                if len(toks) != b:
                    return self._private(ids, out, memo)
                extra = (self.extra_keys(request, j * b, (j + 1) * b)
                         if self.extra_keys is not None else None)
                k = block_key(self.key, parent, toks, extra)
                memo[i] = k
                self.n_computed += 1
            out.append(k)
            parent = k
        return out

    def _private(self, ids: Sequence[int], done: list[int],
                 memo: MutableMapping[int, int]) -> list[int]:
        rest = ids[len(done):]
        keys = private_keys(self.key, self.salt, rest)
        self.n_private += len(keys)
        return done + keys
