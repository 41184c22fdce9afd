"""The ``vllm.general_plugins`` entry point: installed with the package (``pip install -e .``),
loaded by vLLM's own plugin loader, it makes ``"kv_connector": "ShadowConnector"`` resolvable
without a module path, which is how MultiConnector names its children."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.vllm_support import (REPO_ROOT, inprocess_llm, random_token_ids, tiny_model_path,
                                vllm_available)

needs_vllm = pytest.mark.skipif(not vllm_available(), reason="vllm is not installed")


def test_entry_point_is_installed():
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "shadow_connector"]
    assert eps, ("the vllm.general_plugins entry point is missing: install the package "
                 "(`make venv` or `.venv/bin/pip install -e . --no-build-isolation`)")
    assert eps[0].value == "shadow.connector.plugin:register"


@pytest.mark.slow
@needs_vllm
def test_vllm_plugin_loader_registers_the_connector_name():
    # NOTE: a fresh interpreter: the factory's registry is process-global
    code = textwrap.dedent("""
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        assert "ShadowConnector" not in KVConnectorFactory._registry
        from vllm.plugins import load_general_plugins
        load_general_plugins()
        cls = KVConnectorFactory.get_connector_class_by_name("ShadowConnector")
        from shadow.connector.plugin import register
        register()  # idempotent: loaded again in every vLLM process
        from shadow.connector import ShadowConnector
        assert cls is ShadowConnector, cls
        print("ok", cls.__module__)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok shadow.connector.connector")


@needs_vllm
@pytest.mark.vllm
@pytest.mark.slow
def test_multiconnector_child_by_name_observes_the_engine():
    """A real engine with MultiConnector whose child is named only ``ShadowConnector``."""
    from vllm import SamplingParams, TokensPrompt
    from vllm.config import KVTransferConfig

    from shadow.connector.connector import INSTANCES

    child = {"kv_connector": "ShadowConnector", "kv_role": "kv_producer",
             "kv_connector_extra_config": {"policies": ["vllm"], "capacity_factors": [1],
                                           "engine_id": "multi-child"}}
    ktc = KVTransferConfig(kv_connector="MultiConnector", kv_role="kv_producer",
                           kv_connector_extra_config={"connectors": [child]})
    prefix = random_token_ids(100, seed=11)
    sp = SamplingParams(max_tokens=3, ignore_eos=True, temperature=0.0)
    with inprocess_llm(tiny_model_path(), kv_transfer_config=ktc, num_gpu_blocks_override=64,
                       max_model_len=512) as llm:
        outs = [llm.generate([TokensPrompt(prompt_token_ids=prefix + random_token_ids(9, s))],
                             sp, use_tqdm=False)[0] for s in (1, 2)]
        conns = [c for c in INSTANCES if c.cfg.engine_id == "multi-child"]
        assert len(conns) == 1
        assert conns[0].flush()
        preds = conns[0].predictions()
    assert [o.num_cached_tokens for o in outs] == [0, 96]
    key = f"vllm|{conns[0].cfg.engine_blocks}"
    assert [p.prefix_hit_tokens[key] for p in preds] == [0, 96], [(p.request_id, p.preempted, p.num_tokens) for p in preds]
