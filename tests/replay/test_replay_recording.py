"""``replay report --recording``: a concurrent replay predicted from the engine's own
ShadowConnector recording (``--timing recorded``), against the send-order prediction.

A real OpenAI server (CPU, tiny model, the replay tests' 256-block cache, 8 running requests)
with the connector recording serves the replay tests' trace slice 8 requests at a time; the
report from the recording must predict every request (each paired with its admission) and say
so; both match rates are printed (docs/replay.md).
"""

from __future__ import annotations

import json

import pytest

from tests.replay.test_replay_vllm import BUNDLED, ENV, SERVER_ARGS, SLICE, _replay
from tests.vllm_support import start_openai_server, tiny_model_path, vllm_available

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")]


def test_concurrent_replay_predicted_from_its_recording(tmp_path):
    rec = tmp_path / "rec"
    ktc = json.dumps({"kv_connector": "ShadowConnector",
                      "kv_connector_module_path": "shadow.connector", "kv_role": "kv_producer",
                      "kv_connector_extra_config": {"policies": ["lru"], "record_dir": str(rec)}})
    out = tmp_path / "conc"
    with start_openai_server(tiny_model_path(), extra_args=[*SERVER_ARGS, "--kv-transfer-config",
                                                            ktc],
                             env=ENV, startup_timeout_s=600) as url:
        r = _replay(["--trace", BUNDLED, "--endpoint", url, *SLICE, "--tokens-per-block", "32",
                     "--max-output-tokens", "40", "--concurrency", "8", "--seed", "6",
                     "-o", str(out), "--no-progress"])
        assert r.returncode == 0, r.stderr[-3000:]
    sent = _replay(["report", str(out), "--policies", "lru", "--json"])
    assert sent.returncode == 0, sent.stderr[-3000:]
    by_send = json.loads(sent.stdout)
    r2 = _replay(["report", str(out), "--policies", "lru", "--recording", str(rec), "--json"])
    assert r2.returncode == 0, r2.stderr[-3000:]
    by_rec = json.loads(r2.stdout)
    assert by_rec["prediction"].startswith("the engine's recording")
    assert by_send["prediction"] == "send order"
    v = by_rec["validation"]
    assert v["n_compared"] == 25 and by_send["validation"]["n_compared"] == 25
    print(f"\nmatch rate: send order {by_send['validation']['match_rate']:.3f}, "
          f"recording {v['match_rate']:.3f}")
