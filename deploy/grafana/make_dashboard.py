#!/usr/bin/env python3
"""Write deploy/grafana/dashboards/shadow.json, the live shadow's Grafana dashboard.

The dashboard is generated so that every panel's PromQL is built from the same few helpers and
follows the same rule as deploy/prometheus/rules.yml: rates are taken per scraped series and then
reduced with ``max by (deployment, model_name, engine, ...)``, which keeps one copy when a server is
scraped twice (vLLM's /metrics and the connector's own endpoint) instead of double counting.

The panels query the raw series (docs/metrics.md and vLLM's own), not the recording rules, so the
dashboard works with or without rules.yml loaded. Run ``python deploy/grafana/make_dashboard.py``
after editing; tests/deploy/test_grafana_dashboard.py fails when the JSON is out of date.

Standard library only.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

DASHBOARD_UID = "shadow-kv-live"
OUT = Path(__file__).resolve().parent / "dashboards" / "shadow.json"

DS = {"type": "prometheus", "uid": "${datasource}"}

CACHE_BY = "deployment, model_name, engine, policy, capacity_blocks"
ENGINE_BY = "deployment, model_name, engine"
ENGINE_SEL = 'model_name=~"$model", engine=~"$engine"'
CACHE_SEL = ENGINE_SEL + ', policy=~"$policy", capacity_blocks=~"$capacity"'
# Variable queries read this series: every shadow cache exports it.
VAR_METRIC = "shadow_requests_total"
# The offload tiers behind shadow caches (kv_connector_extra_config.tiers): one more label.
TIER_BY = CACHE_BY + ", tier"
TIER_SEL = CACHE_SEL + ', tier=~"$tier"'
TIER_VAR_METRIC = "shadow_tier_hit_tokens_total"
# The replicas of a fleet (kv_connector_extra_config.replica; unique names, so one copy per
# replica is `max by (model_name, replica)` whatever the deployment labels).
REPLICA_BY = "model_name, replica"
REPLICA_SEL = ENGINE_SEL + ', replica=~"$replica"'
REPLICA_CACHE_BY = REPLICA_BY + ", policy, capacity_blocks"
REPLICA_CACHE_SEL = CACHE_SEL + ', replica=~"$replica"'


def rate(metric: str, sel: str = CACHE_SEL, by: str = CACHE_BY, window: str = "$__rate_interval") -> str:
    """Per-series rate reduced to one copy per ``by`` group (see the module docstring)."""
    return f"max by ({by}) (rate({metric}{{{sel}}}[{window}]))"


def increase(metric: str, sel: str = CACHE_SEL, by: str = CACHE_BY) -> str:
    """Growth over the dashboard's time range, one copy per ``by`` group (instant panels)."""
    return f"max by ({by}) (increase({metric}{{{sel}}}[$__range]))"


def engine_ratio() -> str:
    """The engine's own first-miss token hit ratio; the connector's copy where vLLM's is absent."""
    return (
        f"({rate('vllm:prefix_cache_hits_total', ENGINE_SEL, ENGINE_BY)}"
        f" / {rate('vllm:prefix_cache_queries_total', ENGINE_SEL, ENGINE_BY)})"
        f" or ({rate('shadow_engine_hit_tokens_total', ENGINE_SEL, ENGINE_BY)}"
        f" / {rate('shadow_engine_query_tokens_total', ENGINE_SEL, ENGINE_BY)})"
    )


def token_ratio(sel: str = CACHE_SEL) -> str:
    """A shadow cache's first-miss token hit ratio (the unit of vllm:prefix_cache_*)."""
    return f"{rate('shadow_prefix_hit_tokens_total', sel)} / {rate('shadow_query_tokens_total', sel)}"


def tier_share(grow: Callable[..., str]) -> str:
    """Tier hit tokens over the tier-1 cache's looked-up prompt tokens (what the tier adds to
    its first-miss token hit ratio), per cache and tier; ``grow`` is :func:`rate` or
    :func:`increase`."""
    return (f"{grow('shadow_tier_hit_tokens_total', TIER_SEL, TIER_BY)}"
            f" / on ({CACHE_BY}) group_left() {grow('shadow_query_tokens_total')}")


def gpu_plus_tier(grow: Callable[..., str]) -> str:
    """The tier-1 cache's first-miss token hit ratio plus what its tier adds."""
    return (f"({tier_share(grow)}) + on ({CACHE_BY}) group_left() "
            f"({grow('shadow_prefix_hit_tokens_total')} / {grow('shadow_query_tokens_total')})")


def ttft_saving_ratio(prefix: str, sel: str = CACHE_SEL, by: str = CACHE_BY) -> str:
    """Prefill seconds saved over the no-hit prefill seconds (spent + saved) of ``prefix``'s
    pair of counters (``<prefix>_seconds_total``, ``<prefix>_seconds_saved_total``)."""
    saved = rate(f"{prefix}_seconds_saved_total", sel, by)
    return f"{saved} / ({rate(f'{prefix}_seconds_total', sel, by)} + {saved})"


def engine_capacity_info() -> str:
    """1 for the engine's own capacity, as a capacity_blocks label (from shadow_engine_capacity_blocks)."""
    return (
        f'count_values by ({ENGINE_BY}) ("capacity_blocks", '
        f'max by ({ENGINE_BY}) (shadow_engine_capacity_blocks{{{ENGINE_SEL}}}))'
    )


def vllm_at_engine_capacity() -> str:
    """The shadow ``vllm`` policy at the engine's own capacity (token ratio, first miss)."""
    sel = ENGINE_SEL + ', policy="vllm"'
    return (
        f"max by ({ENGINE_BY}) (({token_ratio(sel)})"
        f" * on ({ENGINE_BY}, capacity_blocks) group_left() {engine_capacity_info()})"
    )


def fleet_sum(expr: str, by: str) -> str:
    """``expr`` (one copy per replica) summed over the replicas, per ``by`` group."""
    return f"sum by ({by}) ({expr})"


def replica_ratio(hits: str, lookups: str, grow: Callable[..., str], sel: str, by: str,
                  fleet_by: str | None = None) -> str:
    """hits / lookups per replica, or (``fleet_by``) over every replica, token-weighted."""
    h, q = grow(hits, sel, by), grow(lookups, sel, by)
    if fleet_by is not None:
        h, q = fleet_sum(h, fleet_by), fleet_sum(q, fleet_by)
    return f"{h} / {q}"


def target(expr: str, legend: str, ref: str, instant: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": not instant,
        "instant": instant,
    }
    if instant:
        t["format"] = "table"
    return t


_next_id = 0


def _pid() -> int:
    global _next_id
    _next_id += 1
    return _next_id


def row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "id": _pid(), "title": title, "collapsed": False, "panels": [],
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}


def _panel(kind: str, title: str, desc: str, targets: list[dict[str, Any]], x: int, y: int, w: int, h: int,
           field_config: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": kind,
        "id": _pid(),
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": field_config,
        "options": options,
    }


def timeseries(title: str, desc: str, targets: list[dict[str, Any]], unit: str, x: int, y: int,
               w: int = 12, h: int = 8) -> dict[str, Any]:
    return _panel(
        "timeseries", title, desc, targets, x, y, w, h,
        {"defaults": {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0,
                                               "spanNulls": True}},
         "overrides": []},
        {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "mean"]},
         "tooltip": {"mode": "multi", "sort": "desc"}})


def bars(title: str, desc: str, targets: list[dict[str, Any]], unit: str, x: int, y: int,
         w: int = 12, h: int = 9) -> dict[str, Any]:
    return _panel(
        "bargauge", title, desc, targets, x, y, w, h,
        {"defaults": {"unit": unit, "min": 0, "max": 1}, "overrides": []},
        {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
         "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": True}})


def gap_and_first_miss(grow: Callable[[str], str], hits: str, prefix_hits: str, denominator: str,
                       legend: str, instant: bool = False) -> list[dict[str, Any]]:
    """Two targets: the gap-spanning ratio (A) and the first-miss ratio (B) over one denominator.

    ``grow`` is :func:`rate` (time series) or :func:`increase` (the whole range, instant).
    """
    return [target(f"{grow(hits)} / {grow(denominator)}", "gap-spanning " + legend, "A", instant=instant),
            target(f"{grow(prefix_hits)} / {grow(denominator)}", "first-miss " + legend, "B", instant=instant)]


def variable(name: str, label: str, query: str, sort: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": sort,
        "hide": 0,
        "options": [],
        "regex": "",
    }


def build() -> dict[str, Any]:
    global _next_id
    _next_id = 0
    legend_engine = "({{deployment}} e{{engine}})"
    legend_cache = "{{policy}} @ {{capacity_blocks}} " + legend_engine
    legend_bar = "{{policy}} @ {{capacity_blocks}}"
    panels: list[dict[str, Any]] = []

    y = 0
    panels.append(row("Policies over time (selected capacities)", y))
    y += 1
    panels.append(timeseries(
        "Block hit ratio per policy",
        "Gap-spanning (solid): a block counts as hit even after an earlier miss. First-miss: only blocks "
        "before the first miss, what vLLM and SGLang reuse.",
        gap_and_first_miss(rate, "shadow_block_hits_total", "shadow_block_prefix_hits_total",
                           "shadow_block_lookups_total", legend_cache),
        "percentunit", 0, y))
    panels.append(timeseries(
        "Compute-saving ratio per policy",
        "Cost of the hit blocks over cost of the looked-up blocks, under the connector's cost model.",
        gap_and_first_miss(rate, "shadow_cost_saved_total", "shadow_cost_prefix_saved_total",
                           "shadow_cost_lookup_total", legend_cache),
        "percentunit", 12, y))
    y += 8

    panels.append(row("Against capacity (whole time range)", y))
    y += 1
    panels.append(bars(
        "Hit ratio against capacity",
        "Block hit ratio over the dashboard's time range, per policy and capacity (blocks).",
        gap_and_first_miss(increase, "shadow_block_hits_total", "shadow_block_prefix_hits_total",
                           "shadow_block_lookups_total", legend_bar, instant=True),
        "percentunit", 0, y))
    panels.append(bars(
        "Compute-saving ratio against capacity",
        "Compute-saving ratio over the dashboard's time range, per policy and capacity (blocks).",
        gap_and_first_miss(increase, "shadow_cost_saved_total", "shadow_cost_prefix_saved_total",
                           "shadow_cost_lookup_total", legend_bar, instant=True),
        "percentunit", 12, y))
    y += 9

    panels.append(row("Fidelity and what other policies would gain", y))
    y += 1
    panels.append(timeseries(
        "Fidelity: engine vs shadow vllm policy",
        "The engine's own prefix-cache hit ratio (tokens) beside the shadow `vllm` policy at the engine's "
        "capacity and at the selected capacities. The first two must agree; when they drift apart the "
        "shadow can no longer be trusted (alert ShadowFidelityDrift).",
        [target(engine_ratio(), "engine ({{deployment}} e{{engine}})", "A"),
         target(vllm_at_engine_capacity(), "shadow vllm @ engine capacity ({{deployment}} e{{engine}})", "B"),
         target(token_ratio(ENGINE_SEL + ', policy="vllm", capacity_blocks=~"$capacity"'),
                "shadow vllm @ {{capacity_blocks}} ({{deployment}} e{{engine}})", "C")],
        "percentunit", 0, y))
    panels.append(timeseries(
        "Fidelity error (shadow vllm @ engine capacity − engine)",
        "Near 0 while the shadow reproduces the engine.",
        [target(f"{vllm_at_engine_capacity()} - on (deployment, model_name, engine) ({engine_ratio()})",
                "{{deployment}} e{{engine}}", "A")],
        "percentunit", 12, y))
    y += 8
    panels.append(timeseries(
        "Best policy's gain over the engine",
        "Per capacity, the best policy's first-miss token hit ratio minus the engine's own. At the "
        "engine's capacity this is what a better eviction policy alone would gain.",
        [target(f"topk by (deployment, model_name, engine, capacity_blocks) (1, {token_ratio()})"
                f" - on (deployment, model_name, engine) group_left() ({engine_ratio()})",
                "best {{policy}} @ {{capacity_blocks}} ({{deployment}} e{{engine}})", "A")],
        "percentunit", 0, y))
    panels.append(timeseries(
        "Gap-spanning gain over first-miss matching",
        "Block hit ratio with gap-spanning matching minus first-miss matching: what an engine that "
        "reused blocks after a miss would add.",
        [target(f"({rate('shadow_block_hits_total')} - {rate('shadow_block_prefix_hits_total')})"
                f" / {rate('shadow_block_lookups_total')}", legend_cache, "A")],
        "percentunit", 12, y))
    y += 8

    panels.append(row("Fleet: replicas compared", y))
    y += 1
    engine_tokens = ("shadow_engine_hit_tokens_total", "shadow_engine_query_tokens_total")
    cache_tokens = ("shadow_prefix_hit_tokens_total", "shadow_query_tokens_total")
    panels.append(timeseries(
        "Engine prefix hit ratio per replica",
        "Each replica's own prefix-cache hit ratio (tokens, the connector's copy of the engine's "
        "counters, labelled with kv_connector_extra_config.replica) and the fleet's: its hit tokens "
        "over its prompt tokens. Replicas far apart mean the router sends them different traffic.",
        [target(replica_ratio(*engine_tokens, rate, REPLICA_SEL, REPLICA_BY), "{{replica}}", "A"),
         target(replica_ratio(*engine_tokens, rate, REPLICA_SEL, REPLICA_BY, "model_name"),
                "fleet ({{model_name}})", "B")],
        "percentunit", 0, y))
    panels.append(timeseries(
        "Shadow hit ratio per replica",
        "First-miss token hit ratio of the selected shadow caches on each replica, and over the fleet "
        "(every replica with that policy and capacity, the traffic routed as it was).",
        [target(replica_ratio(*cache_tokens, rate, REPLICA_CACHE_SEL, REPLICA_CACHE_BY),
                "{{policy}} @ {{capacity_blocks}} on {{replica}}", "A"),
         target(replica_ratio(*cache_tokens, rate, REPLICA_CACHE_SEL, REPLICA_CACHE_BY,
                              "model_name, policy, capacity_blocks"),
                "{{policy}} @ {{capacity_blocks}} fleet", "B")],
        "percentunit", 12, y))
    y += 8
    observed = rate("shadow_observed_requests_total", REPLICA_SEL, REPLICA_BY)
    panels.append(timeseries(
        "Requests per replica",
        "Requests each replica admitted per second, and the busiest replica's rate over the mean "
        "(1 = the router spreads the load evenly).",
        [target(observed, "{{replica}}", "A"),
         target(f"max by (model_name) ({observed}) / avg by (model_name) ({observed})",
                "busiest / mean ({{model_name}})", "B")],
        "reqps", 0, y))
    seen = increase("shadow_observed_requests_total", REPLICA_SEL, REPLICA_BY)
    panels.append(bars(
        "Replicas over the whole time range",
        "Per replica over the dashboard's time range: its engine's prefix hit ratio (tokens) and its "
        "share of the fleet's requests.",
        [target(replica_ratio(*engine_tokens, increase, REPLICA_SEL, REPLICA_BY),
                "engine hit ratio {{replica}}", "A", instant=True),
         target(f"{seen} / on (model_name) group_left() sum by (model_name) ({seen})",
                "share of requests {{replica}}", "B", instant=True)],
        "percentunit", 12, y))
    y += 9

    panels.append(row("What a host tier of N GiB would add", y))
    y += 1
    legend_tier = "{{tier}} behind {{policy}} @ {{capacity_blocks}}"
    panels.append(timeseries(
        "GPU + host tier token hit ratio per tier",
        "First-miss token hit ratio of the shadow cache (GPU) plus the tokens its modelled offload tier "
        "(tier label MEDIUM:SIZE:POLICY, vLLM's CPU offloading) would load, over the prompt tokens looked "
        "up; the tier alone is what it adds (docs/tiers.md).",
        [target(gpu_plus_tier(rate), "GPU + " + legend_tier + " " + legend_engine, "A"),
         target(tier_share(rate), "tier adds: " + legend_tier + " " + legend_engine, "B")],
        "percentunit", 0, y))
    panels.append(bars(
        "What each host tier size would add (whole time range)",
        "Tier hit tokens over looked-up prompt tokens over the dashboard's time range, per tier size "
        "and the cache it sits behind: read along a row of sizes to see what more host memory buys.",
        [target(tier_share(increase), legend_tier, "A", instant=True),
         target(gpu_plus_tier(increase), "GPU + " + legend_tier, "B", instant=True)],
        "percentunit", 12, y))
    y += 9
    panels.append(timeseries(
        "Host tier traffic: bytes loaded and stored",
        "Bytes per second the tier would load (its hits) and store (the prompt's new chunks), with "
        "chunks evicted per second; loads against the medium's bandwidth say what loading would cost.",
        [target(rate("shadow_tier_loaded_bytes_total", TIER_SEL, TIER_BY), "loaded " + legend_tier, "A"),
         target(rate("shadow_tier_stored_bytes_total", TIER_SEL, TIER_BY), "stored " + legend_tier, "B")],
        "Bps", 0, y))
    panels.append(timeseries(
        "Host tier occupancy and evictions",
        "Bytes the tier holds over its capacity; evicted chunks per second (right when the tier is full).",
        [target(f"max by ({TIER_BY}) (shadow_tier_occupancy_bytes{{{TIER_SEL}}})"
                f" / max by ({TIER_BY}) (shadow_tier_capacity_bytes{{{TIER_SEL}}})",
                "full: " + legend_tier, "A"),
         target(rate("shadow_tier_evictions_total", TIER_SEL, TIER_BY), "evictions/s " + legend_tier, "B")],
        "percentunit", 12, y))
    y += 8

    panels.append(row("How big should the cache be (sampled miss-ratio curve)", y))
    y += 1
    legend_frac = "{{capacity_fraction}} x engine capacity ({{deployment}} e{{engine}})"
    curve = bars(
        "Hit ratio against capacity (sampled curve, now)",
        "The engine's lookups (first miss) in an lru-ranked cache of each multiple of the engine's "
        "capacity, estimated from a sampled miss-ratio curve (SHARDS; docs/mrc.md). The bar at 1 "
        "(marked) is the engine's own size; the engine's measured ratio over the range is beside "
        "it.",
        [target(f"max by ({ENGINE_BY}, capacity_fraction) "
                f"(shadow_mrc_hit_ratio{{{ENGINE_SEL}}})", legend_frac, "A", instant=True),
         target(f"({increase('vllm:prefix_cache_hits_total', ENGINE_SEL, ENGINE_BY)}"
                f" / {increase('vllm:prefix_cache_queries_total', ENGINE_SEL, ENGINE_BY)})",
                "engine's own ratio ({{deployment}} e{{engine}})", "B", instant=True)],
        "percentunit", 0, y)
    curve["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byRegexp", "options": "^1 x engine capacity.*"},
         "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": "red"}}]}]
    panels.append(curve)
    panels.append(timeseries(
        "Capacity for a share of the reachable hits",
        "Per target share of an infinite cache's hit ratio, the smallest capacity (blocks) that "
        "reaches it, from the sampled curve; the engine's own capacity for comparison (+Inf: more "
        "than 16 x the engine's).",
        [target(f"max by ({ENGINE_BY}, target) (shadow_mrc_capacity_blocks{{{ENGINE_SEL}}})",
                "{{target}} of the reachable hits ({{deployment}} e{{engine}})", "A"),
         target(f"max by ({ENGINE_BY}) (shadow_engine_capacity_blocks{{{ENGINE_SEL}}})",
                "engine capacity ({{deployment}} e{{engine}})", "B")],
        "short", 12, y, h=9))
    y += 9

    panels.append(row("Shadow health", y))
    y += 1
    panels.append(timeseries(
        "Evictions and self-evictions",
        "Blocks evicted per second to make room; self-evictions are evicted blocks the arriving request "
        "itself needed (thrashing).",
        [target(rate("shadow_evictions_total"), "evictions " + legend_cache, "A"),
         target(rate("shadow_self_evictions_total"), "self-evictions " + legend_cache, "B")],
        "ops", 0, y))
    panels.append(timeseries(
        "Requests: observed, dropped, recorded",
        "Dropped requests never reached the shadow (the worker queue was full): any drop biases the "
        "shadow (alert ShadowDroppingRequests).",
        [target(rate(f"shadow_{what}_requests_total", ENGINE_SEL, ENGINE_BY), what + " " + legend_engine, ref)
         for what, ref in (("observed", "A"), ("dropped", "B"), ("recorded", "C"))]
        + [target(rate("shadow_skipped_requests_total"), "skipped " + legend_cache, "D")],
        "reqps", 12, y))
    y += 8
    panels.append(timeseries(
        "Recording rate",
        "Compressed bytes per second written to the lcp recording.",
        [target(rate("shadow_recorded_bytes_total", ENGINE_SEL, ENGINE_BY), "{{deployment}} e{{engine}}", "A")],
        "Bps", 0, y))
    panels.append(timeseries(
        "Recording on, stopped caches, shadow errors",
        "shadow_recording_enabled is 1 while recording; stopped caches are shadow caches that failed "
        "(out of memory, most likely: alert ShadowCacheStopped) and stopped counting; errors are "
        "exceptions caught inside the shadow (the engine kept serving).",
        [target(f'max by ({ENGINE_BY}) (shadow_recording_enabled{{{ENGINE_SEL}}})',
                "recording on ({{deployment}} e{{engine}})", "A"),
         target(f'sum by ({ENGINE_BY}) (max by ({CACHE_BY}) (shadow_cache_stopped{{{CACHE_SEL}}}))',
                "stopped caches ({{deployment}} e{{engine}})", "C"),
         target(rate("shadow_errors_total", ENGINE_SEL, ENGINE_BY), "errors/s ({{deployment}} e{{engine}})", "B")],
        "short", 12, y))
    y += 8

    panels.append(row("TTFT saved (a profile cost model: cost_model profile:FILE)", y))
    y += 1
    panels.append(timeseries(
        "TTFT seconds saved per second",
        "Prefill seconds each shadow cache's first-miss hits save per second of wall clock, from the "
        "connector's measured profile (docs/metrics.md): summed over the requests, a cache that "
        "saves 0.5 here takes half a second of prefill off every second of traffic; beside it the "
        "engine's own hits. Empty without a profile.",
        [target(rate("shadow_prefill_seconds_saved_total"), legend_cache, "A"),
         target(rate("shadow_engine_prefill_seconds_saved_total", ENGINE_SEL, ENGINE_BY),
                "engine " + legend_engine, "B")],
        "s", 0, y))
    panels.append(timeseries(
        "TTFT saving ratio per policy",
        "Prefill seconds saved over the prefill seconds the same requests take with no hit: what "
        "share of the prefill (TTFT at low load) each cache's hits remove; beside it the engine's.",
        [target(ttft_saving_ratio("shadow_prefill"), legend_cache, "A"),
         target(ttft_saving_ratio("shadow_engine_prefill", ENGINE_SEL, ENGINE_BY),
                "engine " + legend_engine, "B")],
        "percentunit", 12, y))

    eng = f'{VAR_METRIC}{{model_name=~"$model"}}'
    pol = f'{VAR_METRIC}{{model_name=~"$model", engine=~"$engine"}}'
    cap = f'{VAR_METRIC}{{model_name=~"$model", engine=~"$engine", policy=~"$policy"}}'
    templating = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": [], "multi": False, "includeAll": False},
        variable("model", "model", f"label_values({VAR_METRIC}, model_name)"),
        variable("engine", "engine (DP rank)", f"label_values({eng}, engine)", sort=3),
        variable("replica", "replica", f"label_values({pol}, replica)"),
        variable("policy", "policy", f"label_values({pol}, policy)"),
        variable("capacity", "capacity (blocks)", f"label_values({cap}, capacity_blocks)", sort=3),
        variable("tier", "host tier", f'label_values({TIER_VAR_METRIC}{{model_name=~"$model", '
                 f'engine=~"$engine"}}, tier)'),
    ]
    return {
        "uid": DASHBOARD_UID,
        "title": "shadow: live prefix-cache shadow",
        "description": "What other eviction policies and cache sizes would hit and save, beside the engine's "
                       "own prefix cache (shadow.connector.ShadowConnector; see deploy/README.md).",
        "tags": ["shadow", "vllm", "prefix-cache"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": templating},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    text = render()
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
