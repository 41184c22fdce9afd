"""Per-block prefill costs from a model's architecture (``model:CONFIG``) or from the prefill model
that ``replay`` fitted to measured TTFT (``fit:REPORT``).

``model:CONFIG[,BLOCK]`` reads a Hugging Face ``config.json``.  The cost of recomputing the block
at 0-based position ``p`` (tokens ``pB .. pB+B-1``, everything before it cached) is its forward
FLOPs, in units of one block's linear work (the FLOPs that do not depend on the context) / 1000:

    cost(p) = 1000 * (B * lin + sum over layers of attn_layer(p)) / (B * lin)

* ``lin`` (per token, all layers): 2 FLOPs per weight multiply of the attention projections
  (q, k, v, o; MLA's low-rank q and kv paths when ``kv_lora_rank`` is set) and of the MLP: gated,
  three matrices of ``intermediate_size``; MoE layers count the router, the
  ``num_experts_per_tok`` routed experts of ``moe_intermediate_size`` and the shared experts
  (``n_shared_experts`` or ``shared_expert_intermediate_size``); DeepSeek's first
  ``first_k_dense_replace`` layers are dense.  Embedding and LM head are left out (the head runs
  for the last token only).
* ``attn_layer(p)`` = ``2 * heads * (qk_dim + v_dim) * keys``, ``keys`` = the causal key count of
  the block's tokens: ``sum(t + 1)`` over ``t`` in the block for full attention,
  ``sum(min(t + 1, W))`` for a sliding window ``W``, 0 for a linear-attention or state-space
  layer.  Query heads set the work (GQA/MQA's fewer KV heads change memory, not FLOPs); MLA
  attends with ``qk_nope_head_dim + qk_rope_head_dim`` and ``v_head_dim`` per head (prefill runs
  the non-absorbed form).
* Layer kinds: ``layer_types`` when the config has it (``full_attention``, ``sliding_attention``,
  anything else linear); otherwise every layer is full attention, or sliding when
  ``sliding_window`` is set and ``use_sliding_window`` is not false (Qwen2's
  ``max_window_layers``: layers from that index on slide).

Left out: the kernels' efficiency (FLOPs, not time), the LM head, normalisation and activations,
and anything outside the forward pass.  ``BLOCK`` defaults to 16, vLLM's default block size.

``fit:REPORT[,BLOCK]`` reads ``replay``'s ``report.json``: its prefill model ``TTFT = a + b*u +
d*u*(c + u/2)`` (:mod:`replay.prefill`) gives the block at ``p`` (``u = B`` new tokens after
``c = pB`` cached ones) the cost ``b*B + d*B*B*(p + 1/2)`` seconds, written in microseconds.
``BLOCK`` defaults to the report's engine block size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from shadow.errors import ShadowError
from shadow.sim.cost.modelcfg import ModelConfig, read_model_config
from shadow.sim.cost.report import read_prefill_fit

#: vLLM's default KV block size (tokens), the block size of ``model:CONFIG`` without one.
DEFAULT_BLOCK = 16


@dataclass(frozen=True)
class LayerWork:
    """One layer's attention shape: what its quadratic term costs per key."""

    kind: str            # "full", "sliding" or "linear"
    window: int          # keys a token attends to at most (sliding only)
    per_key: float       # FLOPs per (query token, key) pair: 2 * heads * (qk_dim + v_dim)


def _split_block(arg: str, what: str) -> tuple[str, int | None]:
    """``PATH[,BLOCK]``: the path and the block size (None when not given)."""
    path, sep, block = arg.rpartition(",")
    if not sep or not block.strip().isdigit():
        return arg, None
    b = int(block)
    if b < 1 or b > (1 << 20):
        raise ShadowError(f"cost model {what}: block size {block.strip()} is not 1..{1 << 20}")
    return path, b


def _linear_per_token(c: ModelConfig) -> float:
    """FLOPs per token of every layer's weight multiplies (see the module docstring)."""
    d = c.num("hidden_size")
    n_layers = int(c.num("num_hidden_layers"))
    nh = c.num("num_attention_heads")
    if c.get("kv_lora_rank"):
        nope, rope = c.num("qk_nope_head_dim"), c.num("qk_rope_head_dim", positive=False)
        v_dim, kv_rank = c.num("v_head_dim"), c.num("kv_lora_rank")
        q_rank = c.num("q_lora_rank") if c.get("q_lora_rank") else 0.0
        q = d * q_rank + q_rank * nh * (nope + rope) if q_rank else d * nh * (nope + rope)
        attn = q + d * (kv_rank + rope) + kv_rank * nh * (nope + v_dim) + nh * v_dim * d
    else:
        hd = c.num("head_dim", d / nh)
        nkv = c.num("num_key_value_heads", nh)
        attn = d * nh * hd + 2 * d * nkv * hd + nh * hd * d
    dense_mlp = 3 * d * c.num("intermediate_size")
    n_experts = c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts")
    if n_experts:
        k = c.num("num_experts_per_tok")
        moe_ffn = c.num("moe_intermediate_size", c.num("intermediate_size"))
        shared = 0.0
        if c.get("shared_expert_intermediate_size"):
            shared = 3 * d * c.num("shared_expert_intermediate_size")
        elif c.get("n_shared_experts"):
            shared = 3 * d * moe_ffn * c.num("n_shared_experts")
        moe_mlp = d * float(n_experts) + k * 3 * d * moe_ffn + shared
        n_dense = int(c.num("first_k_dense_replace", 0, positive=False))
        n_dense = min(n_dense, n_layers)
        mlp = n_dense * dense_mlp + (n_layers - n_dense) * moe_mlp
    else:
        mlp = n_layers * dense_mlp
    return 2.0 * (n_layers * attn + mlp)


def layer_work(c: ModelConfig) -> list[LayerWork]:
    """Each layer's attention kind, window and FLOPs per (query, key) pair."""
    d = c.num("hidden_size")
    n_layers = int(c.num("num_hidden_layers"))
    nh = c.num("num_attention_heads")
    if c.get("kv_lora_rank"):
        qk = c.num("qk_nope_head_dim") + c.num("qk_rope_head_dim", positive=False)
        v = c.num("v_head_dim")
    else:
        qk = v = c.num("head_dim", d / nh)
    per_key = 2.0 * nh * (qk + v)
    window = c.get("sliding_window")
    types = c.get("layer_types")
    if isinstance(types, list):
        if len(types) != n_layers:
            raise ShadowError(f"{c.where}: layer_types has {len(types)} entries "
                              f"for {n_layers} layers")
        out = []
        for t in types:
            if t == "full_attention":
                out.append(LayerWork("full", 0, per_key))
            elif t == "sliding_attention":
                out.append(LayerWork("sliding", int(c.num("sliding_window")), per_key))
            else:
                out.append(LayerWork("linear", 0, 0.0))
        return out
    if window and c.get("use_sliding_window") is not False:
        w = int(c.num("sliding_window"))
        first = int(c.num("max_window_layers", 0, positive=False)) \
            if c.get("use_sliding_window") else 0
        return [LayerWork("sliding" if i >= first else "full", w, per_key)
                for i in range(n_layers)]
    return [LayerWork("full", 0, per_key) for _ in range(n_layers)]


def _keys(kind: str, window: int, p: np.ndarray, block: int) -> np.ndarray:
    """Causal key count summed over the tokens ``pB .. pB+B-1`` of each block ``p``."""
    lo = p * block + 1.0                              # t + 1 of the block's first token
    hi = (p + 1.0) * block
    if kind == "linear":
        return np.zeros_like(lo)
    full = (lo + hi) * block / 2
    if kind == "full":
        return full
    below = np.clip(np.minimum(hi, window) - lo + 1, 0, block)   # tokens whose t + 1 <= window
    return (lo + (lo + below - 1)) * below / 2 + (block - below) * window


def model_cost_fn(arg: str) -> tuple[str, Callable[[int], np.ndarray]]:
    """``CONFIG[,BLOCK]`` of ``model:``: the config is read and checked once, here; returns the
    model's name and ``costs(n)``, the costs of positions ``0 .. n-1``."""
    path, block = _split_block(arg, f"model:{arg}")
    block = block or DEFAULT_BLOCK
    c = read_model_config(path, f"cost model model:{path}", "the cost")
    lin = block * _linear_per_token(c)
    groups: dict[tuple[str, int], float] = {}
    for lw in layer_work(c):
        groups[(lw.kind, lw.window)] = groups.get((lw.kind, lw.window), 0.0) + lw.per_key

    def costs(n: int) -> np.ndarray:
        p = np.arange(n, dtype=np.float64)
        attn = np.zeros(n, dtype=np.float64)
        for (kind, window), per_key in groups.items():
            attn += per_key * _keys(kind, window, p, block)
        return 1000.0 * (lin + attn) / lin

    return f"model:{path},{block}", costs


def fit_coefficients(arg: str) -> tuple[float, float]:
    """``REPORT[,BLOCK]`` of ``fit:``: ``(A, B)`` in microseconds of ``cost(p) = A + B*p``."""
    path, block = _split_block(arg, f"fit:{arg}")
    fit = read_prefill_fit(path, f"cost model fit:{path}", overhead=False)
    if block is None:
        if fit.block_size is None:
            raise ShadowError(f"cost model fit:{path}: the report has no engine block size; "
                              f"give one: fit:{path},16")
        block = fit.block_size
    b, d = fit.b, fit.d
    us = 1e6
    return (b * block + d * block * block / 2) * us, d * block * block * us
