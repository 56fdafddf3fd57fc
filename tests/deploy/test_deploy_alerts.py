"""The chart's PrometheusRule selects its own release: rendered by the real helm binary for a renamed
release (nameOverride) and run through ``promtool test rules`` with series labelled the way the
Prometheus Operator labels the chart's ServiceMonitor targets (job from ``jobLabel``, namespace,
service). The shipped file's ``job=~".*ahp-gateway.*"`` matcher misses such a release; the rendered
rules must not, and must ignore a second release's series."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, REPO, HelmResult

RELEASE = "prod"
NAMESPACE = "payments"
FILE_SELECTOR = 'job=~".*ahp-gateway.*"'
TEMPLATE_VAR = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    return found


def rendered(helm: Callable[..., HelmResult], *sets: str) -> list[dict[str, Any]]:
    args = ["template", RELEASE, CHART, "--namespace", NAMESPACE, "--kube-version", "1.30.0"]
    for item in ("prometheusRule.enabled=true", "serviceMonitor.enabled=true", *sets):
        args += ["--set", item]
    result = helm(*args)
    assert result.returncode == 0, result.output
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return found


def operator_target_labels(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The target labels the Prometheus Operator derives from the ServiceMonitor and Service."""
    monitor, service = of_kind(docs, "ServiceMonitor"), of_kind(docs, "Service")
    return {
        "job": service["metadata"]["labels"][monitor["spec"]["jobLabel"]],
        "namespace": service["metadata"]["namespace"],
        "service": service["metadata"]["name"],
    }


def series(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def annotations(rule: dict[str, Any], labels: dict[str, str], value: str = "") -> dict[str, str]:
    """Annotations as Prometheus renders them for ``labels`` (the templates these alerts use)."""
    out = {}
    for key, text in rule["annotations"].items():
        text = text.replace("{{ $value | humanizePercentage }}", value)
        out[key] = TEMPLATE_VAR.sub(lambda m: labels.get(m[1], ""), text)
        assert "{{" not in out[key], out[key]
    return out


def run_unit_tests(
    tmp_path: Path, rules: dict[str, Any], tests: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (tmp_path / "rules_test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    return subprocess.run(
        [promtool(), "test", "rules", "rules_test.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )


def rules_by_name(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in spec["groups"] for r in g["rules"] if "alert" in r}


def cases(spec: dict[str, Any], ours: dict[str, str], theirs: dict[str, str]) -> list[dict[str, Any]]:
    rules = rules_by_name(spec)
    down = {**ours, "instance": "10.0.0.1:9464"}
    other = {**theirs, "instance": "10.9.0.1:9464"}
    request = {"method": "hooks/intercept", "event_type": "tool.before"}
    return [
        {
            "name": "the renamed release's target is down; another release's down target is not ours",
            "interval": "1m",
            "input_series": [
                {"series": series("up", down), "values": "1 1 0x10"},
                {"series": series("up", other), "values": "0x12"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "AHPGatewayTargetDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical", **down},
                            "exp_annotations": annotations(rules["AHPGatewayTargetDown"], down),
                        }
                    ],
                }
            ],
        },
        {
            "name": "absent fires for the renamed release although another release is up",
            "interval": "1m",
            "input_series": [{"series": series("up", other), "values": "1x20"}],
            "alert_rule_test": [
                {
                    "eval_time": "15m",
                    "alertname": "AHPGatewayAbsent",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical"},
                            "exp_annotations": annotations(rules["AHPGatewayAbsent"], {}),
                        }
                    ],
                }
            ],
        },
        {
            "name": "the availability burn alert carries the release's labels and ignores the other release",
            "interval": "1m",
            "input_series": [
                {
                    "series": series("ahp_gateway_requests_total", {**down, **request, "outcome": "no_effect"}),
                    "values": "0+90x20",
                },
                {
                    "series": series("ahp_gateway_requests_total", {**down, **request, "outcome": "error"}),
                    "values": "0+10x20",
                },
                {
                    "series": series("ahp_gateway_requests_total", {**other, **request, "outcome": "error"}),
                    "values": "0+50x20",
                },
            ],
            "alert_rule_test": [
                {
                    "eval_time": "10m",
                    "alertname": "AHPGatewayAvailabilityFastBurn",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical", **ours},
                            "exp_annotations": annotations(rules["AHPGatewayAvailabilityFastBurn"], ours, "10%"),
                        }
                    ],
                }
            ],
        },
    ]


@pytest.mark.deploy
def test_renamed_release_alerts_select_its_targets(helm: Callable[..., HelmResult], tmp_path: Path) -> None:
    docs = rendered(helm, "nameOverride=gw")
    ours = operator_target_labels(docs)
    assert ours == {"job": "gw", "namespace": NAMESPACE, "service": f"{RELEASE}-gw"}
    theirs = {**ours, "namespace": "other-team"}
    spec = of_kind(docs, "PrometheusRule")["spec"]
    exprs = [str(r["expr"]) for g in spec["groups"] for r in g["rules"]]
    assert not [e for e in exprs if FILE_SELECTOR in e]
    assert all(f'namespace="{NAMESPACE}", service="{RELEASE}-gw"' in e for e in exprs)
    proc = run_unit_tests(tmp_path, spec, cases(spec, ours, theirs))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.deploy
def test_the_files_job_regex_misses_a_renamed_release(helm: Callable[..., HelmResult], tmp_path: Path) -> None:
    """Why the chart rewrites the matcher: the same cases fail against the shipped file as it is."""
    docs = rendered(helm, "nameOverride=gw")
    ours = operator_target_labels(docs)
    shipped = yaml.safe_load((REPO / "grafana" / "alerts.yaml").read_text())
    proc = run_unit_tests(tmp_path, shipped, cases(shipped, ours, {**ours, "namespace": "other-team"})[:1])
    assert proc.returncode != 0 and "AHPGatewayTargetDown" in proc.stdout + proc.stderr


@pytest.mark.deploy
def test_selector_and_runbook_base_are_values(helm: Callable[..., HelmResult]) -> None:
    docs = rendered(
        helm,
        'prometheusRule.selector=cluster_job="edge"',
        "prometheusRule.runbookBaseUrl=https://runbooks.example.com/ahp/",
        "namespaceOverride=gateways",
    )
    rule = of_kind(docs, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "gateways"
    for group in rule["spec"]["groups"]:
        for item in group["rules"]:
            assert 'cluster_job="edge"' in item["expr"] and FILE_SELECTOR not in item["expr"], item
            if "alert" in item:
                assert item["annotations"]["runbook_url"] == f"https://runbooks.example.com/ahp#{item['alert'].lower()}"
