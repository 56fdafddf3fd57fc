"""The Helm chart in charts/ahp-gateway: lint, render, schema-validate, and check what it renders.

Every rendered manifest is validated against the Kubernetes 1.30 OpenAPI schemas in strict mode
(unknown fields are errors). The Prometheus Operator kinds have no schema there and are checked
field by field. The rendered gateway configuration is run through ``ahp-gateway check``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.models import SECRET_FIELDS
from tests.deploy.helpers import (
    CHART,
    CI_VALUES,
    CONFIG_PATH,
    CRD_KINDS,
    KUBE_VERSION,
    NAMESPACE,
    SECRETISH,
    VALUE_IDS,
    VALUES,
    HelmResult,
    Render,
    Template,
    deployment_parts,
    files_of,
    gateway_config,
    load_values,
    maybe,
    only,
    subset,
)

pytestmark = pytest.mark.deploy

try:
    import kubernetes_validate  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - depends on the test environment
    if os.environ.get("CI"):
        raise
    pytest.skip("kubernetes-validate is not installed (see tests/deploy/README.md)", allow_module_level=True)


# ------------------------------------------------------------------------------------------------
# helm lint / helm template / Kubernetes schema validation


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_helm_lint_strict(helm: Callable[..., HelmResult], values: Path | None) -> None:
    args = ["lint", "--strict", CHART, "--kube-version", KUBE_VERSION]
    for path in files_of(values):
        args += ["-f", path]
    result = helm(*args)
    assert result.returncode == 0, result.output
    assert "0 chart(s) failed" in result.output


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_rendered_manifests_validate_strictly(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount"} <= kinds
    for doc in docs:
        assert doc["metadata"]["name"], doc
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue  # no upstream schema: checked field by field (test_prometheus_operator_objects, test_deploy_extras)
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}")


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_everything_is_namespaced_and_labelled(render: Render, values: Path | None) -> None:
    settings = load_values(values)
    own = {"ServiceMonitor": "serviceMonitor", "PrometheusRule": "prometheusRule"}
    for doc in render(files_of(values)):
        meta = doc["metadata"]
        assert meta.get("namespace"), f"{doc['kind']}/{meta['name']} has no namespace"
        if not meta["name"].endswith("-dashboard") and not settings.get(own.get(doc["kind"], ""), {}).get("namespace"):
            assert meta["namespace"] == (settings["namespaceOverride"] or NAMESPACE), doc["kind"]
        labels = meta.get("labels", {})
        assert labels.get("app.kubernetes.io/name") == (settings["nameOverride"] or "ahp-gateway"), doc["kind"]
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", doc["kind"]
        assert subset(settings["commonLabels"], labels), doc["kind"]
        assert set(settings["commonAnnotations"]) <= set(meta.get("annotations", {})), doc["kind"]  # own values win


def test_preStop_falls_back_to_exec_before_kubernetes_1_30(render: Render) -> None:
    docs = render(kube_version="1.28.0")
    _, _, container = deployment_parts(docs)
    assert container["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "5"]}}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.28.0", strict=True)
    _, _, container = deployment_parts(render())
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}


# ------------------------------------------------------------------------------------------------
# Project assertions on the rendered objects


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_selectors_match_labels(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    deployment, pod, _ = deployment_parts(docs)
    pod_labels = pod["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector and subset(selector, pod_labels)
    service = only(docs, "Service")
    assert service["spec"]["selector"] == selector
    for constraint in pod["spec"].get("topologySpreadConstraints", []):
        assert subset(constraint["labelSelector"]["matchLabels"], pod_labels)
    if pdb := maybe(docs, "PodDisruptionBudget"):
        assert pdb["spec"]["selector"]["matchLabels"] == selector
    if netpol := maybe(docs, "NetworkPolicy"):
        assert netpol["spec"]["podSelector"]["matchLabels"] == selector
    if hpa := maybe(docs, "HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["apiVersion"], target["kind"], target["name"]) == (
            "apps/v1",
            "Deployment",
            deployment["metadata"]["name"],
        )
        assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
        assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    else:
        assert deployment["spec"]["replicas"] == load_values(values)["replicaCount"]
    if monitor := maybe(docs, "ServiceMonitor"):
        assert subset(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
        assert NAMESPACE in monitor["spec"]["namespaceSelector"]["matchNames"]
    service_account = pod["spec"]["serviceAccountName"]
    if load_values(values)["serviceAccount"]["create"]:
        assert only(docs, "ServiceAccount")["metadata"]["name"] == service_account


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_ports_and_probes(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    _, _, container = deployment_parts(docs)
    config = gateway_config(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"ahp": config["listen"]["port"], "admin": config["admin"]["port"]}
    assert config["listen"]["host"] in ("0.0.0.0", "::")
    assert config["admin"]["host"] in ("0.0.0.0", "::")

    service = only(docs, "Service")
    by_name = {p["name"]: p for p in service["spec"]["ports"]}
    assert set(by_name) == {"ahp", "admin"}
    for name, port in by_name.items():
        target = port["targetPort"]
        assert (ports[target] if isinstance(target, str) else target) == ports[name], port

    def admin_port(probe: dict[str, Any]) -> int:
        port = probe["httpGet"]["port"]
        return int(ports[port] if isinstance(port, str) else port)

    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert admin_port(container[probe]) == ports["admin"], probe

    if netpol := maybe(docs, "NetworkPolicy"):
        allowed = {p["port"] for rule in netpol["spec"]["ingress"] for p in rule["ports"]}
        assert allowed == {"ahp", "admin"}
    if monitor := maybe(docs, "ServiceMonitor"):
        assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["admin"]


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_security_context_is_hardened(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    _, pod, container = deployment_parts(docs)
    pod_sc = pod["spec"]["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] != 0
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc.get("privileged", False) is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert not sc["capabilities"].get("add")
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert not pod["spec"].get("hostNetwork") and not pod["spec"].get("hostPID")
    # The only writable places are emptyDirs; the config volume is read-only.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]["name"]]
    assert mounts["/etc/ahp-gateway"]["readOnly"] is True
    for mount in container["volumeMounts"]:
        assert mount["name"] in volumes, f"volumeMount {mount['name']} has no volume"
        assert "subPath" not in mount, "subPath mounts never see ConfigMap/Secret updates"
        volume = volumes[mount["name"]]
        if "emptyDir" not in volume:
            assert mount.get("readOnly") is True, mount
    assert "memory" in container["resources"]["limits"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_shutdown_sequence_fits_the_grace_period(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    _, pod, container = deployment_parts(docs)
    shutdown = gateway_config(docs)["shutdown"]
    pre_stop = container.get("lifecycle", {}).get("preStop")
    if pre_stop is None:
        sleep = 0
    elif "sleep" in pre_stop:
        sleep = pre_stop["sleep"]["seconds"]
    else:
        assert pre_stop["exec"]["command"][0] == "sleep"
        sleep = int(pre_stop["exec"]["command"][-1])
    values_shutdown = load_values(values)["shutdown"]
    assert sleep == values_shutdown["preStopSleepSeconds"]
    assert shutdown == {
        "drainDelaySeconds": values_shutdown["drainDelaySeconds"],
        "drainTimeoutSeconds": values_shutdown["drainTimeoutSeconds"],
    }
    needed = sleep + shutdown["drainDelaySeconds"] + shutdown["drainTimeoutSeconds"]
    assert pod["spec"]["terminationGracePeriodSeconds"] >= needed


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_reload_strategy_and_workers(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    _, pod, container = deployment_parts(docs)
    settings = load_values(values)
    annotations = pod["metadata"].get("annotations", {})
    reload = gateway_config(docs)["reload"]
    if settings["reloadStrategy"] == "rollout":
        assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])
        assert reload["watch"] is False, "rolled pods keep the configuration they started with"
    else:
        assert "checksum/config" not in annotations
        assert reload["watch"] is True, "hot reload needs the file watch"
    args = container["args"]
    assert args[args.index("--config") + 1] == CONFIG_PATH
    assert args[args.index("serve") - 2 : args.index("serve")] == ["--log-level", settings["logLevel"]]
    env = {e["name"]: e for e in container.get("env", [])}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    workers = settings["workers"]
    if workers > 1:
        assert args[args.index("--workers") + 1] == str(workers)
        directory = env["PROMETHEUS_MULTIPROC_DIR"]["value"]
        assert "emptyDir" in volumes[mounts[directory]]
    else:
        assert "--workers" not in args
        assert "PROMETHEUS_MULTIPROC_DIR" not in env


def test_checksum_follows_config_and_policies(render: Render) -> None:
    def checksum(*sets: str) -> str:
        _, pod, _ = deployment_parts(render(sets=sets))
        return str(pod["metadata"]["annotations"]["checksum/config"])

    base = checksum()
    assert checksum() == base
    assert checksum("config.limits.deadlineMs=1500") != base
    assert checksum("policies.extra\\.yaml=namespace: x") != base
    assert checksum("extraConfigFiles.registration\\.yaml=protocolVersion: draft") != base
    assert checksum("replicaCount=5") == base


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_config_volume_carries_config_and_policies(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    _, pod, _ = deployment_parts(docs)
    (config_volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "config"]
    sources = [s["configMap"] for s in config_volume["projected"]["sources"]]
    config_map = only(docs, "ConfigMap", "-config")
    policies_map = only(docs, "ConfigMap", "-policies")
    assert sources[0]["name"] == config_map["metadata"]["name"]
    assert "gateway.yaml" in config_map["data"]
    policies = policies_map.get("data", {})
    if policies:
        assert sources[1]["name"] == policies_map["metadata"]["name"]
        assert {i["key"]: i["path"] for i in sources[1]["items"]} == {k: f"policies/{k}" for k in policies}
    settings = load_values(values)
    expected = set(settings["policies"])
    if settings["defaultPolicies"]["enabled"]:
        expected |= {p.name for p in (CHART / "files" / "policies").glob("*.yaml")} - set(
            settings["defaultPolicies"]["exclude"]
        )
    assert set(policies) == expected


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_no_literal_secrets_are_rendered(render: Render, values: Path | None) -> None:
    docs = render(files_of(values))
    # the only Secret the chart creates holds the harness token it generates, never a value
    created = [d for d in docs if d["kind"] == "Secret"]
    assert all(d["metadata"]["name"].endswith("-inbound-tokens") for d in created), "no Secret from values"
    assert all(set(d["data"]) == {"token", "tokens.yaml"} for d in created)
    _, pod, container = deployment_parts(docs)
    env = {e["name"]: e for e in container.get("env", [])}
    for name, entry in env.items():
        if SECRETISH.search(name):
            assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], name
    secret_dirs = {
        m["mountPath"]
        for m in container["volumeMounts"]
        for v in pod["spec"]["volumes"]
        if v["name"] == m["name"] and "secret" in v
    }

    config = gateway_config(docs)
    for hook in config.get("hooks") or []:
        auth = hook.get("authentication")
        if not auth:
            continue
        assert not SECRET_FIELDS & set(auth), f"literal credential in {hook['id']}"
        refs = [f"env:{auth['tokenEnv']}"] if auth.get("tokenEnv") else []
        refs += [auth[k] for k in ("tokenRef", "clientSecretRef") if auth.get(k)]
        assert refs, f"{hook['id']}: authentication without a secret reference"
        for ref in refs:
            scheme, _, target = ref.partition(":")
            if scheme == "env":
                assert "secretKeyRef" in env[target]["valueFrom"], ref
            else:
                assert scheme == "file" and any(target.startswith(d.rstrip("/") + "/") for d in secret_dirs), ref
    for header in (hook.get("transport", {}).get("headers", {}) for hook in config.get("hooks") or []):
        assert not {h.lower() for h in header} & {"authorization", "x-api-key", "cookie"}


# ------------------------------------------------------------------------------------------------
# The rendered gateway configuration is accepted by the gateway itself


@pytest.mark.parametrize("values", VALUES, ids=VALUE_IDS)
def test_rendered_config_passes_ahp_gateway_check(render: Render, values: Path | None, tmp_path: Path) -> None:
    docs = render(files_of(values))
    config_dir = tmp_path / "etc-ahp-gateway"
    (config_dir / "policies").mkdir(parents=True)
    for name, content in only(docs, "ConfigMap", "-config")["data"].items():
        (config_dir / name).write_text(content, encoding="utf-8")
    for name, content in (only(docs, "ConfigMap", "-policies").get("data") or {}).items():
        (config_dir / "policies" / name).write_text(content, encoding="utf-8")
    # No secret is available to the check: references must be enough.
    _, _, container = deployment_parts(docs)
    env = {k: v for k, v in os.environ.items() if not SECRETISH.search(k)}
    for entry in container.get("env", []):
        env.pop(entry["name"], None)
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--no-resolve", "--config", str(config_dir / "gateway.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"ahp-gateway check failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.startswith("OK gateway.yaml")
    config = gateway_config(docs)
    hooks = config.get("hooks") or []
    if config.get("registration"):
        hooks = yaml.safe_load((config_dir / config["registration"]).read_text())["hooks"]
    assert hooks
    for hook in hooks:
        assert hook["id"] in proc.stdout


def test_rendered_policies_equal_the_chart_files(render: Render) -> None:
    data = only(render(), "ConfigMap", "-policies")["data"]
    files = {p.name: p.read_text(encoding="utf-8") for p in (CHART / "files" / "policies").glob("*.yaml")}
    assert data == files


# ------------------------------------------------------------------------------------------------
# values.schema.json and template guards


def test_values_files_match_the_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    validator = jsonschema.Draft7Validator(schema)
    for values in (None, *CI_VALUES):
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(load_values(values))]
        assert not errors, f"{values}: {errors}"
    assert schema["additionalProperties"] is False
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) <= set(schema["properties"])


@pytest.mark.parametrize(
    ("sets", "needle"),
    [
        (["replicaCount=two"], "replicaCount"),
        (["replicas=3"], "replicas"),
        (["workers=true"], "workers"),
        (["reloadStrategy=sometimes"], "reloadStrategy"),
        (["config.listen.host=127.0.0.1"], "host"),
        (["config.reload.watch=true"], "watch"),
        (["config.shutdown.drainDelaySeconds=1"], "shutdown"),
        (["service.port=70000"], "port"),
    ],
    ids=[
        "wrong-type",
        "unknown-top-level-key",
        "bool-for-int",
        "bad-enum",
        "loopback-listener",
        "reload-watch-by-hand",
        "shutdown-by-hand",
        "port-range",
    ],
)
def test_schema_rejects_bad_values(
    helm: Callable[..., HelmResult], template: Template, sets: list[str], needle: str
) -> None:
    result = template(sets=sets)
    assert result.returncode != 0, f"{sets} was accepted"
    assert "schema" in result.output.lower() and needle in result.output, result.output
    lint = helm("lint", "--strict", CHART, *[arg for s in sets for arg in ("--set", s)])
    assert lint.returncode != 0, lint.output


LITERAL_SECRETS: dict[str, dict[str, Any]] = {
    "upstream-secret-value": {"upstreamSecrets": [{"name": "TOKEN", "value": "hunter2"}]},
    "upstream-secret-value-with-ref": {
        "upstreamSecrets": [{"name": "TOKEN", "secretName": "s", "key": "k", "value": "hunter2"}]
    },
    "bearer-token-in-config": {
        "config": {
            "hooks": [
                {
                    "id": "com.example.x",
                    "transport": {"type": "http", "url": "https://x.example.com/"},
                    "authentication": {"type": "bearer", "token": "hunter2"},
                    "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "omit"}}],
                }
            ]
        }
    },
    "oauth-client-secret-in-config": {
        "config": {
            "hooks": [
                {
                    "id": "com.example.x",
                    "transport": {"type": "http", "url": "https://x.example.com/"},
                    "authentication": {
                        "type": "oauth",
                        "resource": "r",
                        "issuer": "https://i.example.com",
                        "clientId": "c",
                        "clientSecret": "hunter2",
                        "flow": "client_credentials",
                    },
                    "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "omit"}}],
                }
            ]
        }
    },
    "literal-env-token": {"extraEnv": [{"name": "UPSTREAM_API_TOKEN", "value": "hunter2"}]},
    "literal-env-password": {"extraEnv": [{"name": "db_password", "value": "hunter2"}]},
}


@pytest.mark.parametrize("case", list(LITERAL_SECRETS))
def test_schema_rejects_literal_secrets(template: Template, tmp_path: Path, case: str) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(LITERAL_SECRETS[case]))
    result = template(values=[values])
    assert result.returncode != 0, f"{case} was accepted"
    assert "schema" in result.output.lower(), result.output
    assert "hunter2" not in result.stdout


def test_plain_env_without_credential_name_is_allowed(render: Render) -> None:
    _, _, container = deployment_parts(render(sets=["extraEnv[0].name=TZ", "extraEnv[0].value=UTC"]))
    assert {"name": "TZ", "value": "UTC"} in container["env"]


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        (
            {
                "config": {
                    "hooks": [
                        {
                            "id": "com.example.x",
                            "transport": {"type": "http", "url": "https://x.example.com/"},
                            "authentication": {"type": "bearer", "tokenEnv": "X_TOKEN"},
                            "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "omit"}}],
                        }
                    ]
                }
            },
            "X_TOKEN: add it to upstreamSecrets",
        ),
        (
            {
                "config": {
                    "hooks": [
                        {
                            "id": "com.example.x",
                            "transport": {"type": "http", "url": "https://x.example.com/"},
                            "authentication": {"type": "bearer", "tokenRef": "file:/etc/secret/token"},
                            "subscriptions": [{"mode": "observe", "events": ["*"], "content": {"default": "omit"}}],
                        }
                    ]
                }
            },
            "not under a mount of upstreamSecretFiles",
        ),
        ({"shutdown": {"terminationGracePeriodSeconds": 10}}, "terminationGracePeriodSeconds (10) must be at least"),
        ({"autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}}, "minReplicas must not exceed"),
    ],
    ids=["unprovided-env-secret", "unmounted-secret-file", "grace-period-too-short", "hpa-min-over-max"],
)
def test_template_guards(template: Template, tmp_path: Path, values: dict[str, Any], needle: str) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = template(values=[path])
    assert result.returncode != 0
    assert needle in result.output, result.output


def test_planted_typo_fails_validation(template: Template, chart_copy: Path) -> None:
    deployment = chart_copy / "templates" / "deployment.yaml"
    text = deployment.read_text()
    assert text.count("readinessProbe:") == 1
    deployment.write_text(text.replace("readinessProbe:", "readinesProbe:"))
    result = template(chart=chart_copy)
    assert result.returncode == 0, "helm itself does not know Kubernetes fields"
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (bad,) = [d for d in docs if d["kind"] == "Deployment"]
    with pytest.raises(kubernetes_validate.ValidationError) as caught:
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)
    assert "readinesProbe" in caught.value.message


def test_template_error_in_a_copy_fails_render(template: Template, chart_copy: Path) -> None:
    service = chart_copy / "templates" / "service.yaml"
    service.write_text(
        service.read_text().replace("{{ .Values.service.port }}", "{{ .Values.service.port | nosuchfunc }}")
    )
    result = template(chart=chart_copy)
    assert result.returncode != 0 and "nosuchfunc" in result.output
