"""deploy/grafana: dashboard structure, provisioning, and every panel's PromQL against a real Prometheus."""
from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
import yaml

from tests.deploy.prometheus_support import (
    DASHBOARD_JSON, DEPLOY, dashboard_targets, dashboard_variables, deploy_config, metric_names,
    start_prometheus, substitute, vllm_metric_names,
)

GRAFANA = DEPLOY / "grafana"
VARIABLES = {"model": "model_name", "engine": "engine", "replica": "replica", "policy": "policy",
             "capacity": "capacity_blocks", "tier": "tier"}


def dashboard() -> dict:
    return json.loads(DASHBOARD_JSON.read_text())


def all_panels(d: dict) -> list[dict]:
    out, stack = [], list(d["panels"])
    while stack:
        p = stack.pop(0)
        out.append(p)
        stack.extend(p.get("panels", []))
    return out


def variable_selector(query: str) -> str:
    """``label_values(<selector>, <label>)`` -> ``<selector>``."""
    assert query.startswith("label_values(") and query.endswith(")"), query
    return query[len("label_values("):query.rindex(",")]


def test_dashboard_is_generated_from_make_dashboard() -> None:
    mod = runpy.run_path(str(GRAFANA / "make_dashboard.py"))
    assert mod["render"]() == DASHBOARD_JSON.read_text(), "run `python deploy/grafana/make_dashboard.py`"


def test_uid_title_and_unique_panel_ids() -> None:
    d = dashboard()
    assert d["uid"] == "shadow-kv-live"
    assert d["title"]
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    assert all(isinstance(i, int) and i > 0 for i in ids)


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], int] = {}
    for p in all_panels(dashboard()):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {p['id']} overlap at {(x, y)}"
                cells[(x, y)] = p["id"]


def test_datasource_variable_and_filters() -> None:
    d = dashboard()
    tvars = {v["name"]: v for v in d["templating"]["list"]}
    ds = tvars["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name, label in VARIABLES.items():
        v = tvars[name]
        assert v["type"] == "query" and v["datasource"]["uid"] == "${datasource}"
        assert v["query"]["query"].startswith("label_values(") and v["query"]["query"].endswith(f", {label})")
        assert v["multi"] and v["includeAll"] and v["allValue"] == ".*"
    # every query panel reads from the variable, never from a fixed datasource
    for p in all_panels(d):
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            used = dashboard_variables(t["expr"])
            assert used <= set(tvars) | {"__rate_interval", "__range"}, (p["title"], used)
            assert "model" in used and "engine" in used, (p["title"], t["refId"])


def test_panels_cover_the_questions_the_dashboard_answers() -> None:
    titles = " | ".join(p["title"].lower() for p in all_panels(dashboard()))
    for words in ("hit ratio per policy", "compute-saving ratio per policy", "hit ratio against capacity",
                  "compute-saving ratio against capacity", "fidelity", "best policy", "gap-spanning gain",
                  "evictions and self-evictions", "dropped", "recording rate",
                  "what a host tier of n gib would add", "gpu + host tier",
                  "fleet: replicas compared", "engine prefix hit ratio per replica",
                  "shadow hit ratio per replica", "requests per replica"):
        assert words in titles, words


def test_dashboard_names_only_exported_metrics() -> None:
    from shadow.connector.schema import exported_series

    # NOTE: the names come from the connector's code (exported_series), docs/metrics.md is
    # checked against the same list (test_prometheus_config.py)
    known = exported_series() | vllm_metric_names()
    named = set()
    for _, t in dashboard_targets():
        named |= metric_names(t["expr"])
    for v in dashboard()["templating"]["list"]:
        if v["type"] == "query":
            named |= metric_names(variable_selector(v["query"]["query"]))
    unknown = named - known
    assert not unknown, f"dashboard names metrics no code exports: {sorted(unknown)}"
    assert "vllm:prefix_cache_hits_total" in named and "shadow_block_hits_total" in named
    assert {"shadow_tier_hit_tokens_total", "shadow_tier_occupancy_bytes"} <= named


def test_provisioning_files() -> None:
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert ds["apiVersion"] == 1
    (src,) = ds["datasources"]
    assert src["type"] == "prometheus" and src["url"].startswith("http://")
    dp = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "shadow.yml").read_text())
    (prov,) = dp["providers"]
    assert prov["type"] == "file" and prov["options"]["path"].startswith("/")


@pytest.mark.prometheus
def test_every_panel_expression_parses_and_runs(tmp_path: Path) -> None:
    """Each target, with variables substituted, is accepted by a real Prometheus (no targets scraped)."""
    values = {"datasource": "prometheus", "model": "m", "engine": "0", "replica": ".*",
              "policy": "(lru|vllm)",
              "capacity": ".*", "tier": ".*", "__rate_interval": "1m", "__range": "1h"}
    with start_prometheus(deploy_config({}, interval="1s", rule_files=[]), tmp_path) as prom:
        for _panel, t in dashboard_targets():
            prom.query(substitute(t["expr"], values))  # raises PrometheusError with the parse error
        for v in dashboard()["templating"]["list"]:
            if v["type"] == "query":
                prom.query(variable_selector(substitute(v["query"]["query"], values)))
