"""Offline checks of grafana/: the alert rules (promtool), the dashboard (structure, a
grafana-foundation-sdk round trip, PromQL that parses and names only metrics the gateway defines)
and the README's metric and alert reference (generated from the same definitions)."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any, cast

import pytest
import yaml

from gateway.observability.metrics import SPECS, Metrics
from tests.support.grafana import (
    ALERTS,
    ALERTS_TEST,
    DASHBOARD,
    FILE_SELECTOR,
    NOT_FROM_THE_GATEWAY,
    README,
    RUNBOOK_BASE,
    SCRAPE_JOB,
    alert_rules,
    all_rules,
    dashboard,
    dashboard_queries,
    metric_names,
    missing_tool,
    panels,
    recorded_names,
    recording_rules,
    strip_threshold,
    substitute,
    variable_selectors,
)

ROW_TITLES = [
    "Overview",
    "Requests and decisions",
    "Latency",
    "Upstreams",
    "Observe (hooks/observe)",
    "Configuration and build",
    "Resources",
    "Connections, authentication and uploads",
    "Rate limits and shared state",
]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
OFFLINE_VALUES = {
    "cluster": ".*",
    "namespace": ".*",
    "job": SCRAPE_JOB,
    "instance": ".+",
    "upstream": ".+",
    "datasource": "prometheus",
}
RANGE_FUNCTIONS = re.compile(r"\b(rate|irate|increase|delta|deriv|\w+_over_time)\(")
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created")}


def families() -> list[Any]:
    metrics = Metrics()
    return [getattr(metrics, spec.attr) for spec in SPECS]


# private, of prometheus_client: a metric object has no public name, type or label names before it
# is collected, and the families are compared to the README without collecting them
def exposed_name(family: Any) -> str:
    name: str = family._name
    return name + ("_total" if family._type == "counter" else "")


def defined_sample_names() -> set[str]:
    names = set()
    for family in families():
        for suffix in SUFFIXES[str(family._type)]:
            names.add(f"{family._name}{suffix}")
    return names


# ------------------------------------------------------------------------------------------------
# Alert rules


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, cwd=ALERTS.parent)


def test_promtool_check_rules(promtool: str) -> None:
    proc = run([promtool, "check", "rules", str(ALERTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(all_rules())} rules found" in proc.stdout


def test_promtool_test_rules(promtool: str) -> None:
    proc = run([promtool, "test", "rules", str(ALERTS_TEST)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def readme_anchors() -> set[str]:
    return {github_anchor(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", README.read_text(), re.MULTILINE)}


def test_alert_rules_are_complete() -> None:
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names must be unique"
    anchors = readme_anchors()
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description", "runbook", "runbook_url"}, rule["alert"]
        assert f'"{rule["alert"]}"' in rule["annotations"]["runbook"], (
            f"{rule['alert']}: runbook must name its README section"
        )
        url = rule["annotations"]["runbook_url"]
        assert url == RUNBOOK_BASE + rule["alert"].lower(), f"{rule['alert']}: runbook_url {url}"
        assert url.split("#", 1)[1] in anchors, f"{rule['alert']}: grafana/README.md has no section #{url}"


def test_recording_rules_follow_the_naming_convention() -> None:
    """level:metric:operations, one record per SLO and window, aggregated by the release labels."""
    records = recording_rules()
    assert records, "no SLO recording rules"
    for rule in records:
        assert set(rule) == {"record", "expr"}, rule["record"]
        assert re.fullmatch(r"ahp_gateway:slo_\w+:ratio_rate\d+[mhd]", rule["record"]), rule["record"]
        assert "sum by (namespace, job, service)" in rule["expr"], rule["record"]
    windows = {r["record"].rsplit("_rate", 1)[1] for r in records}
    for slo in ("availability_errors", "overhead_slow"):
        assert {r["record"].rsplit("_rate", 1)[1] for r in records if f":slo_{slo}:" in r["record"]} == windows


def test_every_rule_selects_the_gateway_by_the_replaceable_matcher(promql: Any) -> None:
    """The chart swaps FILE_SELECTOR for its release's matcher: a selector without it would not be
    scoped to the release (and would alert on other releases' series)."""
    for rule in all_rules():
        name = rule.get("alert") or rule["record"]
        ast = promql.parse(rule["expr"])
        selectors: list[Any] = []
        promql.walk(ast, lambda node: selectors.append(node) if isinstance(node, promql.VectorSelector) else None)
        assert selectors, name
        assert rule["expr"].count(FILE_SELECTOR) == len(selectors), f"{name}: a selector lacks {FILE_SELECTOR}"


def test_burn_rate_alerts_pair_long_and_short_windows() -> None:
    burn = [r for r in alert_rules() if r["alert"].endswith("Burn")]
    assert {r["alert"] for r in burn} == {
        "AHPGatewayAvailabilityFastBurn",
        "AHPGatewayAvailabilitySlowBurn",
        "AHPGatewayOverheadFastBurn",
        "AHPGatewayOverheadSlowBurn",
    }
    pairs = re.compile(
        r"ratio_rate(\w+)\{[^}]*\} > \(([\d.]+) \* ([\d.]+)\)\s+and\s+\S+ratio_rate(\w+)\{[^}]*\} > \(([\d.]+) \* ([\d.]+)\)"
    )
    expected = {"Fast": [("1h", "14.4", "5m"), ("6h", "6", "30m")], "Slow": [("1d", "3", "2h"), ("3d", "1", "6h")]}
    for rule in burn:
        found = pairs.findall(rule["expr"])
        speed = "Fast" if "Fast" in rule["alert"] else "Slow"
        assert [(f[0], f[1], f[3]) for f in found] == expected[speed], rule["alert"]
        budget = "0.001" if "Availability" in rule["alert"] else "0.01"
        assert all(f[1] == f[4] and f[2] == f[5] == budget for f in found), rule["alert"]


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text())
    assert tests["rule_files"] == [ALERTS.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
            for alert in check["exp_alerts"]:
                assert alert.get("exp_annotations"), f"{check['alertname']}: check the rendered annotations too"
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), "alerts without a firing test"
    assert names - quiet == set(), "alerts without a not-firing test"
    assert (firing | quiet) - names == set(), "tests for alerts that do not exist"


def test_alert_expressions_parse_and_use_defined_metrics(promql: Any) -> None:
    defined = defined_sample_names() | NOT_FROM_THE_GATEWAY | recorded_names()
    for rule in recording_rules():
        unknown = metric_names(promql, promql.parse(rule["expr"])) - defined_sample_names()
        assert not unknown, f"{rule['record']}: metrics the gateway does not define: {sorted(unknown)}"
    for rule in alert_rules():
        ast = promql.parse(rule["expr"])
        unknown = metric_names(promql, ast) - defined
        assert not unknown, f"{rule['alert']}: metrics the gateway does not define: {sorted(unknown)}"
        signal = strip_threshold(promql, ast)
        assert str(signal) != str(ast) or rule["alert"] == "AHPGatewayAbsent", f"{rule['alert']}: no threshold found"


# ------------------------------------------------------------------------------------------------
# Dashboard


def test_dashboard_structure() -> None:
    dash = dashboard()
    assert dash["uid"] == "ahp-gateway" and dash["title"] == "AHP Gateway"
    assert dash["schemaVersion"] >= 39, "Grafana 11 dashboards use schemaVersion 39 or later"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["cluster"]["query"] == "label_values(ahp_gateway_build_info, cluster)"
    assert variables["cluster"]["allValue"] == ".*", "All must also match series without a cluster label"
    assert variables["namespace"]["query"] == 'label_values(ahp_gateway_build_info{cluster=~"$cluster"}, namespace)'
    assert variables["namespace"]["allValue"] == ".*", "All must also match series without a namespace label"
    assert variables["job"]["query"] == (
        'label_values(ahp_gateway_build_info{cluster=~"$cluster", namespace=~"$namespace"}, job)'
    )
    assert "instance" in variables
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ROW_TITLES
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dash):
        if panel["type"] == "row":
            continue
        where = f"panel {panel['id']} {panel['title']!r}"
        assert panel.get("description", "").strip(), f"{where}: no description"
        assert panel["datasource"] == DATASOURCE, f"{where}: datasource must be the ${{datasource}} variable"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: no unit"
        assert panel["targets"], f"{where}: no query"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, f"{where}: target datasource must be ${{datasource}}"
            assert target["expr"].strip() and target["refId"]
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, f"{where}: outside the 24-column grid"
    text = DASHBOARD.read_text()
    uids = set(re.findall(r'"uid":\s*"([^"]*)"', text))
    assert uids <= {"ahp-gateway", "${datasource}", "-- Grafana --"}, f"hard-coded datasource uids: {uids}"


def test_dashboard_panels_do_not_overlap() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in taken, f"{panel['title']!r} overlaps {taken[(x, y)]!r}"
                taken[(x, y)] = panel["title"]


def test_dashboard_covers_the_on_call_questions() -> None:
    exprs = "\n".join(q.expr for q in dashboard_queries())
    for needed in [
        'sum by (outcome) (rate(ahp_gateway_requests_total{method="hooks/intercept"',
        "sum by (upstream, code) (rate(ahp_gateway_denials_total",
        "sum by (kind) (rate(ahp_gateway_denials_total",
        "histogram_quantile(0.5, sum by (le) (rate(ahp_gateway_request_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(ahp_gateway_request_duration_seconds_bucket",
        "histogram_quantile(0.5, sum by (le) (rate(ahp_gateway_overhead_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le) (rate(ahp_gateway_overhead_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (upstream, le) (rate(ahp_gateway_upstream_duration_seconds_bucket",
        'rate(ahp_gateway_upstream_calls_total{outcome!~"ok|deny"',
        "ahp_gateway_upstream_circuit_open",
        "ahp_gateway_fail_open_skips_total",
        "ahp_gateway_observe_deliveries_total",
        "ahp_gateway_observe_drops_total",
        "ahp_gateway_observe_queue_depth",
        "ahp_gateway_inflight_requests",
        "ahp_gateway_config_last_reload_successful",
        "ahp_gateway_config_reloads_total",
        "time() - max by (instance) (ahp_gateway_config_last_success_timestamp_seconds",
        "ahp_gateway_build_info",
        "sum by (instance) (rate(ahp_gateway_process_cpu_seconds_total{",
        "sum by (instance) (ahp_gateway_process_resident_memory_bytes{",
        "ahp_gateway_process_open_fds{",
        "ahp_gateway_process_max_fds{",
        "sum by (instance, listener) (ahp_gateway_open_connections{",
        "sum by (reason) (rate(ahp_gateway_auth_failures_total{",
        "sum by (harness, outcome) (rate(ahp_gateway_native_requests_total{",
        "sum by (outcome) (rate(ahp_gateway_uploads_total{",
        "sum by (limit) (rate(ahp_gateway_rate_limited_total{",
        "sum by (op) (rate(ahp_gateway_state_errors_total{",
        "sum by (op, le) (rate(ahp_gateway_state_seconds_bucket{",
    ]:
        assert needed in exprs, f"no panel queries {needed!r}"


def test_dashboard_filters_every_query_by_namespace_and_job() -> None:
    """Releases in different clusters, namespaces (or several jobs) are never mixed in one panel."""
    for query in dashboard_queries():
        assert 'cluster=~"$cluster", namespace=~"$namespace", job=~"$job"' in query.expr, query.where
    for name, selector, _label in variable_selectors():
        if name != "cluster":
            assert 'cluster=~"$cluster"' in selector, f"variable {name}"
        if name not in ("cluster", "namespace"):
            assert 'namespace=~"$namespace"' in selector, f"variable {name}"


def test_dashboard_rates_use_the_rate_interval() -> None:
    for query in dashboard_queries():
        for match in RANGE_FUNCTIONS.finditer(query.expr):
            window = re.match(r"[^\[]*\[([^\]]+)\]", query.expr[match.end() :])
            assert window and window[1] == "$__rate_interval", (
                f"{query.where}: {match[1]}() must use [$__rate_interval]"
            )


def test_dashboard_promql_parses_and_uses_defined_metrics(promql: Any) -> None:
    defined = defined_sample_names() | NOT_FROM_THE_GATEWAY
    problems = []
    for query in dashboard_queries():
        try:
            ast = promql.parse(substitute(query.expr, OFFLINE_VALUES))
        except ValueError as exc:
            problems.append(f"{query.where}: parse error: {exc}")
            continue
        unknown = metric_names(promql, ast) - defined
        if unknown:
            problems.append(f"{query.where}: metrics the gateway does not define: {sorted(unknown)}")
    for name, selector, _label in variable_selectors():
        ast = promql.parse(substitute(selector, OFFLINE_VALUES))
        unknown = metric_names(promql, ast) - defined
        if unknown:
            problems.append(f"variable {name}: metrics the gateway does not define: {sorted(unknown)}")
    assert not problems, "\n".join(problems)


def key_paths_lost(before: Any, after: Any, path: str = "$") -> list[str]:
    if isinstance(before, dict):
        if not isinstance(after, dict):
            return [f"{path} (became {type(after).__name__})"]
        lost = [f"{path}.{key}" for key in before if key not in after]
        for key, value in before.items():
            if key in after:
                lost += key_paths_lost(value, after[key], f"{path}.{key}")
        return lost
    if isinstance(before, list):
        if not isinstance(after, list) or len(after) != len(before):
            return [f"{path} (list changed)"]
        return [
            p for i, (b, a) in enumerate(zip(before, after, strict=True)) for p in key_paths_lost(b, a, f"{path}[{i}]")
        ]
    return []


def test_dashboard_round_trips_through_the_grafana_schema() -> None:
    """The SDK ignores unknown keys, so a key lost in the round trip is misspelt or misplaced."""
    try:
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.cog.plugins import register_default_plugins
        from grafana_foundation_sdk.models.dashboard import Dashboard
    except ImportError:
        missing_tool("grafana-foundation-sdk", 'pip install "grafana-foundation-sdk==1769699379!11.6.0"')
    register_default_plugins()  # typed panel options and Prometheus targets
    raw = dashboard()
    again = json.loads(json.dumps(Dashboard.from_json(raw), cls=JSONEncoder))
    assert key_paths_lost(raw, again) == []
    typed_targets = cast(Any, Dashboard.from_json(raw).panels)[1].targets
    assert type(typed_targets[0]).__module__.endswith("prometheus"), "Prometheus targets were not typed"


# ------------------------------------------------------------------------------------------------
# README


def readme_table(heading: str, path: Any = README) -> list[list[str]]:
    text = path.read_text()
    section = text.split(heading, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `ahp_gateway_")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize(
    ("path", "heading"),
    [(README, "## Metrics"), (README.parent.parent / "docs" / "operations" / "observability.md", "# Observability")],
    ids=["grafana", "project"],
)
def test_readme_documents_every_metric_exactly(path: Any, heading: str) -> None:
    table = {row[0].strip("`"): row for row in readme_table(heading, path)}
    expected = {exposed_name(f): f for f in families()}
    assert sorted(table) == sorted(expected), "README metric table and gateway/observability/metrics.py differ"
    for name, family in expected.items():
        _, kind, labels, _meaning = table[name]
        assert kind == family._type, f"{name}: README says {kind}, metrics.py defines {family._type}"
        documented = [label.strip("` ") for label in labels.split(",") if label.strip() not in ("", "—")]
        defined = list(family._labelnames)
        assert documented == defined, f"{name}: README labels {documented}, defined {defined}"


def test_readme_documents_every_alert_and_row() -> None:
    text = README.read_text()
    for rule in alert_rules():
        assert f"### {rule['alert']}" in text, f"README has no section for {rule['alert']}"
    for title in ROW_TITLES:
        assert f"| {title} |" in text, f"README does not describe the dashboard row {title!r}"


@pytest.mark.parametrize("path", [ALERTS, ALERTS_TEST, DASHBOARD, README], ids=lambda p: p.name)
def test_artefacts_end_with_a_newline(path: Any) -> None:
    assert path.read_text().endswith("\n")
