"""A defaults-only install must start: every Secret a pod mounts is rendered by the chart (or named
by the user), the generated harness token survives upgrades, and ``global.imageRegistry`` reaches
every image."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.inbound.bearer import parse_tokens
from tests.support.helm import CHART, NAMESPACE, HelmResult

pytestmark = pytest.mark.deploy
Render = Callable[..., list[dict[str, Any]]]
SECRET = "demo-ahp-gateway-inbound-tokens"


def _pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
    return pods + [d["spec"] for d in docs if d["kind"] == "Pod"]


def _secret(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == name)


def test_every_mounted_secret_is_rendered_by_the_chart(render: Render) -> None:
    docs = render()
    rendered = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert SECRET in rendered
    for pod in _pods(docs):
        for volume in pod.get("volumes", []):
            sources = [volume, *volume.get("projected", {}).get("sources", [])]
            for source in sources:
                if "secret" in source:
                    name = source["secret"].get("secretName") or source["secret"].get("name")
                    assert name in rendered, f"volume {volume['name']} mounts Secret {name}, which nothing creates"


def test_generated_token_matches_the_hash_the_gateway_reads(render: Render) -> None:
    secret = _secret(render(), SECRET)
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) >= 32
    table = parse_tokens(base64.b64decode(secret["data"]["tokens.yaml"]).decode(), "tokens.yaml")
    assert [digest for digest, _ in table] == [hashlib.sha256(token.encode()).digest()]
    assert table[0][1].name == "default"


def test_upgrade_reuses_the_existing_secret(template: Callable[..., HelmResult], chart_copy: Path) -> None:
    """``helm template`` cannot reach a cluster, so the copy's lookup returns a planted Secret."""
    path = chart_copy / "templates" / "inbound-tokens-secret.yaml"
    old = {"token": base64.b64encode(b"kept-token").decode(), "tokens.yaml": base64.b64encode(b"- kept\n").decode()}
    planted = f'(dict "data" (dict "token" "{old["token"]}" "tokens.yaml" "{old["tokens.yaml"]}"))'
    text = path.read_text()
    assert 'lookup "v1" "Secret" $namespace $name' in text
    path.write_text(text.replace('lookup "v1" "Secret" $namespace $name', planted))
    result = template(chart=chart_copy)
    assert result.returncode == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert _secret(docs, SECRET)["data"] == old


def test_an_existing_secret_is_used_and_not_created(render: Render) -> None:
    docs = render(sets=["inboundAuth.existingSecret=harness-tokens"])
    assert not [d for d in docs if d["kind"] == "Secret"]
    (pod, *_) = _pods(docs)
    volume = next(v for v in pod["volumes"] if v["name"] == "inbound-tokens")
    assert volume["secret"]["secretName"] == "harness-tokens"


def test_no_secret_without_bearer_auth(render: Render) -> None:
    docs = render(sets=["config.inbound.allowUnauthenticated=true", "inboundAuth.type=none"])
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_notes_tell_how_to_read_the_token(helm: Callable[..., HelmResult]) -> None:
    result = helm("install", "demo", CHART, "--dry-run=client", "--namespace", NAMESPACE)
    assert result.returncode == 0, result.output
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"kubectl -n {NAMESPACE} get secret {SECRET} -o jsonpath='{{.data.token}}' | base64 -d" in notes


@pytest.mark.parametrize(
    ("sets", "image"),
    [
        ([], "ghcr.io/ahp-gateway/ahp-gateway:0.1.0"),
        (["global.imageRegistry=registry.example.com"], "registry.example.com/ahp-gateway/ahp-gateway:0.1.0"),
        (["global.imageRegistry=mirror.local:5000/"], "mirror.local:5000/ahp-gateway/ahp-gateway:0.1.0"),
        (
            ["global.imageRegistry=registry.example.com", "image.repository=team/gateway", "image.tag=dev"],
            "registry.example.com/team/gateway:dev",
        ),
    ],
    ids=["default", "registry", "registry-with-port", "repository-without-registry"],
)
def test_global_image_registry(render: Render, sets: list[str], image: str) -> None:
    pods = _pods(render(sets=sets))
    images = {c["image"] for pod in pods for c in pod["containers"] + pod.get("initContainers", [])}
    assert images == {image}
