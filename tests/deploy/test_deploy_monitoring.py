"""The Helm chart's monitoring objects (ServiceMonitor, PrometheusRule, the Grafana dashboard), its NOTES, and the copies it keeps of repository files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import (
    CHART,
    FILE_SELECTOR,
    NAMESPACE,
    REPO,
    VALUE_IDS,
    VALUES,
    HelmResult,
    Render,
    files_of,
    load_values,
    only,
    subset,
)

pytestmark = pytest.mark.deploy


# ------------------------------------------------------------------------------------------------
# Prometheus Operator objects, Grafana dashboard, NOTES


DURATION = re.compile(r"^([0-9]+(ms|s|m|h))+$")


def check_service_monitor(monitor: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    """The fields the Prometheus Operator needs, and that they point at the chart's Service."""
    service = only(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["name"] and monitor["metadata"]["namespace"]
    spec = monitor["spec"]
    assert set(spec) <= {"jobLabel", "selector", "namespaceSelector", "endpoints"}
    assert spec["selector"]["matchLabels"] and subset(spec["selector"]["matchLabels"], service["metadata"]["labels"])
    assert spec["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    assert spec["endpoints"]
    for endpoint in spec["endpoints"]:
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics" and endpoint["scheme"] in ("http", "https")
        assert DURATION.match(endpoint["interval"]) and DURATION.match(endpoint["scrapeTimeout"])
        for relabel in endpoint.get("relabelings", []) + endpoint.get("metricRelabelings", []):
            assert relabel.get("action", "replace") in {
                "replace",
                "keep",
                "drop",
                "keepequal",
                "dropequal",
                "hashmod",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "lowercase",
                "uppercase",
            }


def check_prometheus_rule(rule: dict[str, Any]) -> None:
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["name"] and rule["metadata"]["namespace"]
    assert set(rule["spec"]) == {"groups"}
    groups = rule["spec"]["groups"]
    assert groups
    names = [g["name"] for g in groups]
    assert len(names) == len(set(names)), "rule group names must be unique"
    for group in groups:
        assert set(group) <= {"name", "interval", "rules", "limit", "partial_response_strategy"}
        assert group["name"] and group["rules"]
        for item in group["rules"]:
            assert isinstance(item["expr"], str | int) and str(item["expr"]).strip()
            assert ("alert" in item) != ("record" in item), item
            assert set(item) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            if "for" in item:
                assert DURATION.match(item["for"])
            if "alert" in item:
                assert item["labels"]["severity"] in {"critical", "warning", "info"}
                assert item["annotations"]["summary"]


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_prometheus_operator_objects(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    settings = load_values(values)
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    rules = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert len(monitors) == int(settings["serviceMonitor"]["enabled"])
    assert len(rules) == int(settings["prometheusRule"]["enabled"])
    for monitor in monitors:
        check_service_monitor(monitor, docs)
        assert monitor["metadata"]["namespace"] == (settings["serviceMonitor"]["namespace"] or NAMESPACE)
        assert subset(settings["serviceMonitor"]["labels"], monitor["metadata"]["labels"])
    for rule in rules:
        check_prometheus_rule(rule)
        text = (CHART / "files" / "alerts.yaml").read_text()
        assert text.count(FILE_SELECTOR) > 20
        release = f'namespace="{NAMESPACE}", service="{only(docs, "Service")["metadata"]["name"]}"'
        shipped = yaml.safe_load(text.replace(FILE_SELECTOR, settings["prometheusRule"]["selector"] or release))
        assert rule["spec"]["groups"] == shipped["groups"] + settings["prometheusRule"]["additionalGroups"]
        assert subset(settings["prometheusRule"]["labels"], rule["metadata"]["labels"])


def test_shipped_alerts_file_is_well_formed() -> None:
    alerts = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    assert set(alerts) == {"groups"}
    check_prometheus_rule(
        {"apiVersion": "monitoring.coreos.com/v1", "metadata": {"name": "x", "namespace": "y"}, "spec": alerts}
    )


def test_prometheus_rules_pass_promtool(render: Render, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    rule = only(render([CHART / "ci" / "full-values.yaml"]), "PrometheusRule")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    proc = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_rules_pass_the_alert_unit_tests(render: Render, tmp_path: Path) -> None:
    """The chart's PrometheusRule, after Helm's YAML round trip, still passes grafana/alerts_test.yaml."""
    unit_tests = REPO / "grafana" / "alerts_test.yaml"
    if not unit_tests.exists():
        pytest.skip("grafana/alerts_test.yaml does not exist yet")
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    values = tmp_path / "values.yaml"  # the file's own matcher: the unit tests' series carry job="ahp-gateway"
    values.write_text(yaml.safe_dump({"prometheusRule": {"enabled": True, "selector": FILE_SELECTOR}}))
    rule = only(render([values]), "PrometheusRule")
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    shutil.copy(unit_tests, tmp_path / "alerts_test.yaml")
    proc = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_grafana_dashboard_configmap(render: Render) -> None:
    docs = render([CHART / "ci" / "full-values.yaml"])
    dashboard = only(docs, "ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "AHP"}
    (name,) = dashboard["data"]
    assert name.endswith(".json")
    rendered = json.loads(dashboard["data"][name])
    assert rendered == json.loads((CHART / "files" / "ahp-gateway.json").read_text())
    assert rendered["title"] and rendered["uid"] and rendered["panels"]
    for panel in rendered["panels"]:
        for target in panel.get("targets", []):
            assert target["expr"].strip()
    default_kinds = {(d["kind"], d["metadata"]["name"]) for d in render()}
    assert not [k for k in default_kinds if k[1].endswith("-dashboard")], "off by default"


def test_notes_render(helm: Callable[..., HelmResult]) -> None:
    result = helm(
        "install",
        "demo",
        CHART,
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "-f",
        CHART / "ci" / "full-values.yaml",
    )
    assert result.returncode == 0, result.output
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"http://ahp-gateway.{NAMESPACE}.svc:8080/" in notes
    assert "GIT_GUARD_TOKEN <- secret git-guard-credentials" in notes
    assert "hot reload" in notes


# ------------------------------------------------------------------------------------------------
# Copies kept in the chart


def test_chart_policies_equal_repository_policies() -> None:
    repo = {p.name: p.read_bytes() for p in (REPO / "policies").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "files" / "policies").glob("*.yaml")}
    assert repo, "policies/ is empty"
    missing, extra = sorted(set(repo) - set(chart)), sorted(set(chart) - set(repo))
    stale = sorted(name for name in set(repo) & set(chart) if repo[name] != chart[name])
    assert not (missing or extra or stale), (
        f"charts/ahp-gateway/files/policies/ is out of date (missing {missing}, extra {extra}, differing {stale}); "
        "run: cp policies/*.yaml charts/ahp-gateway/files/policies/"
    )


@pytest.mark.parametrize(
    ("chart_file", "source"),
    [("files/alerts.yaml", "grafana/alerts.yaml"), ("files/ahp-gateway.json", "grafana/ahp-gateway.json")],
    ids=["alerts", "dashboard"],
)
def test_chart_copy_equals_grafana_source(chart_file: str, source: str) -> None:
    original = REPO / source
    if not original.exists():
        pytest.skip(f"{source} does not exist yet; the chart ships a placeholder {chart_file}")
    assert (CHART / chart_file).read_bytes() == original.read_bytes(), (
        f"charts/ahp-gateway/{chart_file} differs from {source}; run: cp {source} charts/ahp-gateway/{chart_file}"
    )


def test_chart_readme_documents_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.MULTILINE))
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, value in defaults.items():
        if key in documented:
            continue
        assert isinstance(value, dict) and value, f"values key {key} is not in the README table"
        for sub in value:
            path = f"{key}.{sub}"
            assert key == "config" or any(d == path or d.startswith(path + ".") for d in documented), (
                f"values key {path} is not in the README table"
            )
