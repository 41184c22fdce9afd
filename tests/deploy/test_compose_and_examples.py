"""deploy/docker-compose.yml (structure, checked with PyYAML: docker cannot run here) and the launch examples."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.prometheus_support import DEPLOY, PROMETHEUS_YML, promtool

COMPOSE = DEPLOY / "docker-compose.yml"
CONNECTOR_KEYS = {"kv_connector": "ShadowConnector", "kv_connector_module_path": "shadow.connector",
                  "kv_role": "kv_producer"}


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def arg_value(args: list[str], flag: str) -> str:
    """``--flag=value`` or ``--flag value`` from an argument list."""
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag:
            return args[i + 1]
    raise AssertionError(f"{flag} not in {args}")


def check_kv_transfer_config(text: str) -> dict:
    kv = json.loads(text)
    for k, v in CONNECTOR_KEYS.items():
        assert kv[k] == v, (k, kv)
    return kv["kv_connector_extra_config"]


def target_ports() -> dict[str, int]:
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
    return {j["job_name"]: int(j["static_configs"][0]["targets"][0].rsplit(":", 1)[1]) for j in cfg["scrape_configs"]}


def test_compose_services_and_images() -> None:
    c = compose()
    assert set(c["services"]) == {"vllm", "prometheus", "grafana"}
    assert c["services"]["vllm"]["build"]["dockerfile"] == "deploy/vllm/Dockerfile"
    assert (COMPOSE.parent / c["services"]["vllm"]["build"]["context"] / "deploy" / "vllm" / "Dockerfile").is_file()
    for name in ("prometheus", "grafana"):
        image = c["services"][name]["image"]
        assert re.fullmatch(r"[a-z/]+:v?\d+\.\d+\.\d+", image), f"{name}: pin the image version ({image})"
    # named volumes are declared
    for svc in c["services"].values():
        for v in svc.get("volumes", []):
            src = v.split(":", 1)[0]
            if not src.startswith("."):
                assert src in c["volumes"], src


def test_compose_bind_mounts_exist() -> None:
    for name, svc in compose()["services"].items():
        for v in svc.get("volumes", []):
            src = v.split(":", 1)[0]
            if src.startswith("."):
                assert (COMPOSE.parent / src).exists(), f"{name}: {src} does not exist"


def test_compose_vllm_runs_the_connector_and_matches_prometheus_targets() -> None:
    c = compose()
    vllm = c["services"]["vllm"]
    args = vllm["command"]
    extra = check_kv_transfer_config(arg_value(args, "--kv-transfer-config"))
    assert "--enable-prefix-caching" in args and "--disable-log-stats" not in args
    ports = target_ports()
    assert int(arg_value(args, "--port")) == ports["vllm"]
    assert extra["metrics_port"] == ports["shadow-connector"]
    # another container scrapes it: the endpoint must not be bound to loopback
    assert extra["metrics_host"] == "0.0.0.0"
    assert str(ports["shadow-connector"]) in [str(p) for p in vllm["expose"]]
    # targets name the compose service
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
    for job in cfg["scrape_configs"]:
        assert job["static_configs"][0]["targets"][0].split(":")[0] == "vllm"


def test_compose_prometheus_and_grafana_wiring() -> None:
    c = compose()
    prom = c["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    conf = arg_value(prom["command"], "--config.file")
    assert mounts[conf] == "./prometheus/prometheus.yml"
    # rule_files are relative to the config file: rules.yml must sit beside it in the container
    assert mounts[str(Path(conf).parent / "rules.yml")] == "./prometheus/rules.yml"
    graf = c["services"]["grafana"]
    gm = {v.split(":")[1]: v.split(":")[0] for v in graf["volumes"]}
    assert gm["/etc/grafana/provisioning"] == "./grafana/provisioning"
    provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/shadow.yml").read_text())["providers"][0]
    assert gm[provider["options"]["path"]] == "./grafana/dashboards"
    home = graf["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == provider["options"]["path"] + "/shadow.json"
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090"
    assert any(p.endswith(":9090") for p in prom["ports"])
    for svc in ("prometheus", "grafana"):
        assert all(p.startswith("127.0.0.1:") for p in c["services"][svc]["ports"]), svc


def run_example(name: str, **env: str) -> list[str]:
    r = subprocess.run(["bash", str(DEPLOY / "examples" / name)], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "DRY_RUN": "1", **env})
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_examples_are_valid_bash() -> None:
    for script in sorted((DEPLOY / "examples").glob("*.sh")):
        r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert r.returncode == 0, (script.name, r.stderr)


def test_gpu_example_command() -> None:
    args = run_example("gpu-node.sh", MODEL="m", TP="2", POLICIES="vllm,lru")
    assert args[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert arg_value(args, "--tensor-parallel-size") == "2"
    extra = check_kv_transfer_config(arg_value(args, "--kv-transfer-config"))
    assert extra["metrics_port"] == 9400 and extra["policies"] == "vllm,lru"


@pytest.mark.prometheus
def test_cpu_example_command_and_prometheus_config(tmp_path: Path) -> None:
    out = run_example("cpu-build.sh", MODEL="/models/tiny", PORT="8123", SHADOW_METRICS_PORT="9555")
    sep = out.index("---")
    args, prom = out[:sep], "\n".join(out[sep + 1:])
    assert arg_value(args, "--block-size") == "32" and "--enforce-eager" in args
    extra = check_kv_transfer_config(arg_value(args, "--kv-transfer-config"))
    assert extra["metrics_port"] == 9555
    cfg = yaml.safe_load(prom)
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in cfg["scrape_configs"]}
    assert targets == {"vllm": ["127.0.0.1:8123"], "shadow-connector": ["127.0.0.1:9555"]}
    (tmp_path / "prometheus.yml").write_text(prom)
    r = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
