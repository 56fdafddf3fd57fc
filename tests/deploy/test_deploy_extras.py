"""Rendering checks for the chart's optional objects and pod extras: the ``helm test`` pod (its two
commands are also run for real against a gateway started from the rendered configuration), the
Ingress, the Gateway API HTTPRoute, namespaceOverride, commonLabels/commonAnnotations, extra
volumes and init containers. Every object is validated strictly by kubernetes-validate (HTTPRoute
has no bundled schema: it is checked field by field here) in test_deploy_chart.py through
ci/extras-values.yaml; these tests assert what the objects must mean."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, NAMESPACE

try:
    import kubernetes_validate  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - depends on the test environment
    if os.environ.get("CI"):
        raise
    pytest.skip("kubernetes-validate is not installed (see tests/deploy/README.md)", allow_module_level=True)

pytestmark = pytest.mark.deploy
EXTRAS = CHART / "ci" / "extras-values.yaml"
KUBE_VERSION = "1.30.0"
Render = Callable[..., list[dict[str, Any]]]
Template = Callable[..., Any]


def one(docs: list[dict[str, Any]], kind: str, hook: bool | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    if hook is not None:
        found = [d for d in found if ("helm.sh/hook" in d["metadata"].get("annotations", {})) == hook]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def test_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Pod", hook=True)


test_pod.__test__ = False  # type: ignore[attr-defined]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


# ------------------------------------------------------------------------------------------------
# helm test


def test_helm_test_pod_checks_the_mounted_config_and_probes_readyz(render: Render) -> None:
    docs = render()
    pod = test_pod(docs)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["annotations"]["helm.sh/hook"] == "test"
    assert "hook-succeeded" in meta["annotations"]["helm.sh/hook-delete-policy"]
    kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    assert spec["restartPolicy"] == "Never" and spec["automountServiceAccountToken"] is False
    (check,) = spec["initContainers"]
    assert check["args"] == ["check", "--no-resolve", "--config", "/etc/ahp-gateway/gateway.yaml"]
    (probe,) = spec["containers"]
    service = one(docs, "Service")
    admin = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "admin")
    assert probe["command"][:2] == ["python", "-c"]
    assert probe["command"][3] == f"http://{service['metadata']['name']}.{NAMESPACE}.svc:{admin}/readyz"
    deployment = one(docs, "Deployment")
    gateway_spec = deployment["spec"]["template"]["spec"]
    config = next(v for v in gateway_spec["volumes"] if v["name"] == "config")
    assert next(v for v in spec["volumes"] if v["name"] == "config") == config, "the test must check what pods mount"
    for container in (check, probe):
        assert container["image"] == gateway_spec["containers"][0]["image"]
        assert container["securityContext"] == gateway_spec["containers"][0]["securityContext"]
        assert "envFrom" not in container and all("valueFrom" not in e for e in container.get("env", []))
    assert not [v for v in spec["volumes"] if "secret" in v], "the test pod mounts no Secret"
    # Never an endpoint of the Service, never counted by the PDB or covered by the gateway's policy.
    labels = meta["labels"]
    assert not selects(service["spec"]["selector"], labels)
    assert not selects(deployment["spec"]["selector"]["matchLabels"], labels)


def test_helm_test_can_be_switched_off(render: Render) -> None:
    assert not [d for d in render(sets=["helmTest.enabled=false"]) if d["kind"] == "Pod"]


def test_restrictive_admin_network_policy_admits_the_test_pod(render: Render) -> None:
    docs = render(
        sets=[
            "networkPolicy.enabled=true",
            "networkPolicy.adminFrom[0].namespaceSelector.matchLabels.name=monitoring",
        ]
    )
    policy = one(docs, "NetworkPolicy")
    admin_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "admin")
    peers = [p["podSelector"]["matchLabels"] for p in admin_rule["from"] if "podSelector" in p]
    assert any(selects(peer, test_pod(docs)["metadata"]["labels"]) for peer in peers)


@contextlib.contextmanager
def gateway_serving(config: Path, admin_port: int) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", "127.0.0.1", "--port", "0"]
        + ["--admin-port", str(admin_port)],
        stdout=subprocess.DEVNULL,
        stderr=open(config.parent / "serve.log", "wb"),  # noqa: SIM115
        cwd=config.parent,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)  # SIGINT: stop without the rendered drain delay
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_helm_test_commands_pass_against_a_gateway_and_fail_without_one(render: Render, tmp_path: Path) -> None:
    """Run the pod's two commands as the kubelet would (paths mapped to a temporary directory)."""
    docs = render(sets=["helmTest.readyTimeoutSeconds=30"])
    etc = tmp_path / "etc-ahp-gateway"
    (etc / "policies").mkdir(parents=True)
    for doc in docs:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-config"):
            for name, content in doc["data"].items():
                (etc / name).write_text(content)
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-policies"):
            for name, content in doc["data"].items():
                (etc / "policies" / name).write_text(content)
    # the inbound bearer tokens Secret the chart mounts by default (a kubelet would mount it)
    secrets = tmp_path / "inbound-tokens"
    secrets.mkdir()
    (secrets / "tokens.yaml").write_text("- {sha256: '" + "0" * 64 + "', principal: {name: helm-test}}\n")
    config = etc / "gateway.yaml"
    config.write_text(config.read_text().replace("/var/run/secrets/ahp-gateway/inbound", str(secrets)))
    pod = test_pod(docs)
    (check,) = pod["spec"]["initContainers"]
    args = [a.replace("/etc/ahp-gateway", str(etc)) for a in check["args"]]
    proc = subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("OK gateway.yaml"), proc.stdout + proc.stderr
    (probe,) = pod["spec"]["containers"]
    script = probe["command"][2]
    port = free_port()
    with gateway_serving(etc / "gateway.yaml", port):
        ready = subprocess.run(
            [sys.executable, "-c", script, f"http://127.0.0.1:{port}/readyz"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert ready.returncode == 0 and " 200 " in ready.stdout, ready.stdout + ready.stderr
    nobody = script.replace("+ 30", "+ 1")
    assert nobody != script
    down = subprocess.run(
        [sys.executable, "-c", nobody, f"http://127.0.0.1:{free_port()}/readyz"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert down.returncode == 1 and "not ready" in down.stdout


# ------------------------------------------------------------------------------------------------
# Ingress and HTTPRoute


def test_ingress_routes_the_listen_path_to_the_ahp_port(render: Render) -> None:
    docs = render([EXTRAS])
    ingress = one(docs, "Ingress")
    service = one(docs, "Service")
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    assert spec["tls"] == [{"secretName": "ahp-example-com-tls", "hosts": ["ahp.example.com"]}]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] == "2m"
    ports = {p["name"] for p in service["spec"]["ports"]}
    routes = []
    for rule in spec["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"] and backend["port"]["name"] in ports
            assert backend["port"]["name"] == "ahp", "the admin port is never exposed"
            routes.append((rule["host"], path["path"], path["pathType"]))
    assert routes == [("ahp.example.com", "/ahp", "Prefix"), ("ahp-internal.example.com", "/ahp", "Exact")]


def test_httproute_attaches_to_the_gateway_and_targets_the_service(render: Render) -> None:
    docs = render([EXTRAS])
    route = one(docs, "HTTPRoute")
    service = one(docs, "Service")
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["namespace"] == service["metadata"]["namespace"] == "ahp-edge"
    spec = route["spec"]
    assert set(spec) == {"parentRefs", "hostnames", "rules"}
    assert spec["parentRefs"] == [{"name": "shared-gateway", "namespace": "gateway-system", "sectionName": "https"}]
    assert spec["hostnames"] == ["ahp.example.com"]
    (rule,) = spec["rules"]
    assert set(rule) == {"matches", "backendRefs", "timeouts"}
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/ahp"}}]
    ahp_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "ahp")
    assert rule["backendRefs"] == [{"name": service["metadata"]["name"], "port": ahp_port}]
    assert rule["timeouts"] == {"request": "10s"}


def test_ingress_and_httproute_are_off_by_default(render: Render) -> None:
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"Ingress", "HTTPRoute"}


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["httpRoute.enabled=true"], "httpRoute.parentRefs"),
        (["ingress.enabled=true", "ingress.hosts=null"], "ingress.hosts"),
    ],
    ids=["httproute-without-parent", "ingress-without-hosts"],
)
def test_guards_for_routes(template: Template, sets: list[str], needle: str) -> None:
    result = template(sets=sets)
    assert result.returncode != 0 and needle in result.output, result.output


@pytest.mark.parametrize(
    "sets",
    [
        ["ingress.hosts[0].paths[0].path=ahp"],
        ["ingress.hosts[0].paths[0].path=/", "ingress.hosts[0].paths[0].pathType=Everything"],
        ["httpRoute.parentRefs[0].namespace=x"],
        ["initContainers[0].name=x"],
        ["namespaceOverride=Not_A_Namespace"],
        ["ingress.enabeld=true"],
        ['prometheusRule.selector=job="x"} or vector(1) or up{a="b"'],
    ],
    ids=[
        "relative-path",
        "bad-path-type",
        "parent-without-name",
        "init-without-image",
        "bad-namespace",
        "typo",
        "selector-breaks-out-of-braces",
    ],
)
def test_schema_rejects_bad_extras(template: Template, sets: list[str]) -> None:
    result = template(sets=sets)
    assert result.returncode != 0 and "schema" in result.output.lower(), result.output


# ------------------------------------------------------------------------------------------------
# namespaceOverride, common metadata, pod extras


def test_namespace_override_moves_every_object_and_its_references(render: Render) -> None:
    docs = render([EXTRAS])
    for doc in docs:
        assert doc["metadata"]["namespace"] == "ahp-edge", doc["kind"]
    service = one(docs, "Service")
    assert ".ahp-edge.svc:" in test_pod(docs)["spec"]["containers"][0]["command"][3]
    assert service["metadata"]["name"] == "demo-gw"


def test_common_labels_and_annotations_reach_every_object(render: Render) -> None:
    docs = render([EXTRAS])
    for doc in docs:
        meta = doc["metadata"]
        assert meta["labels"]["team"] == "platform-security", doc["kind"]
        assert "example.com/owner" in meta["annotations"], doc["kind"]
    assert one(docs, "Service")["metadata"]["annotations"]["example.com/owner"] == "edge-team", "own value wins"
    assert one(docs, "Deployment")["metadata"]["annotations"]["example.com/owner"] == "platform-security"


def test_extra_volumes_mounts_and_init_containers(render: Render) -> None:
    pod = one(render([EXTRAS]), "Deployment")["spec"]["template"]["spec"]
    assert {"name": "policy-bundle", "emptyDir": {"sizeLimit": "16Mi"}} in pod["volumes"]
    (gateway,) = pod["containers"]
    assert {"name": "policy-bundle", "mountPath": "/var/lib/ahp-gateway/bundle", "readOnly": True} in gateway[
        "volumeMounts"
    ]
    (init,) = pod["initContainers"]
    assert init["name"] == "fetch-policy-bundle" and init["volumeMounts"][0]["name"] == "policy-bundle"
    volumes = {v["name"] for v in pod["volumes"]}
    for container in (gateway, init):
        assert {m["name"] for m in container["volumeMounts"]} <= volumes
    defaults = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert "initContainers" not in defaults


def test_values_example_file_is_complete() -> None:
    """ci/extras-values.yaml switches on every optional object this file checks."""
    values = yaml.safe_load(EXTRAS.read_text())
    assert values["ingress"]["enabled"] and values["httpRoute"]["enabled"]
    for key in ("namespaceOverride", "commonLabels", "commonAnnotations", "extraVolumes", "initContainers"):
        assert values[key], key


# ------------------------------------------------------------------------------------------------
# The manual's five-minute path (docs/operations/kubernetes.md) uses the names the chart renders


def test_readme_local_cluster_commands_match_the_chart(helm: Callable[..., Any], tmp_path: Path) -> None:
    readme = (CHART.parents[1] / "docs" / "operations" / "kubernetes.md").read_text()
    section = readme.split("## Five minutes on a local cluster", 1)[1].split("\n## ", 1)[0]
    result = helm(
        "template", "gw", CHART, "-n", "ahp", "--set", "image.repository=ahp-gateway", "--set", "image.tag=dev"
    )
    assert result.returncode == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    deployment, service = one(docs, "Deployment"), one(docs, "Service")
    assert f"deployment/{deployment['metadata']['name']}" in section
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "ahp")
    assert f"svc/{service['metadata']['name']} 8080:{port}" in section
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "ahp-gateway:dev"
    assert "docker build -t ahp-gateway:dev ." in section and "helm test gw -n ahp" in section
    # the docker run line: examples/ mounted at /examples and policies/ at /policies
    root = CHART.parents[1]
    line = next(line for line in section.splitlines() if "--config /examples/" in line)
    config = line.split("--config ", 1)[1].split()[0]
    layout = tmp_path / "container"
    shutil.copytree(root / "examples", layout / "examples")
    shutil.copytree(root / "policies", layout / "policies")
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--strict", "--config", str(layout / config.lstrip("/"))],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
