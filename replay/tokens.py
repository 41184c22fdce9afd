"""Token synthesis: every trace block id becomes the same run of token ids on every run and machine.

A block's tokens are drawn by a keyed generator, SplitMix64 over ``(seed, domain, key, index)`` in
wrapping unsigned 64-bit arithmetic (numpy ``uint64``), so they depend on nothing but those four
numbers and the vocabulary: no Python ``hash``, no process state, no platform word size.  The
domains keep the streams apart:

* ``DOMAIN_BLOCK``: key = trace block id.  Equal ids give equal tokens, so the engine's own chained
  block hashes reproduce the trace's sharing exactly (a prefix-interned id names its whole prefix,
  so it always sits at the same depth behind the same parents).
* ``DOMAIN_TAIL``: key = the request's index in the trace.  The tokens after the last full trace
  block belong to one request only and never create false sharing.
* ``DOMAIN_PROFILE``: key = (grid point, repeat, part) of ``replay --measure-profile``
  (:mod:`replay.measure`): every prefix and suffix it sends is fresh.

Invariant: every id drawn lies in ``[lo, vocab_size)`` and is not a special token; the map from a
64-bit draw to an id is ``allowed[draw % len(allowed)]`` over the sorted allowed ids.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shadow.errors import ShadowError

logger = logging.getLogger(__name__)

DOMAIN_BLOCK = 0x426C6F636B  # "Block"
DOMAIN_TAIL = 0x5461696C  # "Tail"
DOMAIN_PROFILE = 0x50726F66  # "Prof"

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a ``uint64`` array (wrapping arithmetic, a bijection)."""
    with np.errstate(over="ignore"):
        z = x + _GAMMA
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        return z ^ (z >> _S31)


def _mix_key(seed: int, domain: int, keys: np.ndarray) -> np.ndarray:
    """One 64-bit stream key per (seed, domain, key)."""
    with np.errstate(over="ignore"):
        base = splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64) ^ np.uint64(domain))
        return splitmix64(base ^ splitmix64(keys.astype(np.uint64)))


@dataclass(frozen=True)
class Vocab:
    """The token ids a synthesized prompt may use: ``[lo, size)`` minus ``special``."""

    size: int
    special: tuple[int, ...] = ()
    lo: int = 0
    source: str = "given"
    allowed: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ShadowError(f"bad vocabulary size {self.size}: must be positive")
        ids = np.arange(max(self.lo, 0), self.size, dtype=np.int64)
        if self.special:
            ids = ids[~np.isin(ids, np.asarray(self.special, dtype=np.int64))]
        if ids.size < 2:
            raise ShadowError(
                f"vocabulary of {self.size} ids with {len(self.special)} special ids leaves "
                f"{ids.size} usable ids; need at least 2")
        object.__setattr__(self, "allowed", ids)

    def describe(self) -> str:
        return (f"vocab {self.size} ({self.source}), {len(self.special)} special ids excluded, "
                f"{self.allowed.size} usable")


class TokenSynth:
    """Keyed token generator: ``block_tokens(ids, n)`` and ``tail_tokens(request, n)``."""

    def __init__(self, vocab: Vocab, seed: int = 0) -> None:
        self.vocab = vocab
        self.seed = int(seed)
        self._allowed = vocab.allowed
        self._n = np.uint64(vocab.allowed.size)

    def _draw(self, domain: int, keys: np.ndarray, n: int) -> np.ndarray:
        """``len(keys) * n`` ids: row i is key i's stream, positions 0..n-1."""
        if n <= 0 or keys.size == 0:
            return np.zeros(0, dtype=np.int64)
        stream = _mix_key(self.seed, domain, np.asarray(keys, dtype=np.int64))
        idx = np.arange(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            raw = splitmix64(stream[:, None] + idx[None, :] * _GAMMA)
        return self._allowed[(raw % self._n).astype(np.int64)].reshape(-1)

    def block_tokens(self, block_ids: np.ndarray | list[int], tokens_per_block: int) -> np.ndarray:
        """The tokens of consecutive trace blocks, ``tokens_per_block`` each, concatenated."""
        return self._draw(DOMAIN_BLOCK, np.asarray(block_ids, dtype=np.int64), tokens_per_block)

    def tail_tokens(self, request_index: int, n: int) -> np.ndarray:
        """The ``n`` tokens after the last full block of request ``request_index``."""
        return self._draw(DOMAIN_TAIL, np.asarray([request_index], dtype=np.int64), n)

    def profile_tokens(self, key: int, n: int) -> list[int]:
        """``n`` tokens of ``--measure-profile``'s stream ``key`` (``DOMAIN_PROFILE``)."""
        return self._draw(DOMAIN_PROFILE, np.asarray([key], dtype=np.int64), n).tolist()

    def prompt(self, block_ids: np.ndarray | list[int], tokens_per_block: int,
               request_index: int, tail: int) -> list[int]:
        """A whole prompt as a list of ints (what the HTTP body carries)."""
        parts = self.block_tokens(block_ids, tokens_per_block)
        if tail > 0:
            parts = np.concatenate([parts, self.tail_tokens(request_index, tail)])
        return parts.tolist()


# --------------------------------------------------------------------------- vocabulary discovery

def _special_ids_from_files(model_dir: Path) -> set[int]:
    """Special token ids named by a Hugging Face tokenizer's files (tokenizer.json, tokenizer_config.json)."""
    special: set[int] = set()
    tok = model_dir / "tokenizer.json"
    if tok.is_file():
        data = json.loads(tok.read_text(encoding="utf-8"))
        for entry in data.get("added_tokens", []) or []:
            if entry.get("special", False) and isinstance(entry.get("id"), int):
                special.add(int(entry["id"]))
    cfg = model_dir / "tokenizer_config.json"
    if cfg.is_file():
        data = json.loads(cfg.read_text(encoding="utf-8"))
        for key, entry in (data.get("added_tokens_decoder") or {}).items():
            if isinstance(entry, dict) and entry.get("special", False):
                try:
                    special.add(int(key))
                except ValueError:
                    pass
    mcfg = model_dir / "config.json"
    if mcfg.is_file():
        data = json.loads(mcfg.read_text(encoding="utf-8"))
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
            v = data.get(key)
            for x in (v if isinstance(v, list) else [v]):
                if isinstance(x, int) and x >= 0:
                    special.add(x)
    return special


def _tokenizer_size(model_dir: Path) -> int | None:
    """Number of ids the tokenizer knows (max id + 1), if tokenizer.json says."""
    tok = model_dir / "tokenizer.json"
    if not tok.is_file():
        return None
    data = json.loads(tok.read_text(encoding="utf-8"))
    ids: list[int] = []
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.extend(int(v) for v in vocab.values() if isinstance(v, int))
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        ids.append(len(vocab) - 1)
    ids.extend(int(e["id"]) for e in data.get("added_tokens", []) or [] if isinstance(e.get("id"), int))
    return max(ids) + 1 if ids else None


def resolve_model_dir(root: str | None) -> Path | None:
    """A local directory holding the model's config and tokenizer: the path itself, or the HF cache."""
    if not root:
        return None
    p = Path(root).expanduser()
    if p.is_dir():
        return p
    try:  # a hub name already downloaded by the server on this machine
        from huggingface_hub import snapshot_download  # type: ignore[import-not-found]

        return Path(snapshot_download(root, local_files_only=True))
    except Exception:  # noqa: BLE001 - not available offline: the caller says what to do
        return None


def vocab_from_model_dir(model_dir: Path) -> Vocab:
    """Vocabulary size and special ids read from a model directory's files.

    NOTE: the size is the smaller of ``config.json: vocab_size`` and the tokenizer's own id count:
    ids past the tokenizer's end exist in the embedding (padding) but may not detokenize.
    """
    sizes = []
    mcfg = model_dir / "config.json"
    if mcfg.is_file():
        data = json.loads(mcfg.read_text(encoding="utf-8"))
        v = data.get("vocab_size") or (data.get("text_config") or {}).get("vocab_size")
        if isinstance(v, int) and v > 0:
            sizes.append(v)
    t = _tokenizer_size(model_dir)
    if t:
        sizes.append(t)
    if not sizes:
        raise ShadowError(
            f"{model_dir}: no config.json vocab_size or tokenizer.json found; pass --vocab-size")
    return Vocab(size=min(sizes), special=tuple(sorted(_special_ids_from_files(model_dir))),
                 source=str(model_dir))
