"""One reader of a model's config.json (shadow/sim/cost/modelcfg.py) behind ``--cost-model
model:CONFIG`` and ``--kv-config``: the same bad file is the same one-line error from both, naming
the option and the file."""

from __future__ import annotations

import json

import pytest

from shadow.sim.cost.models import parse_cost_model
from shadow.sim.tiers.model import kv_bytes_per_block
from tests.sim._json_files import UNREADABLE, one_line_error, put

DENSE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128}


@pytest.mark.parametrize("name,content,words", [
    *UNREADABLE,
    ("nolayers.json", json.dumps({k: v for k, v in DENSE.items() if k != "num_hidden_layers"}),
     "the config has no 'num_hidden_layers' (needed for "),
    ("zero.json", json.dumps({**DENSE, "num_attention_heads": 0}),
     "'num_attention_heads' is 0, not a positive number"),
    ("text.json", json.dumps({**DENSE, "hidden_size": "64"}), "'hidden_size' is '64', not a"),
])
def test_both_readers_refuse_a_bad_file_alike(tmp_path, name, content, words):
    path = put(tmp_path / name, content)
    cost = one_line_error(lambda: parse_cost_model(f"model:{path}"))
    kv = one_line_error(lambda: kv_bytes_per_block(str(path), 16))
    assert cost.startswith(f"cost model model:{path}: ") and words in cost, cost
    assert kv.startswith(f"--kv-config {path}: ") and words in kv, kv
    assert cost.split(f"model:{path}: ", 1)[1].split(" (needed for")[0] == \
        kv.split(f"--kv-config {path}: ", 1)[1].split(" (needed for")[0]


def test_text_config_is_read_over_the_top_level(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mm", "text_config": DENSE}))
    # 2 layers x 2 (K and V) x 2 KV heads x 16 head dim x 16 tokens x 2 bytes
    assert kv_bytes_per_block(str(path), 16) == 2 * 2 * 2 * 16 * 16 * 2
    assert parse_cost_model(f"model:{path}").cost(0) > 0
