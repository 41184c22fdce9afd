"""Counters start again at 0 when a server restarts (docs/metrics.md, "Restarts"): every counter
that deploy/'s rules and dashboard read goes through ``rate()`` or ``increase()``, which add
across a reset; a counter read raw would drop at every restart."""

from __future__ import annotations

import re

from tests.deploy.prometheus_support import dashboard_targets, rules

#: A counter's name as Prometheus exposes it (``shadow_*_total``, ``vllm:*_total``).
COUNTER = re.compile(r"(?<![A-Za-z0-9_:])([A-Za-z_][A-Za-z0-9_]*:?[A-Za-z0-9_]*_total)\b")
RESET_SAFE = ("rate(", "increase(")


def raw_counters(expr: str) -> list[str]:
    """The counters in ``expr`` that are not the direct argument of rate() or increase()."""
    out = []
    for m in COUNTER.finditer(expr):
        before = expr[:m.start()].rstrip()
        if not before.endswith(RESET_SAFE):
            out.append(m.group(1))
    return out


def test_the_check_finds_a_raw_counter() -> None:
    assert raw_counters("max by (engine) (shadow_errors_total)") == ["shadow_errors_total"]
    assert raw_counters("rate(shadow_errors_total[5m]) / increase(vllm:x_total{a=\"b\"}[1h])") == []


def test_rules_read_every_counter_through_rate_or_increase() -> None:
    seen = 0
    for rule in rules():
        bad = raw_counters(rule["expr"])
        assert not bad, f"{rule.get('record') or rule.get('alert')}: {bad} read raw"
        seen += len(COUNTER.findall(rule["expr"]))
    assert seen > 20


def test_dashboard_reads_every_counter_through_rate_or_increase() -> None:
    seen = 0
    for panel, t in dashboard_targets():
        bad = raw_counters(t["expr"])
        assert not bad, f"panel {panel['title']!r}: {bad} read raw"
        seen += len(COUNTER.findall(t["expr"]))
    assert seen > 20
