"""Configuration validation (protocol §10.5) and ``ahp-gateway check``: every rule has a failing
example whose error names the file, the JSON path (and line) and the reason."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config.issues import ConfigError
from gateway.config.load import load
from tests.support.config_files import BASE, write_yaml
from tests.support.paths import VECTORS

REG_FIXTURES = VECTORS / "ahp-spec" / "fixtures" / "draft" / "registration"


def _errors(tmp_path: Path, cfg: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(write_yaml(tmp_path, cfg))
    return [str(i) for i in info.value.issues]


def _mutate(path: str, value: Any = None, *, delete: bool = False) -> dict[str, Any]:
    cfg = copy.deepcopy(BASE)
    node: Any = cfg
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    last = keys[-1]
    if delete:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return cfg


def test_valid_config_loads(tmp_path):
    loaded = load(write_yaml(tmp_path, BASE))
    assert loaded.hooks[0].id == "org.example.guard"
    assert loaded.warnings == ()


RULES = [
    ("hooks", [], "$.hooks", "must not be empty"),
    ("hooks.0.id", "not-reverse-dns", "$.hooks[0].id", "pattern"),
    ("hooks.0.subscriptions.0.timeoutMs", None, "$.hooks[0].subscriptions[0].timeoutMs", "valid integer"),
    ("hooks.0.subscriptions.0.failurePolicy", "fail-maybe", "$.hooks[0].subscriptions[0].failurePolicy", "fail-open"),
    ("hooks.0.subscriptions.1.timeoutMs", 5, "$.hooks[0].subscriptions[1]", "must not set timeoutMs"),
    ("hooks.0.subscriptions.1.failurePolicy", "fail-open", "$.hooks[0].subscriptions[1]", "must not set failurePolicy"),
    ("hooks.0.subscriptions.0.content", {"text": "body"}, "$.hooks[0].subscriptions[0].content.default", "required"),
    ("hooks.0.subscriptions.0.events", ["turn.end"], "$.hooks[0].subscriptions[0].events", "cannot be intercepted"),
    ("hooks.0.subscriptions.0.events", ["tool.*.x"], "$.hooks[0].subscriptions[0].events", "unknown event"),
    ("hooks.0.subscriptions.0.events", ["tool.before", "tool.before"], "$.hooks[0].subscriptions[0].events", "unique"),
    ("hooks.0.subscriptions.0.events", [], "$.hooks[0].subscriptions[0].events", "at least 1"),
    ("hooks.0.authentication", {"type": "bearer"}, "$.hooks[0]", "exactly one of tokenEnv or tokenRef"),
    ("hooks.0.authentication", {"type": "bearer", "tokenEnv": "A", "tokenRef": "env:B"}, "$.hooks[0]", "exactly one"),
    ("hooks.0.authentication", {"type": "bearer", "token": "s3cr3t"}, "$.hooks[0]", "AHP-SEC-001"),
    ("hooks.0.authentication", {"type": "mtls", "certRef": "x"}, "$.hooks[0]", "AHP-AUTH-001"),
    ("hooks.0.authentication", {"type": "bearer", "tokenRef": "vault:x"}, "$.hooks[0]", "env:NAME or file:/path"),
    ("hooks.0.contentReceiver", {"endpoint": "https://x"}, "$.hooks[0]", "contentReceiver"),
    ("hooks.0.subscriptions.0.scope", "managed", "$.hooks[0].subscriptions[0]", "disableable: false"),
    ("hooks.0.transport.url", "http://policy.example.com/", "$.hooks[0].transport.url", "only allowed to loopback"),
    ("hooks.0.transport.url", "ftp://x/", "$.hooks[0].transport.url", "pattern"),
    ("hooks.0.transport.headers", {"Authorization": "Bearer x"}, "$.hooks[0].transport.headers", "literal credential"),
    (
        "hooks.0.transport",
        {"type": "stdio", "command": "x", "lifecycle": "persistent"},
        "$.hooks[0]",
        "authentication applies to http",
    ),
    ("hooks.0.subscriptions", None, "$.hooks[0].subscriptions", "does not discover"),
    ("protocolVersions", ["0.2"], "$.protocolVersions", "not implemented"),
    ("protocolVersions", ["0.1"], "$.protocolVersions", 'list "draft" too'),
    ("id", "gateway", "$.id", "pattern"),
    ("limits", {"deadlineMs": 0}, "$.limits.deadlineMs", "greater than or equal to 1"),
    ("fanout", "broadcast", "$.fanout", "serial"),
]


@pytest.mark.spec("AHP-REG-001")
@pytest.mark.parametrize(("path", "value", "where", "reason"), RULES, ids=[f"{r[0]}={r[1]!r}"[:60] for r in RULES])
def test_each_rule_has_a_failing_example(tmp_path, path, value, where, reason):
    cfg = _mutate(path, delete=True) if value is None and path.endswith("subscriptions") else _mutate(path, value)
    errors = _errors(tmp_path, cfg)
    assert any(where in e and reason in e for e in errors), errors
    assert all(str(tmp_path / "gateway.yaml") in e for e in errors)


def test_errors_carry_line_numbers(tmp_path):
    errors = _errors(tmp_path, _mutate("hooks.0.subscriptions.0.failurePolicy", "nope"))
    assert errors[0].startswith(f"{tmp_path / 'gateway.yaml'}:")
    line = int(errors[0].split(":")[1])
    text = (tmp_path / "gateway.yaml").read_text().splitlines()
    assert "failurePolicy" in text[line - 1]


def test_all_errors_are_reported_together(tmp_path):
    cfg = _mutate("hooks.0.subscriptions.0.failurePolicy", "nope")
    cfg["hooks"][0]["subscriptions"][1]["timeoutMs"] = 4
    cfg["fanout"] = "x"
    assert len(_errors(tmp_path, cfg)) >= 3


def test_duplicate_ids_are_a_semantic_error(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["hooks"].append(copy.deepcopy(cfg["hooks"][0]))
    errors = _errors(tmp_path, cfg)
    assert any("$.hooks[1].id" in e and "duplicate hook id" in e for e in errors)


def test_unknown_fields_are_warnings_not_errors(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["hooks"][0]["futureField"] = 1
    cfg["hooks"][0]["subscriptions"][0]["upload"] = {"endpoint": "https://x", "timeoutMs": 1, "maxBytes": 1}
    loaded = load(write_yaml(tmp_path, cfg))
    warnings = [str(w) for w in loaded.warnings]
    assert any("$.hooks[0].futureField" in w and "unknown field ignored" in w for w in warnings)
    assert any("upload" in w for w in warnings)


def test_deadline_at_or_above_frontend_timeout_warns(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["frontend"] = {"timeoutMs": 1000}
    cfg["limits"] = {"deadlineMs": 1000}
    warnings = [str(w) for w in load(write_yaml(tmp_path, cfg)).warnings]
    assert any("frontend.timeoutMs" in w for w in warnings)


def _registration_config(tmp_path: Path, doc_name: str, doc: dict[str, Any]) -> Path:
    (tmp_path / doc_name).write_text(json.dumps(doc))
    return write_yaml(tmp_path, {"id": "org.example.gateway", "registration": doc_name})


@pytest.mark.spec("AHP-REG-001")
@pytest.mark.parametrize("fixture", sorted(p.name for p in REG_FIXTURES.glob("*.json")))
def test_registration_fixtures(tmp_path, fixture):
    """A portable registration document is used unchanged as the upstream list; invalid ones are
    rejected exactly as a harness must (including mtls/workload under AHP-AUTH-001)."""
    doc = json.loads((REG_FIXTURES / fixture).read_text())
    path = _registration_config(tmp_path, fixture, doc)
    if fixture.endswith(".valid.json"):
        loaded = load(path)
        assert [h.id for h in loaded.hooks] == [h["id"] for h in doc["hooks"]]
    else:
        with pytest.raises(ConfigError) as info:
            load(path)
        assert all(fixture in str(i) for i in info.value.issues), info.value.issues


def test_registration_documents_pass_the_canonical_schema_when_valid():
    from gateway.protocol.schemas import load as schemas

    for path in REG_FIXTURES.glob("*.json"):
        assert schemas().registration.ok(json.loads(path.read_text())) == path.name.endswith(".valid.json"), path.name


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GUARD_TOKEN": "guard-token"}  # BASE's credential, resolved by check as by serve
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, cwd=cwd, timeout=60, env=env
    )


def test_check_cli_summarises_the_chain(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["hooks"].append(
        {
            "id": "org.example.dlp",
            "transport": {"type": "http", "url": "http://127.0.0.1:8802/"},
            "subscriptions": [
                {
                    "mode": "intercept",
                    "events": ["tool.*"],
                    "timeoutMs": 200,
                    "failurePolicy": "fail-open",
                    "content": {"default": "body"},
                }
            ],
        }
    )
    out = _cli("check", "--config", str(write_yaml(tmp_path, cfg)))
    assert out.returncode == 0, out.stderr
    assert "tool.before:" in out.stdout
    assert "org.example.guard (http, 300 ms, fail-closed) -> org.example.dlp (http, 200 ms, fail-open)" in out.stdout
    assert "timeoutMs 2500" in out.stdout
    assert len(out.stdout.splitlines()) < 40


def test_check_cli_exits_1_with_every_error(tmp_path):
    cfg = _mutate("hooks.0.subscriptions.0.failurePolicy", "nope")
    cfg["fanout"] = "x"
    out = _cli("check", "--config", str(write_yaml(tmp_path, cfg)))
    assert out.returncode == 1
    assert "$.fanout" in out.stderr and "$.hooks[0].subscriptions[0].failurePolicy" in out.stderr
    assert "2 error(s)" in out.stderr


def test_check_cli_reports_cel_errors_with_position(tmp_path):
    cfg = copy.deepcopy(BASE)
    cfg["hooks"][0]["when"] = "event.tool.name == "
    cfg["hooks"][0]["subscriptions"][0]["when"] = "evnt.type == 'x'"
    out = _cli("check", "--config", str(write_yaml(tmp_path, cfg)))
    assert out.returncode == 1
    assert "$.hooks[0].when: CEL 1:20: Syntax error" in out.stderr
    assert "$.hooks[0].subscriptions[0].when: CEL 1:5: undeclared reference to 'evnt.type'" in out.stderr


def test_missing_file_and_broken_yaml(tmp_path):
    out = _cli("check", "--config", str(tmp_path / "absent.yaml"))
    assert out.returncode == 1 and "file not found" in out.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nhooks: [\n")
    out = _cli("check", "--config", str(bad))
    assert out.returncode == 1 and "parse error" in out.stderr


def test_version_flag():
    out = _cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("ahp-gateway ")


def test_bundled_default_checks_clean():
    from gateway.config.load import DEFAULT_CONFIG

    out = _cli("check", "--config", str(DEFAULT_CONFIG))
    assert out.returncode == 0, out.stderr
    assert "org.ahp-gateway.policies (local" in out.stdout


def test_unknown_transport_or_mode_names_the_field(tmp_path):
    cfg = _mutate("hooks.0.transport", {"type": "grpc", "url": "x"})
    del cfg["hooks"][0]["authentication"]
    errors = _errors(tmp_path, cfg)
    assert any("$.hooks[0].transport" in e and "unknown type 'grpc'" in e for e in errors), errors
    errors = _errors(tmp_path, _mutate("hooks.0.subscriptions.0.mode", None))
    assert any("$.hooks[0].subscriptions[0]" in e and "mode is required" in e for e in errors), errors


def test_retired_granian_listener_is_an_error_with_file_and_line(tmp_path):
    """``listen.server: granian`` was retired: refused where it is written, pointing to the manual."""
    cfg = {**copy.deepcopy(BASE), "listen": {"host": "127.0.0.1", "server": "granian"}}
    with pytest.raises(ConfigError) as info:
        load(write_yaml(tmp_path, cfg))
    (issue,) = info.value.issues
    assert issue.file == str(tmp_path / "gateway.yaml")
    assert issue.path == "$.listen.server"
    lines = (tmp_path / "gateway.yaml").read_text().splitlines()
    assert issue.line is not None and "server: granian" in lines[issue.line - 1]
    assert "granian listener was retired" in issue.message and "docs/configuration.md" in issue.message


def test_listen_server_aiohttp_still_loads(tmp_path):
    cfg = {**copy.deepcopy(BASE), "listen": {"server": "aiohttp"}}
    assert load(write_yaml(tmp_path, cfg)).config.listen.server == "aiohttp"
