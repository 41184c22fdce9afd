"""End to end: a real Prometheus scrapes a real vLLM engine running the shadow connector.

The OpenAI server (tiny model, CPU build) runs with the ShadowConnector and its own metrics
endpoint; Prometheus gets the shipped deploy/prometheus/prometheus.yml (targets replaced, 1 s
intervals) and rules.yml and scrapes both sources while a short load with shared prefixes runs.
Then every recording rule, every alert's subject and every dashboard panel's PromQL (template
variables resolved through Prometheus, as Grafana would) is evaluated over the HTTP API and must
return finite data; every metric the dashboard and the rules name must be in the engine's real
exposition; the two scrape jobs must not double count; and the shadow `vllm` policy at the
engine's capacity must track the engine's own hit ratio (the fidelity alert stays quiet).

Run it alone, under the machine's engine lock:
``flock /tmp/vllm.lock .venv/bin/python -m pytest -q tests/deploy/test_live_prometheus.py``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.deploy.prometheus_support import (
    PrometheusServer, alert_subject, dashboard_targets, deploy_config,
    documented_shadow_metrics, metric_names, regex_alternation, rules, start_prometheus, substitute,
)
from tests.vllm_support import (
    BLOCK_SIZE, free_port, http_get, http_post_json, parse_prometheus, random_token_ids,
    start_openai_server, tiny_model_path, vllm_available, word_prompt,
)

pytestmark = [
    pytest.mark.prometheus, pytest.mark.vllm, pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vllm not installed (make test-deps)"),
]

#: A small KV pool so the engine and the shadow caches evict during the short load.
NUM_GPU_BLOCKS = 48
PROFILE = Path(__file__).resolve().parents[2] / "shadow" / "data" / "h200_prefill.jsonl"
#: Grafana's interval variables, wide enough to cover the whole load.
INTERVALS = {"__rate_interval": "2m", "__range": "10m"}


def shared_prefix_load(url: str, model: str) -> int:
    """Requests one at a time: 3 system prompts x 4 questions, then the first of each again.

    Returns the number of requests sent. Prompts are whole words of the tiny vocabulary, so
    the token ids (and hence the block hashes) are exactly those chosen here.
    """
    systems = [random_token_ids(5 * BLOCK_SIZE, seed=100 + s) for s in range(3)]
    prompts = []
    for q in range(4):
        for s, system in enumerate(systems):
            prompts.append(system + random_token_ids(3 * BLOCK_SIZE + 7, seed=1000 + 10 * s + q))
    prompts += prompts[:3]
    for p in prompts:
        out = http_post_json(url + "/v1/completions", {
            "model": model, "prompt": word_prompt(p), "max_tokens": 4, "ignore_eos": True, "temperature": 0})
        assert out["usage"]["prompt_tokens"] == len(p)
    return len(prompts)


def finite_values(result: list[dict]) -> list[float]:
    return [float(r["value"][1]) for r in result if math.isfinite(float(r["value"][1]))]


def scalar(prom: PrometheusServer, expr: str) -> float:
    res = prom.query(expr)
    return float(res[0]["value"][1]) if res else float("nan")


def resolve_variables(prom: PrometheusServer, dashboard: dict) -> dict[str, str]:
    """Each query variable's values from Prometheus, in dashboard order, as Grafana would."""
    values = {"datasource": "prometheus", **INTERVALS}
    for v in dashboard["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = substitute(v["query"]["query"], values)
        selector, label = q[len("label_values("):-1].rsplit(",", 1)
        found = prom.label_values(label.strip(), selector.strip())
        assert found, f"variable ${v['name']}: {q} has no values"
        values[v["name"]] = regex_alternation(sorted(found))
    return values


def test_dashboard_and_rules_on_a_live_engine(tmp_path: Path) -> None:
    model = tiny_model_path()
    mport = free_port()
    kv = {"kv_connector": "ShadowConnector", "kv_connector_module_path": "shadow.connector",
          "kv_role": "kv_producer",
          "kv_connector_extra_config": {"metrics_port": mport, "record_dir": str(tmp_path / "rec"),
                                        # NOTE: host tiers behind the engine-capacity vllm cache
                                        # (sized from the engine's KV spec) feed the tier row
                                        "tiers": "cpu:1MiB,4MiB:lru",
                                        # a prefill profile feeds the prefill seconds and the
                                        # 'TTFT saved' row (the H200 table: any profile will do)
                                        "cost_model": f"profile:{PROFILE},model=llama3_8b"}}
    args = ["--kv-transfer-config", json.dumps(kv), "--num-gpu-blocks-override", str(NUM_GPU_BLOCKS),
            "--max-model-len", str(NUM_GPU_BLOCKS * BLOCK_SIZE // 2)]
    with start_openai_server(model, extra_args=args, log_dir=tmp_path) as url:
        targets = {"vllm": [url.removeprefix("http://")], "shadow-connector": [f"127.0.0.1:{mport}"]}
        with start_prometheus(deploy_config(targets, interval="1s"), tmp_path / "prometheus") as prom:
            prom.wait_for("both targets up",
                          lambda: sorted(t["health"] for t in prom.targets()) == ["up", "up"])
            sent = shared_prefix_load(url, model)

            # The shadow worker and vLLM's stats path deliver the last requests' counts a little
            # later; wait until both scrape jobs show every request, and the rules saw it: the
            # shadow's and (NOTE: a rate needs two scrapes of the engine's own prefix-cache
            # counters, which vLLM's stats path may publish after the shadow's; one clean-clone
            # run checked before they had) the engine's.
            def settled() -> bool:
                per_job = prom.query("shadow_observed_requests_total")
                return (len(per_job) == 2 and all(float(r["value"][1]) == sent for r in per_job)
                        and scalar(prom, "max(shadow_requests_total)") == sent
                        and scalar(prom, "count(shadow:block_hit_ratio:rate5m >= 0)") > 0
                        and scalar(prom, "count(shadow:engine_prefix_hit_ratio:rate5m >= 0)") > 0
                        # NOTE: the tier rows come with a later snapshot of the worker; their rates
                        # need two scrapes of them too (a loaded clean-clone run checked before)
                        and scalar(prom, "count(shadow:tier_hit_tokens:rate5m >= 0)") > 0
                        and scalar(prom, "count(shadow:gpu_plus_tier_token_hit_ratio:rate5m >= 0)")
                        > 0)
            prom.wait_for(f"{sent} requests in both scrape jobs", settled, timeout_s=90)

            exposed = set(parse_prometheus(http_get(url + "/metrics")).keys())
            exposed |= set(parse_prometheus(http_get(f"http://127.0.0.1:{mport}/metrics")).keys())
            exported = {name for name, _ in exposed} | prom.metric_names()
            check_metric_names(exported)
            check_no_double_counting(prom, sent)
            check_tiers_on_both_routes(prom)
            # NOTE: a rule over a range of another rule (predict_linear(...[6h]) in
            # ShadowRecordingDiskFull) has data from that rule's second evaluation on, which
            # settled() does not wait for (a clean-clone run checked one evaluation early): what
            # has none yet is checked again for up to 30 s; a real gap persists
            no_data: list[str] = []

            def all_have_data() -> bool:
                no_data[:] = check_rules(prom) + check_dashboard(prom)
                return not no_data

            try:
                prom.wait_for("data for every rule and panel", all_have_data, timeout_s=30,
                              poll_s=2)
            except TimeoutError:
                raise AssertionError("\n".join(no_data)) from None
            check_fidelity(prom)
            report(prom, sent)


def check_metric_names(exported: set[str]) -> None:
    """Every series the rules and the dashboard name is one the engine really exports."""
    documented = documented_shadow_metrics()
    named = set()
    for rule in rules():
        named |= {n for n in metric_names(rule["expr"]) if not n.startswith("shadow:")}
    for _, t in dashboard_targets():
        named |= metric_names(t["expr"])
    assert {n for n in named if n.startswith("shadow_")} <= documented
    not_exported = named - exported
    assert not not_exported, f"named but not exported by the live engine: {sorted(not_exported)}"


def check_no_double_counting(prom: PrometheusServer, sent: int) -> None:
    """Both jobs carry every shadow counter; the rules' `max by` keeps one copy."""
    jobs = {r["metric"]["job"] for r in prom.query("shadow_block_lookups_total")}
    assert jobs == {"vllm", "shadow-connector"}
    # NOTE: the raw counters, not increase(): with the few samples a short test run gives,
    # increase() extrapolates to the window's edges (15 requests read as 26.55 once in CI).
    per_engine = prom.query("max by (deployment, model_name, engine) (shadow_observed_requests_total)")
    assert len(per_engine) == 1
    assert float(per_engine[0]["value"][1]) == sent
    both = prom.query("sum by (deployment, model_name, engine) (shadow_observed_requests_total)")
    assert float(both[0]["value"][1]) == 2 * sent, "each job carries one full copy"


def check_tiers_on_both_routes(prom: PrometheusServer) -> None:
    """The two host tiers reach Prometheus through vLLM's /metrics (the stats path) and the own
    endpoint alike: the same series, equal values, something stored."""
    def equal() -> bool:
        got: dict[str, dict[str, float]] = {}
        for r in prom.query("shadow_tier_stored_bytes_total"):
            got.setdefault(r["metric"]["job"], {})[r["metric"]["tier"]] = float(r["value"][1])
        return (set(got) == {"vllm", "shadow-connector"} and len(got["vllm"]) == 2
                and got["vllm"] == got["shadow-connector"] and min(got["vllm"].values()) > 0)
    prom.wait_for("the tiers' stored bytes equal on both scrape jobs", equal, timeout_s=30)


def check_rules(prom: PrometheusServer) -> list[str]:
    """Every recording rule (by name and by its expression) and every alert's subject has finite data."""
    problems = []
    for rule in rules():
        if "record" in rule:
            exprs = {rule["record"]: rule["record"], f"{rule['record']} (expr)": rule["expr"]}
        else:
            exprs = {f"alert {rule['alert']}": alert_subject(rule["expr"])}
        for what, expr in exprs.items():
            if not finite_values(prom.query(expr)):
                problems.append(f"rule {what}: no finite data")
    groups = prom.rule_groups()
    for g in groups:
        for r in g["rules"]:
            if r["health"] != "ok":
                problems.append(f"rule {r['name']}: health {r['health']} {r.get('lastError')}")
    return problems


def check_dashboard(prom: PrometheusServer) -> list[str]:
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "deploy/grafana/dashboards/shadow.json").read_text())
    values = resolve_variables(prom, dashboard)
    assert "vllm" in values["policy"]
    problems = []
    for panel, t in dashboard_targets():
        if not finite_values(prom.query(substitute(t["expr"], values))):
            problems.append(f"panel {panel['id']} {panel['title']!r} target {t['refId']}: no finite data")
    return problems


def check_fidelity(prom: PrometheusServer) -> None:
    """Requests were sent one at a time: the shadow vllm policy at the engine's capacity matches."""
    last: list = []

    def close_enough() -> bool:
        last[:] = prom.query("shadow:vllm_fidelity_error:rate5m")
        return len(last) == 1 and abs(float(last[0]["value"][1])) < 0.05

    # NOTE: settled() waits for the shadow's counters only; vLLM's own prefix-cache counters reach
    # its /metrics through the engine's stats path and may trail by a scrape or two on a loaded
    # machine (a CI run saw +0.061 once, the same code 0.0 on rerun).  A real mismatch persists:
    # wait for the recorded error to come within bounds, and fail with its last value if it never does.
    try:
        prom.wait_for("the vllm policy's fidelity error within 0.05", close_enough, timeout_s=45)
    except TimeoutError:
        raise AssertionError(f"fidelity error stayed >= 0.05: {last}") from None
    # NOTE: only a *firing* alert counts.  The alert may be pending for a moment at start-up: the
    # shadow's per-cache series appear with the first request while vLLM's counters exist from 0,
    # so early rate() windows differ; `for: 15m` in rules.yml exists to absorb exactly that.
    firing = prom.query('ALERTS{alertname="ShadowFidelityDrift",alertstate="firing"}')
    assert not firing, firing


def report(prom: PrometheusServer, sent: int) -> None:
    """What the run measured (shown with ``pytest -s``)."""
    def show(expr: str) -> None:
        for r in prom.query(expr):
            labels = ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items()) if k in ("policy", "capacity_blocks"))
            print(f"  {expr} {{{labels}}} = {float(r['value'][1]):.4f}")
    print(f"\nlive shadow, {sent} requests:")
    show('max(vllm:prefix_cache_hits_total) / max(vllm:prefix_cache_queries_total)')
    at_engine_capacity = (' and on (model_name, engine, capacity_blocks)'
                          ' count_values by (model_name, engine) ("capacity_blocks", shadow_engine_capacity_blocks)')
    show(f'max(shadow_prefix_hit_tokens_total{{policy="vllm"}}{at_engine_capacity})'
         f' / max(shadow_query_tokens_total{{policy="vllm"}}{at_engine_capacity})')
    show("shadow:engine_prefix_hit_ratio:rate5m")
    show("shadow:vllm_engine_capacity_prefix_hit_ratio:rate5m")
    show("shadow:vllm_fidelity_error:rate5m")
    show("shadow:block_prefix_hit_ratio:rate5m")
    show("shadow:gap_spanning_gain:rate5m")
