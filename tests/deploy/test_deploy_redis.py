"""The chart with and without shared state: by default no Redis object and no ``state`` in the
gateway configuration; ``redis.enabled`` renders one Deployment and Service of the official image
that the gateway's ``state.redis`` points at; ``state.redis.url`` names an external Redis, the
password always from an existing Secret (never a value). Every object is validated strictly in
test_deploy_chart.py through ci/redis-values.yaml (and the rendered configuration checked by
``ahp-gateway check`` there)."""

from __future__ import annotations

import pytest

from tests.deploy.helpers import Render, Template, deployment_parts, gateway_config, only
from tests.support.helm import CHART

pytestmark = pytest.mark.deploy
REDIS_VALUES = CHART / "ci" / "redis-values.yaml"


def test_default_renders_no_redis_and_no_state(render: Render) -> None:
    docs = render()
    assert not [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    assert "state" not in gateway_config(docs)
    _, _, container = deployment_parts(docs)
    assert "AHP_GATEWAY_REDIS_PASSWORD" not in {e["name"] for e in container.get("env", [])}


def test_trial_redis_is_one_deployment_and_service_the_gateway_uses(render: Render) -> None:
    docs = render([REDIS_VALUES])
    redis = only(docs, "Deployment", "-redis")
    service = only(docs, "Service", "-redis")
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("docker.io/library/redis:")
    assert redis["spec"]["replicas"] == 1
    assert service["spec"]["selector"] == redis["spec"]["selector"]["matchLabels"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "noeviction" in container["args"], "uploads and buckets are refused, never silently evicted"
    cfg = gateway_config(docs)
    name = service["metadata"]["name"]
    assert cfg["state"]["redis"] == {
        "url": f"redis://{name}:6379/0",
        "keyPrefix": "ahp-ci:",
        "timeoutMs": 40,
        "passwordEnv": "AHP_GATEWAY_REDIS_PASSWORD",
    }
    assert cfg["uploads"]["storage"]["type"] == "redis" and cfg["rateLimits"][0]["scope"] == "shared"
    _, _, gateway = deployment_parts(docs)
    (env,) = [e for e in gateway["env"] if e["name"] == "AHP_GATEWAY_REDIS_PASSWORD"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "ahp-redis", "key": "password"}
    gateway_selector = only(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    assert not all(pod_labels.get(k) == v for k, v in gateway_selector.items()), (
        "the gateway Service must not select Redis"
    )


def test_an_external_redis_url_wins_and_renders_no_trial_redis(render: Render) -> None:
    docs = render(sets=["state.redis.url=rediss://cache.example.internal:6380/2"])
    assert not [d for d in docs if d["metadata"]["name"].endswith("-redis")]
    assert gateway_config(docs)["state"]["redis"]["url"] == "rediss://cache.example.internal:6380/2"
    assert "passwordEnv" not in gateway_config(docs)["state"]["redis"]


def test_config_state_set_by_hand_is_kept(render: Render) -> None:
    docs = render(sets=["redis.enabled=true", "config.state.redis.url=redis://mine:6379/0"])
    assert gateway_config(docs)["state"] == {"redis": {"url": "redis://mine:6379/0"}}


@pytest.mark.parametrize(
    "sets",
    [["state.redis.url=redis://:hunter2@cache:6379/0"], ["state.redis.url=http://cache"], ["redis.enabled=yes"]],
    ids=["password-in-url", "not-redis", "not-boolean"],
)
def test_schema_refuses_bad_redis_values(template: Template, sets: list[str]) -> None:
    result = template(sets=sets)
    assert result.returncode != 0 and "schema" in result.output.lower(), result.output
