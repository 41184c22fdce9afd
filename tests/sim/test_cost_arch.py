"""Costs from a model's architecture (``model:CONFIG``) and from replay's fitted prefill model
(``fit:REPORT``), against costs computed by hand from the formulas in shadow/sim/cost/arch.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shadow.errors import ShadowError
from shadow.sim.cost.models import parse_cost_model

DENSE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128}


def _write(tmp_path, cfg: dict, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return str(p)


def _costs(tmp_path, cfg: dict, block: int, n: int) -> np.ndarray:
    return parse_cost_model(f"model:{_write(tmp_path, cfg)},{block}").costs(n)


def test_dense_gqa(tmp_path):
    # per layer: q 64*64 + k,v 2*64*(2*16) + o 64*64 = 12288 weights; MLP 3*64*128 = 24576
    lin = 4 * 2 * 2 * (12288 + 24576)              # block 4 x 2 FLOPs x 2 layers
    per_key = 2 * 2 * 4 * (16 + 16)                # 2 layers x 2 x heads x (qk + v)
    keys = [1 + 2 + 3 + 4, 5 + 6 + 7 + 8, 9 + 10 + 11 + 12]
    want = [1000 * (lin + per_key * k) / lin for k in keys]
    assert _costs(tmp_path, DENSE, 4, 3) == pytest.approx(want)


def test_the_block_size_defaults_to_vllms(tmp_path):
    path = _write(tmp_path, DENSE)
    assert parse_cost_model(f"model:{path}").costs(4) == pytest.approx(
        parse_cost_model(f"model:{path},16").costs(4))


def test_sliding_window_caps_the_keys(tmp_path):
    cfg = {**DENSE, "sliding_window": 6}
    lin = 4 * 2 * 2 * (12288 + 24576)
    per_key = 2 * 2 * 4 * 32
    keys = [1 + 2 + 3 + 4, 5 + 6 + 6 + 6, 6 * 4]  # each token sees at most 6 keys
    want = [1000 * (lin + per_key * k) / lin for k in keys]
    assert _costs(tmp_path, cfg, 4, 3) == pytest.approx(want)


def test_hybrid_layers_only_full_attention_grows(tmp_path):
    cfg = {**DENSE, "num_hidden_layers": 3, "sliding_window": 4,
           "layer_types": ["full_attention", "linear_attention", "sliding_attention"]}
    lin = 4 * 2 * 3 * (12288 + 24576)
    per_layer = 2 * 4 * 32
    full = [10, 26]
    sliding = [10, 16]                             # window 4: 5, 6, 7, 8 -> 4 each
    want = [1000 * (lin + per_layer * (f + s)) / lin for f, s in zip(full, sliding)]
    assert _costs(tmp_path, cfg, 4, 2) == pytest.approx(want)


def test_qwen2_sliding_from_max_window_layers(tmp_path):
    cfg = {**DENSE, "sliding_window": 4, "use_sliding_window": True, "max_window_layers": 1}
    lin = 4 * 2 * 2 * (12288 + 24576)
    per_layer = 2 * 4 * 32
    want = [1000 * (lin + per_layer * (26 + 16)) / lin]          # layer 0 full, layer 1 slides
    assert _costs(tmp_path, cfg, 4, 2)[1:] == pytest.approx(want)
    off = {**cfg, "use_sliding_window": False}                  # Qwen2's default: no window
    assert _costs(tmp_path, off, 4, 2)[1] == pytest.approx(1000 * (lin + per_layer * 52) / lin)


def test_mla_and_moe(tmp_path):
    cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
           "kv_lora_rank": 16, "q_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
           "v_head_dim": 8, "intermediate_size": 96, "n_routed_experts": 8,
           "num_experts_per_tok": 2, "moe_intermediate_size": 32, "n_shared_experts": 1,
           "first_k_dense_replace": 1}
    attn = (64 * 8 + 8 * 2 * 12) + 64 * (16 + 4) + 16 * 2 * (8 + 8) + 2 * 8 * 64
    dense = 3 * 64 * 96
    moe = 64 * 8 + 2 * 3 * 64 * 32 + 3 * 64 * 32
    lin = 2 * 2 * (2 * attn + dense + moe)          # block 2 x 2 FLOPs
    per_key = 2 * 2 * 2 * (12 + 8)                  # 2 layers x 2 x heads x (qk + v)
    want = [1000 * (lin + per_key * k) / lin for k in (1 + 2, 3 + 4)]
    assert _costs(tmp_path, cfg, 2, 2) == pytest.approx(want)


def test_multimodal_text_config_is_read(tmp_path):
    assert _costs(tmp_path, {"text_config": DENSE}, 4, 2) == pytest.approx(
        _costs(tmp_path, DENSE, 4, 2))


def test_policies_see_integer_costs(tmp_path):
    m = parse_cost_model(f"model:{_write(tmp_path, DENSE)},4")
    assert m.int_costs(3).tolist() == [1009, 1023, 1036]
    assert m.cost(2) == pytest.approx(m.costs(3)[2])             # one position at a time


@pytest.mark.parametrize("cfg,words", [
    ({k: v for k, v in DENSE.items() if k != "hidden_size"}, "has no 'hidden_size'"),
    ({k: v for k, v in DENSE.items() if k != "intermediate_size"}, "has no 'intermediate_size'"),
    ({**DENSE, "num_attention_heads": 0}, "'num_attention_heads' is 0, not a positive number"),
    ({**DENSE, "hidden_size": "64"}, "'hidden_size' is '64'"),
    ({**DENSE, "layer_types": ["full_attention"]}, "layer_types has 1 entries for 2 layers"),
    ({**DENSE, "layer_types": ["full_attention", "sliding_attention"]}, "has no 'sliding_window'"),
    ({**DENSE, "n_routed_experts": 4}, "has no 'num_experts_per_tok'"),
])
def test_a_config_missing_a_field_is_one_error_naming_it(tmp_path, cfg, words):
    with pytest.raises(ShadowError, match="cost model model:") as info:
        _costs(tmp_path, cfg, 4, 1)
    assert words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("text,words", [
    ("model:", "needs a file name"),
    ("model:/nonexistent/config.json", "model:/nonexistent/config.json: cannot read it"),
    ("model:{dir}/bad.json", "is not JSON"),
    ("model:{dir}/list.json", "is not a JSON object"),
    ("model:{dir}/config.json,0", "block size 0 is not 1.."),
    ("fit:{dir}/nofit.json", "has no fitted prefill model"),
    ("fit:{dir}/negative.json", "negative or non-finite term"),
    ("fit:{dir}/noblock.json", "has no engine block size"),
])
def test_bad_files_are_one_error(tmp_path, text, words):
    (tmp_path / "bad.json").write_text("{")
    (tmp_path / "list.json").write_text("[]")
    _write(tmp_path, DENSE)
    _write(tmp_path, {"prefill_model": None, "block_size": 16}, "nofit.json")
    _write(tmp_path, {"prefill_model": {"coef": [0.01, 1e-4, -1e-9]}, "block_size": 16},
           "negative.json")
    _write(tmp_path, {"prefill_model": {"coef": [0.01, 1e-4, 1e-9]}}, "noblock.json")
    with pytest.raises(ShadowError) as info:
        parse_cost_model(text.format(dir=tmp_path))
    assert words in str(info.value)


def test_fit_report_gives_microseconds_per_block(tmp_path):
    a, b, d = 0.02, 1e-4, 2e-8                      # TTFT = a + b*u + d*u*(c + u/2)
    path = _write(tmp_path, {"prefill_model": {"coef": [a, b, d]}, "block_size": 32}, "r.json")
    m = parse_cost_model(f"fit:{path}")
    # the block at p: u = 32 new tokens after c = 32p cached ones; the fixed a is not a block's
    want = [(b * 32 + d * 32 * (32 * p + 16)) * 1e6 for p in range(4)]
    assert m.costs(4) == pytest.approx(want)
    assert parse_cost_model(f"fit:{path},16").costs(1) == pytest.approx(
        [(b * 16 + d * 16 * 8) * 1e6])
    two_terms = _write(tmp_path, {"prefill_model": {"coef": [a, b]}, "block_size": 32}, "t.json")
    assert parse_cost_model(f"fit:{two_terms}").costs(3) == pytest.approx([b * 32 * 1e6] * 3)


def test_simulate_takes_a_model_cost(tmp_path):
    from click.testing import CliRunner

    from shadow.cli import cli
    path = _write(tmp_path, DENSE)
    r = CliRunner().invoke(cli, ["simulate", "-c", "512", "-a", "lru",
                                 "--cost-model", f"model:{path},32"])
    assert r.exit_code == 0, r.output
    assert f"cost model model:{path},32" in r.output
