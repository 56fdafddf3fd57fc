"""Snapshots of CLI output: the exact text and JSON operators and CI scripts read. Each command runs
for real in a copy of tests/fixtures/cli; the snapshot holds the exit code, stdout and stderr.

Regenerate after an intended change with ``UPDATE_SNAPSHOTS=1 pytest tests/unit/cli/test_cli_snapshots.py``
and review the diff. Snapshots must not contain machine paths or secrets: the fixture's upstream
token is set in the environment and must never appear."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "cli"
SNAPSHOTS = ROOT / "tests" / "snapshots"
SECRET = "audit-token-value-never-shown"

CASES: dict[str, list[str]] = {
    "check-text": ["check", "--config", "gateway.yaml"],
    "check-json": ["check", "--config", "gateway.yaml", "--format", "json"],
    "check-strict": ["check", "--config", "gateway.yaml", "--strict"],
    "check-stdin": ["check", "--config", "-"],
    "check-errors": ["check", "--config", "broken.yaml"],
    "check-errors-json": ["check", "--config", "broken.yaml", "--format", "json"],
    "policy-test-coverage": ["policy", "test", "policies", "--coverage", "-v"],
    "policy-test-run-json": ["policy", "test", "policies", "--run", "sudo", "--format", "json", "--coverage"],
    "policy-test-fail-under": ["policy", "test", "policies", "--fail-under", "90"],
    "schema-policy": ["schema", "--kind", "policy"],
    "schema-registration": ["schema", "--kind", "registration"],
    "schema-config": ["schema", "--kind", "config"],
    "hook-config-claude-code": ["hook", "config", "claude-code", "--url", "http://127.0.0.1:8080/"],
    "hook-config-copilot-http": ["hook", "config", "copilot", "--url", "http://127.0.0.1:8080/", "--http"],
    "hook-config-gemini-headless": [
        "hook",
        "config",
        "gemini",
        "--url",
        "http://127.0.0.1:8080/",
        "--token-file",
        "hook-token",
        "--non-interactive",
    ],
    "hook-config-unknown": ["hook", "config", "claude", "--url", "http://127.0.0.1:8080/"],
}
# `hook config` prints the absolute paths of the interpreter and of the token file; the snapshots
# show placeholders (the commands are `<python> -m gateway` here, the console script when installed).
BROKEN = """\
id: org.example.broken
fanout: sideways
hooks:
  - id: org.example.policies
    transport: {type: local, policies: [policies/]}
    subscriptions:
      - mode: intercept
        events: [tool.befor]
        timeoutMs: 100
        failurePolicy: fail-closed
        content: {default: body}
"""


def run_case(args: list[str], workdir: Path) -> str:
    stdin = (workdir / "gateway.yaml").read_text() if "-" in args else None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AUDIT_TOKEN": SECRET}
    proc = subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        cwd=workdir,
        input=stdin,
        env=env,
        timeout=120,
        check=False,
    )
    text = (
        f"$ ahp-gateway {' '.join(args)}\n[exit {proc.returncode}]\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"
    )
    if args[:2] == ["hook", "config"]:
        text = text.replace(os.path.abspath(sys.executable), "<python>").replace(str(workdir), "<workdir>")
    return text


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("snapshots") / "cli"
    shutil.copytree(FIXTURE, target)
    (target / "broken.yaml").write_text(BROKEN)
    (target / "hook-token").write_text("hook-token-value\n")
    return target


@pytest.mark.parametrize("name", list(CASES))
def test_cli_output_matches_its_snapshot(name: str, workdir: Path) -> None:
    text = run_case(CASES[name], workdir)
    for forbidden in (str(workdir), str(ROOT), str(Path.home()), SECRET):
        assert forbidden not in text, f"{name}: output contains {forbidden!r}"
    snapshot = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(text)
    assert snapshot.exists(), f"no snapshot {snapshot.name}; run with UPDATE_SNAPSHOTS=1"
    assert text == snapshot.read_text(), f"{name}: output differs from tests/snapshots/{snapshot.name}"


def test_every_snapshot_belongs_to_a_case() -> None:
    stale = sorted(p.stem for p in SNAPSHOTS.glob("*.txt") if p.stem not in CASES and not p.stem.startswith("replay-"))
    assert not stale, f"snapshots without a case: {stale}"
