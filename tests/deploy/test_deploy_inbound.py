"""The chart's default harness authentication: bearer tokens from the Secret the chart creates, mounted
without subPath so rotation reaches the pod; ``config.inbound`` replaces it entirely."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.deploy


def _gateway(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config"))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    return yaml.safe_load(config["data"]["gateway.yaml"]), deployment["spec"]["template"]["spec"]


def test_default_is_bearer_from_the_chart_secret(render: Any) -> None:
    cfg, pod = _gateway(render())
    assert cfg["inbound"] == {
        "auth": {"type": "bearer", "tokensFile": "/var/run/secrets/ahp-gateway/inbound/tokens.yaml"}
    }
    volume = next(v for v in pod["volumes"] if v["name"] == "inbound-tokens")
    assert volume["secret"]["secretName"] == "demo-ahp-gateway-inbound-tokens"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "inbound-tokens")
    assert mount["mountPath"] == "/var/run/secrets/ahp-gateway/inbound" and "subPath" not in mount


def test_config_inbound_replaces_the_default(render: Any) -> None:
    cfg, pod = _gateway(render(sets=["config.inbound.allowUnauthenticated=true", "inboundAuth.type=none"]))
    assert cfg["inbound"] == {"allowUnauthenticated": True}
    assert all(v["name"] != "inbound-tokens" for v in pod["volumes"])
