"""Helpers of the chart tests: the values files, the rendered objects by kind, the rendered gateway configuration."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.helm import CHART, CI_VALUES
from tests.support.helm import KUBE_VERSION as KUBE_VERSION
from tests.support.helm import NAMESPACE as NAMESPACE
from tests.support.helm import REPO as REPO  # re-exported for the chart tests

VALUES = [None, *CI_VALUES]

VALUE_IDS = ["default", *(p.name.removesuffix("-values.yaml") for p in CI_VALUES)]

CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
}

SECRETISH = re.compile(r"token|secret|passw(or)?d|api_?key|private_?key|credential", re.IGNORECASE)

CONFIG_PATH = "/etc/ahp-gateway/gateway.yaml"

FILE_SELECTOR = 'job=~".*ahp-gateway.*"'
"""The gateway matcher of grafana/alerts.yaml, which the chart replaces with its release's."""

Render = Callable[..., list[dict[str, Any]]]

Template = Callable[..., Any]

HelmResult = Any


def files_of(values: Path | None) -> list[Path]:
    return [values] if values else []


def load_values(values: Path | None) -> dict[str, Any]:
    """The chart defaults with one values file merged over them (maps deep, lists replaced)."""

    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            out = dict(base)
            for key, value in over.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = merge(base.get(key), value)
            return out
        return over

    merged = yaml.safe_load((CHART / "values.yaml").read_text())
    if values:
        merged = merge(merged, yaml.safe_load(values.read_text()))
    assert isinstance(merged, dict)
    return merged


TRIAL_REDIS = "redis"
"""``app.kubernetes.io/component`` of the opt-in trial Redis (``redis.enabled``): its Deployment
and Service are not the gateway's, so :func:`only` and :func:`maybe` look past them unless asked
for ``-redis`` by name."""


def _gateway_objects(docs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    if suffix == "-redis":
        return docs
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") != TRIAL_REDIS]


def only(docs: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [d for d in _gateway_objects(docs, suffix) if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"expected one {kind} *{suffix}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def maybe(docs: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    found = [d for d in _gateway_objects(docs, "") if d["kind"] == kind]
    assert len(found) <= 1
    return found[0] if found else None


def deployment_parts(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    deployment = only(docs, "Deployment")
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    return deployment, pod, container


def gateway_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    config = yaml.safe_load(only(docs, "ConfigMap", "-config")["data"]["gateway.yaml"])
    assert isinstance(config, dict)
    return config


def subset(small: dict[str, str], big: dict[str, str]) -> bool:
    return all(big.get(k) == v for k, v in small.items())
