"""deploy/prometheus: promtool checks, rule unit tests, and the metric-name contract."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.deploy.prometheus_support import (
    PROMETHEUS_YML, RULES_YML, alert_subject, deploy_config, documented_shadow_metrics, metric_names,
    promtool, rules, start_prometheus, vllm_metric_names,
)

HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.prometheus


def test_promtool_check_config() -> None:
    r = promtool("check", "config", str(PROMETHEUS_YML))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_promtool_check_rules() -> None:
    r = promtool("check", "rules", str(RULES_YML))
    assert r.returncode == 0, r.stdout + r.stderr


def rules_test_file(tmp_path: Path, rules_path: Path = RULES_YML) -> Path:
    """tests/deploy/rules_test.yml for ``rules_path``: each expected alert description marked
    FROM_RULES is that alert's description in the rules file (one source of truth for the
    text), and ``rule_files`` points at ``rules_path``."""
    descriptions = {r["alert"]: r["annotations"]["description"]
                    for g in yaml.safe_load(rules_path.read_text())["groups"]
                    for r in g["rules"] if "alert" in r}
    spec = yaml.safe_load((HERE / "rules_test.yml").read_text())
    spec["rule_files"] = [str(rules_path)]
    filled = 0
    for t in spec["tests"]:
        for case in t.get("alert_rule_test", []):
            for alert in case.get("exp_alerts", []):
                ann = alert.get("exp_annotations", {})
                if ann.get("description") == "FROM_RULES":
                    ann["description"] = descriptions[case["alertname"]]
                    filled += 1
    assert filled, "no expected alert description to fill in"
    out = tmp_path / "rules_test.yml"
    out.write_text(yaml.safe_dump(spec, sort_keys=False))
    return out


def test_promtool_rule_unit_tests(tmp_path: Path) -> None:
    """Hand-computed ratios, no double counting across the two scrape jobs, alert timing."""
    r = promtool("test", "rules", str(rules_test_file(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr


def test_rule_unit_tests_catch_double_counting(tmp_path: Path) -> None:
    """The unit tests can fail: summing the two scrape jobs' copies breaks them."""
    broken = RULES_YML.read_text().replace("max by (deployment, model_name, engine, policy, capacity_blocks) (rate",
                                           "sum by (deployment, model_name, engine, policy, capacity_blocks) (rate")
    assert broken != RULES_YML.read_text()
    (tmp_path / "rules.yml").write_text(broken)
    r = promtool("test", "rules", str(rules_test_file(tmp_path, tmp_path / "rules.yml")))
    assert r.returncode != 0
    assert "shadow:block_lookups:rate5m" in r.stdout + r.stderr


def test_config_scrapes_vllm_and_connector() -> None:
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"vllm", "shadow-connector"}
    assert cfg["rule_files"] == ["rules.yml"]
    for job in jobs.values():
        # both targets of one server carry the same deployment label (the dedup key)
        assert job["static_configs"][0]["labels"]["deployment"] == "vllm-0"
    keep = jobs["shadow-connector"]["metric_relabel_configs"][0]
    assert keep["action"] == "keep" and keep["regex"] == "shadow_.*"


def test_metrics_md_documents_exactly_the_exported_series() -> None:
    from shadow.connector.schema import exported_series

    assert documented_shadow_metrics() == exported_series()


def test_rules_name_only_exported_or_recorded_metrics() -> None:
    from shadow.connector.schema import exported_series

    documented = exported_series()
    vllm = vllm_metric_names()
    recorded: set[str] = set()
    for rule in rules():
        for name in metric_names(rule["expr"]):
            if name.startswith("shadow:"):
                assert name in recorded, f"{rule.get('record') or rule.get('alert')}: {name} used before it is recorded"
            elif name.startswith("vllm:"):
                assert name in vllm, f"{name} is not a metric of the installed vLLM"
            else:
                assert name in documented, f"{name} is not a series the connector exports"
        if "record" in rule:
            assert rule["record"].startswith("shadow:") and rule["record"].count(":") == 2
            recorded.add(rule["record"])


def test_rules_record_every_ratio_and_alert_on_drops_and_drift() -> None:
    recorded = {r["record"] for r in rules() if "record" in r}
    alerts = {r["alert"]: r for r in rules() if "alert" in r}
    for name in ("shadow:block_hit_ratio:rate5m", "shadow:block_prefix_hit_ratio:rate5m",
                 "shadow:cost_saving_ratio:rate5m", "shadow:cost_prefix_saving_ratio:rate5m",
                 "shadow:engine_prefix_hit_ratio:rate5m", "shadow:vllm_fidelity_error:rate5m"):
        assert name in recorded
    assert {"ShadowDroppingRequests", "ShadowFidelityDrift"} <= set(alerts)
    for a in alerts.values():
        alert_subject(a["expr"])  # every alert is `<expr> <op> <threshold>` (the e2e test relies on it)
        assert a["labels"]["severity"] and a["annotations"]["summary"]


def test_rules_load_into_a_real_prometheus(tmp_path: Path) -> None:
    """A real server loads the shipped config and rules; every rule evaluates without error."""
    cfg = deploy_config({}, interval="1s")
    with start_prometheus(cfg, tmp_path) as prom:
        def evaluated() -> bool:
            groups = prom.rule_groups()
            rs = [r for g in groups for r in g["rules"]]
            return len(rs) == len(rules()) and all(r.get("lastEvaluation", "").startswith("2") and
                                                   not r["lastEvaluation"].startswith("0001") for r in rs)
        prom.wait_for("one evaluation of every rule", evaluated, timeout_s=30)
        for g in prom.rule_groups():
            for r in g["rules"]:
                assert r["health"] == "ok", (r["name"], r.get("lastError"))

