"""Configuration input that used to be misread silently: duplicate keys, YAML 1.1 booleans in
string fields, local backends without rules, credentials inside URLs (AHP-SEC-001)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.config.load import ConfigError, load
from gateway.runtime import build
from tests.support.client import post
from tests.support.config import hook
from tests.support.config_files import BASE, write_yaml
from tests.support.events import intercept, tool_before

UPSTREAM = "http://127.0.0.1:8801/"
SUB = "{mode: intercept, events: [tool.before], timeoutMs: 300, failurePolicy: fail-closed, content: {default: body}}"


def _issues(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _compile(path)
    return [str(i) for i in info.value.issues]


def _compile(path: Path) -> None:
    from gateway.upstream.http import ClientPool

    build(load(path), ClientPool())


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUARD_TOKEN": "guard-token"}  # the test configuration's credential
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check", "--config", str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


# --- duplicate keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            f"id: org.example.gateway\nlimits:\n  deadlineMs: 2000\nlimits:\n  deadlineMs: 100\n"
            f"hooks:\n  - id: org.example.a\n    transport: {{type: http, url: '{UPSTREAM}'}}\n"
            f"    subscriptions: [{SUB}]\n",
            ":4: $.limits: duplicate key 'limits' (first at line 2)",
        ),
        (
            f"id: org.example.gateway\nhooks:\n  - id: org.example.a\n    transport: {{type: http, url: '{UPSTREAM}'}}\n"
            "    subscriptions:\n      - mode: intercept\n        events: [tool.before]\n        timeoutMs: 300\n"
            "        failurePolicy: fail-closed\n        content: {default: body}\n        failurePolicy: fail-open\n",
            ":11: $.hooks[0].subscriptions[0].failurePolicy: duplicate key 'failurePolicy' (first at line 9)",
        ),
        (  # flow style, and a quoted spelling of the same key
            f"id: org.example.gateway\nhooks:\n  - id: org.example.a\n    transport: {{type: http, 'type': stdio,"
            f" url: '{UPSTREAM}'}}\n    subscriptions: [{SUB}]\n",
            ":4: $.hooks[0].transport.type: duplicate key 'type' (first at line 4)",
        ),
    ],
)
def test_duplicate_keys_in_a_gateway_config_are_errors_with_file_and_line(tmp_path, text, where):
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    (issue,) = _issues(path)
    assert issue == f"{path}{where}"
    out = _check(path)
    assert out.returncode == 1 and f"{path}{where}" in out.stderr


def test_yaml_merge_keys_may_still_override(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "id: org.example.gateway\n"
        "x-sub: &sub {mode: intercept, events: [tool.before], timeoutMs: 300, failurePolicy: fail-closed,"
        " content: {default: body}}\n"
        f"hooks:\n  - id: org.example.a\n    transport: {{type: http, url: '{UPSTREAM}'}}\n"
        "    subscriptions:\n      - <<: *sub\n        timeoutMs: 200\n"
    )
    assert load(path).hooks[0].subscriptions[0].timeoutMs == 200


@pytest.mark.spec("AHP-REG-001")
def test_duplicate_keys_in_a_json_registration_document_are_errors(tmp_path):
    hooks = json.dumps([hook("org.example.a", UPSTREAM)])
    (tmp_path / "registration.json").write_text(
        '{\n  "protocolVersion": "draft",\n  "protocolVersion": "0.1.0-draft.1",\n  "hooks": ' + hooks + "\n}\n"
    )
    path = write_yaml(tmp_path, {"id": "org.example.gateway", "registration": "registration.json"})
    (issue,) = _issues(path)
    assert (
        issue
        == f"{tmp_path / 'registration.json'}:3: $.protocolVersion: duplicate key 'protocolVersion' (first at line 2)"
    )


def _local_config(tmp_path: Path, **transport: object) -> Path:
    local = {
        "id": "org.example.rules",
        "transport": {"type": "local", "policies": ["policies/"], **transport},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 100,
                "failurePolicy": "fail-closed",
                "content": {"default": "body"},
            }
        ],
    }
    (tmp_path / "policies").mkdir(exist_ok=True)
    return write_yaml(tmp_path, {"id": "org.example.gateway", "hooks": [local], "reload": {"watch": False}})


RULE = "  - id: rm-root\n    events: [tool.before]\n    when: 'event.tool.input.command.contains(\"rm -rf /\")'\n"


def test_duplicate_keys_in_a_policy_file_are_errors(tmp_path):
    path = _local_config(tmp_path)
    policy = tmp_path / "policies" / "rules.yaml"
    policy.write_text("namespace: org.example.p\nrules:\n" + RULE + "    when: 'false'\n    deny: {reason: no}\n")
    (issue,) = _issues(path)
    assert issue == f"{policy}:6: $.rules[0].when: duplicate key 'when' (first at line 5)"
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "policy", "test", str(policy)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 1 and "duplicate key 'when'" in out.stdout + out.stderr


# --- YAML 1.1 booleans ------------------------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["off", "Off", "OFF"])
def test_log_decisions_off_is_accepted(tmp_path, spelling):
    cfg = yaml.safe_dump(BASE, sort_keys=False) + f"log: {{decisions: {spelling}}}\n"
    path = tmp_path / "gateway.yaml"
    path.write_text(cfg)
    assert load(path).config.log.decisions == "off"  # never a file named "Off"
    if spelling == "off":
        assert _check(path).returncode == 0


def test_json_false_for_decisions_means_off(tmp_path):
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({**BASE, "log": {"decisions": False}}))
    assert load(path).config.log.decisions == "off"


def test_yaml_11_booleans_stay_strings_where_strings_are_expected_and_booleans_still_parse(tmp_path):
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "id: org.example.gateway\n"
        f"hooks:\n  - id: org.example.a\n    transport: {{type: http, url: '{UPSTREAM}', headers: {{X-Debug: on, X-Trace: yes}}}}\n"
        f"    subscriptions: [{SUB}]\n"
        "metrics: {enabled: off}\ntracing: {propagate: no, otel: false}\nreload: {watch: Yes}\n"
    )
    loaded = load(path)
    assert loaded.hooks[0].transport.headers == {"X-Debug": "on", "X-Trace": "yes"}
    cfg = loaded.config
    assert (cfg.metrics.enabled, cfg.tracing.propagate, cfg.tracing.otel, cfg.reload.watch) == (
        False,
        False,
        False,
        True,
    )


# --- local backend without rules --------------------------------------------------------------------


def test_a_local_backend_without_rules_is_refused(tmp_path):
    path = _local_config(tmp_path)
    (issue,) = _issues(path)
    assert issue.startswith(f"{path}:") and "$.hooks[0].transport.policies: the policy files hold no rule" in issue
    (tmp_path / "policies" / "empty.yaml").write_text("namespace: org.example.p\nrules: []\n")
    assert len(_issues(path)) == 1
    assert _check(path).returncode == 1


def test_allow_empty_starts_a_local_backend_without_rules(tmp_path):
    _compile(_local_config(tmp_path, allowEmpty=True))


async def test_moving_the_policy_files_away_fails_the_reload_and_keeps_the_rules(gateway_factory, http, tmp_path):
    (tmp_path / "policies").mkdir()
    policy = tmp_path / "policies" / "rules.yaml"
    policy.write_text("namespace: org.example.p\nrules:\n" + RULE + "    deny: {reason: never}\n")
    config = yaml.safe_load(_local_config(tmp_path).read_text())
    server = await gateway_factory(config)
    policy.rename(tmp_path / "rules.yaml.moved")
    assert await server.reload() is False
    status, body = await post(http, server.url, intercept(tool_before("rm -rf /")))
    assert status == 200 and body["result"]["effects"][0]["type"] == "deny"


# --- credentials in URLs ----------------------------------------------------------------------------

SECRET = "hunter2secret"


@pytest.mark.spec("AHP-SEC-001")
@pytest.mark.parametrize(
    "url",
    [
        f"http://admin:{SECRET}@127.0.0.1:8801/",
        f"https://admin:{SECRET}@policy.internal/ahp",
        f"http://{SECRET}@127.0.0.1/",  # user only (a token as user name)
        f"http://:{SECRET}@127.0.0.1/",
        f"http://a%40b:{SECRET}@127.0.0.1/",  # encoded @ in the user name
        f"http://127.0.0.1@{SECRET}.example/",  # host-looking user name
        f"http://{SECRET}%40127.0.0.1/",
    ],
)
def test_credentials_in_upstream_urls_are_literal_secrets_and_never_echoed(tmp_path, url):
    cfg = json.loads(json.dumps(BASE))
    cfg["hooks"][0]["transport"]["url"] = url
    path = write_yaml(tmp_path, cfg)
    (issue,) = _issues(path)
    assert issue.startswith(f"{path}:6: $.hooks[0].transport.url: ") and "AHP-SEC-001" in issue
    assert SECRET not in issue


def test_check_never_echoes_a_credential_in_a_url(tmp_path):
    cfg = json.loads(json.dumps(BASE))
    cfg["hooks"][0]["transport"]["url"] = f"http://admin:{SECRET}@127.0.0.1:8801/"
    out = _check(write_yaml(tmp_path, cfg))
    assert out.returncode == 1 and "AHP-SEC-001" in out.stderr
    assert SECRET not in out.stdout + out.stderr


@pytest.mark.spec("AHP-SEC-001")
def test_credentials_in_a_registration_document_or_an_oauth_issuer_are_refused(tmp_path):
    entry = hook("org.example.a", f"https://u:{SECRET}@policy.internal/")
    (tmp_path / "registration.json").write_text(json.dumps({"protocolVersion": "draft", "hooks": [entry]}))
    path = write_yaml(tmp_path, {"id": "org.example.gateway", "registration": "registration.json"})
    (issue,) = _issues(path)
    assert "registration.json" in issue and "AHP-SEC-001" in issue and SECRET not in issue
    cfg = json.loads(json.dumps(BASE))
    cfg["hooks"][0]["transport"]["url"] = "https://policy.internal/"
    cfg["hooks"][0]["authentication"] = {
        "type": "oauth",
        "resource": "https://policy.internal/",
        "issuer": f"https://client:{SECRET}@idp.internal",
        "clientId": "c",
        "clientSecretRef": "env:X",
        "flow": "client_credentials",
    }
    (issue,) = _issues(write_yaml(tmp_path, cfg))
    assert "$.hooks[0].authentication.issuer" in issue and "AHP-SEC-001" in issue and SECRET not in issue


def test_an_at_sign_after_the_authority_is_not_a_credential(tmp_path):
    cfg = json.loads(json.dumps(BASE))
    cfg["hooks"][0]["transport"]["url"] = "http://127.0.0.1:8801/team@example/hook?who=a@b#x@y"
    load(write_yaml(tmp_path, cfg))


# --- upstream headers the HTTP binding writes itself ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("Host", "evil.example"),
        ("content-length", "0"),
        ("Transfer-Encoding", "chunked"),
        ("Connection", "close"),
        ("Content-Type", "text/plain"),
        ("X-Trace", "a\x00b"),
        ("X-Trace\n", "a"),  # a trailing newline in the name: `$` in a pattern would let it through
    ],
)
def test_upstream_headers_cannot_reframe_the_request(tmp_path, name, value):
    """AHP-HTTP-001: a configured header may not duplicate or contradict the framing and media
    type the binding writes (request smuggling toward the upstream), nor hold a NUL."""
    cfg = json.loads(json.dumps(BASE))
    cfg["hooks"][0]["transport"]["headers"] = {name: value}
    (issue,) = _issues(write_yaml(tmp_path, cfg))
    assert "$.hooks[0].transport.headers" in issue
    assert len(value) < 2 or value not in issue  # the value is never echoed
