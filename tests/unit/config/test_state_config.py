"""``state.redis``, ``uploads.storage.type`` and ``rateLimits`` as ``ahp-gateway check`` sees them:
every mistake is an issue with the file, the path and the line, and fails ``check`` as it would
fail ``serve``."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.check_cmd import check

HEAD = """id: org.example.gateway
hooks:
  - id: org.example.policy
    transport: {type: http, url: "http://127.0.0.1:9/"}
    subscriptions:
      - mode: intercept
        events: [tool.before]
        timeoutMs: 500
        failurePolicy: fail-closed
        content: {default: body}
"""
STATE = """state:
  redis:
    url: redis://redis:6379/0
    timeoutMs: 50
"""


def run(tmp_path: Path, tail: str) -> tuple[int, dict]:
    path = tmp_path / "gateway.yaml"
    path.write_text(HEAD + tail)
    result = check(str(path), "json")
    return result.code, json.loads(result.stdout)


def test_the_issue_configuration_checks_as_written(tmp_path: Path) -> None:
    tail = STATE + (
        "uploads:\n  storage:\n    type: redis\n"
        "rateLimits:\n"
        "  - id: per-principal\n"
        "    key: 'principal.name'\n"
        "    requestsPerSecond: 5\n"
        "    burst: 10\n"
        "    scope: shared\n"
        "    onStateError: fail-open\n"
    )
    code, body = run(tmp_path, tail)
    assert code == 0 and body["errors"] == [] and body["warnings"] == []


def test_a_key_that_is_not_a_string_is_an_error_at_its_line(tmp_path: Path) -> None:
    tail = STATE + "rateLimits:\n  - id: numbers\n    key: '1 + 2'\n    requestsPerSecond: 1\n    burst: 1\n"
    code, body = run(tmp_path, tail)
    (issue,) = body["errors"]
    assert code == 1 and issue["path"] == "$.rateLimits[0].key" and issue["line"] == 17
    assert "expected string" in issue["message"] and issue["file"].endswith("gateway.yaml")


def test_a_key_that_does_not_compile_is_an_error(tmp_path: Path) -> None:
    tail = (
        "rateLimits:\n  - id: broken\n    key: 'principal.'\n    requestsPerSecond: 1\n    burst: 1\n    scope: local\n"
    )
    code, body = run(tmp_path, tail)
    assert code == 1 and [i["path"] for i in body["errors"]] == ["$.rateLimits[0].key"]


def test_scope_shared_without_state_redis_is_an_error_at_its_line(tmp_path: Path) -> None:
    tail = "rateLimits:\n  - id: per-principal\n    key: principal.name\n    requestsPerSecond: 1\n    burst: 1\n    scope: shared\n"
    code, body = run(tmp_path, tail)
    (issue,) = body["errors"]
    assert code == 1 and issue["path"] == "$.rateLimits[0].scope" and issue["line"] == 16
    assert "state.redis" in issue["message"]


def test_redis_upload_storage_without_state_redis_is_an_error(tmp_path: Path) -> None:
    code, body = run(tmp_path, "uploads:\n  storage:\n    type: redis\n")
    assert code == 1 and [i["path"] for i in body["errors"]] == ["$.uploads.storage.type"]


def test_wrong_types_unknown_keys_and_bad_values(tmp_path: Path) -> None:
    tail = STATE + (
        "rateLimits:\n"
        "  - id: a\n    key: principal.name\n    requestsPerSecond: fast\n    burst: 1\n"
        "  - id: b\n    key: principal.name\n    requestsPerSecond: 1\n    burst: 0\n    scope: global\n"
        "    onStateError: fail-maybe\n    burts: 3\n"
    )
    code, body = run(tmp_path, tail)
    paths = {i["path"] for i in body["errors"]}
    assert code == 1
    assert {"$.rateLimits[0].requestsPerSecond", "$.rateLimits[1].burst", "$.rateLimits[1].scope"} <= paths
    assert "$.rateLimits[1].onStateError" in paths
    assert all(i["line"] for i in body["errors"])
    assert [w["path"] for w in body["warnings"]] == ["$.rateLimits[1].burts"]


def test_duplicate_limit_ids_and_a_url_with_a_password(tmp_path: Path) -> None:
    tail = (
        "state:\n  redis:\n    url: redis://:hunter2@redis:6379/0\n"
        "rateLimits:\n"
        "  - {id: a, key: principal.name, requestsPerSecond: 1, burst: 1}\n"
        "  - {id: a, key: principal.name, requestsPerSecond: 1, burst: 1}\n"
    )
    code, body = run(tmp_path, tail)
    paths = {i["path"] for i in body["errors"]}
    assert code == 1 and "$.state.redis.url" in paths and "$.rateLimits" in paths
    assert "hunter2" not in json.dumps(body), "the secret never appears in check output"


def test_spool_storage_needs_a_spool_dir(tmp_path: Path) -> None:
    code, body = run(tmp_path, "uploads:\n  storage:\n    type: spool\n")
    assert code == 1 and [i["path"] for i in body["errors"]] == ["$.uploads.storage"]
