"""One key style in every JSON output of the CLI: camelCase, as in the configuration
(``remoteCallsNotMade``, ``decidedBy``, ``failUnder``). Keys that are data — event types in the
chain maps of ``check`` — are not names and are not checked."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from tests.support.paths import ROOT

CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
DATA_MAPS = frozenset({"intercept", "shadow", "observe"})
"""check's chains: maps from event type to routes."""


def keys(node: Any, where: str = "$") -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if where.rsplit(".", 1)[-1] in DATA_MAPS:
                found += keys(value, f"{where}[{key}]")
                continue
            found.append(f"{where}.{key}")
            found += keys(value, f"{where}.{key}")
    elif isinstance(node, list):
        for item in node:
            found += keys(item, f"{where}[]")
    return found


def not_camel(document: Any) -> list[str]:
    return [path for path in keys(document) if not CAMEL.match(path.rsplit(".", 1)[-1])]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    main(list(argv))
    out = capsys.readouterr().out
    return json.loads(out)


@pytest.fixture
def fixture_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "cli"
    shutil.copytree(ROOT / "tests" / "fixtures" / "cli", work)
    monkeypatch.chdir(work)
    monkeypatch.setenv("AUDIT_TOKEN", "audit-token-value-never-shown")
    return work


def test_replay_json_is_camel_case_throughout(capsys: pytest.CaptureFixture[str]) -> None:
    body = run_json(
        capsys,
        "replay",
        "--config",
        str(ROOT / "examples/tenants/gateway.yaml"),
        "--events",
        str(ROOT / "examples/replay/capture.jsonl"),
        "--format",
        "json",
        "--all",
    )
    assert body["rows"] and "decidedBy" in body["rows"][0]["new"] and "remoteCallsNotMade" in body
    assert not_camel(body) == []


def test_check_json_is_camel_case_throughout(capsys: pytest.CaptureFixture[str], fixture_dir: Path) -> None:
    assert not_camel(run_json(capsys, "check", "--config", "gateway.yaml", "--format", "json")) == []
    broken = fixture_dir / "broken.yaml"
    broken.write_text("id: org.example.broken\nfanout: sideways\nhooks: []\n")
    body = run_json(capsys, "check", "--config", str(broken), "--format", "json")
    assert body["errors"] and not_camel(body) == []


def test_policy_test_json_is_camel_case_throughout(capsys: pytest.CaptureFixture[str], fixture_dir: Path) -> None:
    body = run_json(capsys, "policy", "test", "policies", "--format", "json", "--coverage", "--fail-under", "1")
    assert body["tests"] and "failUnder" in body["coverage"]
    assert not_camel(body) == []


def test_the_checker_catches_snake_case() -> None:
    """The check itself can fail: a snake_case key anywhere but a data map is reported."""
    assert not_camel({"rows": [{"new": {"decided_by": "x"}}], "intercept": {"tool.before": []}}) == [
        "$.rows[].new.decided_by"
    ]
