"""Shared helpers for the dashboard and alert checks: file locations, the PromQL checks
(variable substitution, parsing, metric names, threshold stripping) and the Prometheus tools.

promtool and prometheus come from the Debian package ``prometheus`` (2.42); PromQL is parsed
with ``promql-parser`` and the dashboard is round-tripped through ``grafana-foundation-sdk``.
A missing tool skips the affected tests locally and fails them when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"
DASHBOARD = GRAFANA / "ahp-gateway.json"
ALERTS = GRAFANA / "alerts.yaml"
ALERTS_TEST = GRAFANA / "alerts_test.yaml"
README = GRAFANA / "README.md"

SCRAPE_JOB = "ahp-gateway"
"""Job name used for the gateway in the live Prometheus (the chart's ServiceMonitor gives the same)."""

SCRAPE_NAMESPACE = "ahp"
"""``namespace`` target label the live Prometheus adds (the Prometheus Operator sets it in a cluster)."""

SCRAPE_CLUSTER = "test-cluster"
"""``cluster`` target label of the live Prometheus (a multi-cluster Prometheus or Thanos adds it)."""

FILE_SELECTOR = 'job=~".*ahp-gateway.*"'
"""The gateway matcher in every rule of alerts.yaml (the Helm chart replaces it with its release's)."""

NOT_FROM_THE_GATEWAY = frozenset({"up"})
"""Series Prometheus itself writes for every scrape target; the only non-gateway names allowed."""

NOT_PROVOKED_LIVE = frozenset(
    {"ahp_gateway_auth_failures_total", "ahp_gateway_native_requests_total", "ahp_gateway_uploads_total"}
)
"""Families the live module's gateway has no traffic for (no inbound auth, native adapters or
uploads configured): their panels must name exported metrics but need not return data there."""

RUNBOOK_BASE = "https://github.com/ahp-gateway/ahp-gateway/blob/main/grafana/README.md#"

GRAFANA_BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")
COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "unless", "or"})
INSTALL_HINT = "apt-get install -y --no-install-recommends prometheus  (Debian 12 package, 2.42: promtool + server)"


def missing_tool(what: str, hint: str) -> NoReturn:
    """Skip locally; fail in CI, where the tools are part of the test environment."""
    message = f"{what} is not installed; install it with: {hint}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def require_module(name: str, pin: str) -> Any:
    try:
        return __import__(name, fromlist=["_"])
    except ImportError:
        missing_tool(f"Python package {pin}", f'pip install "{pin}"')


def require_binary(name: str, what: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_tool(what, INSTALL_HINT)
    return path


# ------------------------------------------------------------------------------------------------
# Artefacts


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def all_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_rules() -> list[dict[str, Any]]:
    return [rule for rule in all_rules() if "alert" in rule]


def recording_rules() -> list[dict[str, Any]]:
    return [rule for rule in all_rules() if "record" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in recording_rules()}


def panels(dash: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Every panel, including panels nested in collapsed rows."""
    for panel in (dash or dashboard())["panels"]:
        yield panel
        yield from panel.get("panels", [])


@dataclass(frozen=True)
class Query:
    where: str
    expr: str


def dashboard_queries(dash: dict[str, Any] | None = None) -> list[Query]:
    found = []
    for panel in panels(dash):
        for target in panel.get("targets", []):
            found.append(Query(f"panel {panel['id']} {panel['title']!r} target {target['refId']}", target["expr"]))
    return found


LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


def variable_selectors(dash: dict[str, Any] | None = None) -> list[tuple[str, str, str]]:
    """(variable name, series selector, label) of every label_values() template variable."""
    found = []
    for var in (dash or dashboard())["templating"]["list"]:
        if var["type"] != "query":
            continue
        query = var["query"] if isinstance(var["query"], str) else var["query"]["query"]
        match = LABEL_VALUES.match(query.strip())
        assert match and match["selector"], (
            f"variable {var['name']}: expected label_values(selector, label), got {query!r}"
        )
        found.append((var["name"], match["selector"], match["label"]))
    return found


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace Grafana variables ($name, ${name}, ${name:fmt}); an unknown variable is an error."""
    known = {**GRAFANA_BUILTINS, **values}

    def repl(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        if name not in known:
            raise KeyError(f"unknown Grafana variable ${name} in {expr!r}")
        return known[name]

    return VARIABLE.sub(repl, expr)


# ------------------------------------------------------------------------------------------------
# PromQL


def metric_names(promql: Any, ast: Any) -> set[str]:
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql.VectorSelector):
            assert node.name, f"selector without a metric name: {node}"
            names.add(node.name)

    promql.walk(ast, visit)
    return names


def strip_threshold(promql: Any, ast: Any) -> Any:
    """The signal an alert compares: the left side of the top-level comparison (``x > 0.1`` ->
    ``x``); through ``and``/``unless``/``or`` and parentheses (the first window of a multi-window
    burn-rate alert); ``absent(x == 1)`` -> ``x``."""
    while True:
        if isinstance(ast, promql.ParenExpr):
            ast = ast.expr
        elif isinstance(ast, promql.BinaryExpr) and str(ast.op) in COMPARISONS | SET_OPERATORS:
            ast = ast.lhs
        elif isinstance(ast, promql.Call) and ast.func.name == "absent":
            ast = ast.args[0]
        else:
            return ast


def sample_names(metrics_text: str) -> set[str]:
    from prometheus_client.parser import text_string_to_metric_families

    return {sample.name for family in text_string_to_metric_families(metrics_text) for sample in family.samples}
