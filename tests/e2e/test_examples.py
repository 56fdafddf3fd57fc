"""examples/ runs as documented: every configuration passes ``ahp-gateway check --strict``, every
sample event goes through ``ahp-gateway explain`` with the rule the README promises, the example
policies pass their tests, the registration document is a valid AHP registration (upstream
schema) used unchanged, and the recorded capture replays to the changes examples/README.md shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.check_cmd import check, load_and_build
from gateway.explain import explain, request_from
from gateway.protocol import schemas
from gateway.runtime import RuntimeConfig
from tests.support.paths import ROOT

EXAMPLES = ROOT / "examples"
CONFIGS = sorted(EXAMPLES.glob("*/gateway.yaml"))
EVENTS = sorted((EXAMPLES / "events").glob("*.json"))
DEFAULT = "gateway/data/gateway.default.yaml"
SNAPSHOTS = ROOT / "tests" / "snapshots"

EXPECTED_RULES = {
    # sample event -> (the rule that fires under the default configuration, the effect it emits)
    "git-force-push.json": ("git.yaml:force-push-protected", "deny"),
    "curl-pipe-sh.json": ("remote-code.yaml:pipe-to-shell", "ask"),
    "read-dotenv.json": ("secrets.yaml:dotenv-read", "ask"),
    "permission-rm-rf.json": ("destructive.yaml:rm-root-home-system", "deny"),
    "ls.json": (None, None),
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_the_examples_are_all_here() -> None:
    assert {p.parent.name for p in CONFIGS} == {"chain", "tenants", "shadow", "registration", "replay", "docker"}
    assert set(EXPECTED_RULES) == {p.name for p in EVENTS}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.parent.name)
def test_every_example_config_passes_check_strict(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command's own function (the CLI only parses and prints it); the CLI wiring itself is
    exercised by the explain and replay tests below and by test_cli_tools.py."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("DLP_TOKEN", "example-token")  # chain/: the token its README command sets
    # registration/ names a deployment's token file (/var/run/secrets/…): checked without resolving
    resolve = config.parent.name != "registration"
    outcome = check(str(config.relative_to(ROOT)), strict=True, resolve=resolve)
    assert outcome.code == 0, outcome.stdout + outcome.stderr
    assert outcome.stdout.startswith("OK gateway.yaml")


@pytest.fixture(scope="module")
def default_snapshot() -> RuntimeConfig:
    _, snap = load_and_build(str(ROOT / DEFAULT))
    assert isinstance(snap, RuntimeConfig)
    return snap


@pytest.mark.parametrize("event", EVENTS, ids=lambda p: p.stem)
def test_every_sample_event_explains_with_the_promised_rule(event: Path, default_snapshot: RuntimeConfig) -> None:
    """What ``ahp-gateway explain --config gateway/data/gateway.default.yaml --event <file>`` prints
    (the same functions; one compile of the library for all events)."""
    document = json.loads(event.read_text())
    lines = explain(default_snapshot, request_from(document, None, default_snapshot))
    rule, effect = EXPECTED_RULES[event.name]
    fired = [line.strip() for line in lines if "= true" in line]
    if rule is None:
        assert fired == [] and "      local backend effects: []" in lines
    else:
        assert fired == [f"rule {rule} = true -> {effect}"], lines


def test_explain_cli_runs_the_readme_example() -> None:
    command = f"ahp-gateway explain --config {DEFAULT} --event examples/events/git-force-push.json"
    assert command in (ROOT / "README.md").read_text(), "the README's Try it section names this command"
    out = cli(*command.split()[1:])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rule git.yaml:force-push-protected = true -> deny" in out.stdout


def test_explain_shows_the_shadow_candidate_rule() -> None:
    _, snap = load_and_build(str(EXAMPLES / "shadow" / "gateway.yaml"))
    document = json.loads((EXAMPLES / "events" / "git-force-push.json").read_text())
    lines = explain(snap, request_from(document, None, snap))
    assert any(line.startswith("  org.example.policies-next#0 (local, shadow)") for line in lines), lines
    assert "      rule git-next.yaml:any-force-push = true -> deny" in lines


def test_example_policies_pass_their_tests_and_cover_every_rule() -> None:
    out = cli("policy", "test", "examples/tenants/policies", "examples/shadow/policies-next", "--fail-under", "100")
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_registration_document_is_a_valid_ahp_registration_used_unchanged() -> None:
    document = json.loads((EXAMPLES / "registration" / "registration.json").read_text())
    assert schemas.load().registration.ok(document), schemas.load().registration.explain(document)
    out = cli("check", "--no-resolve", "--config", "examples/registration/gateway.yaml", "--format", "json")
    body = json.loads(out.stdout)
    assert body["intercept"]["tool.before"][0]["hook"] == "com.example.policy"
    assert body["intercept"]["tool.before"][0]["timeoutMs"] == 750


def test_the_stdio_backend_of_the_chain_answers() -> None:
    """The chain's stdio backend speaks AHP over stdio (one JSON object per line)."""
    event = json.loads((EXAMPLES / "events" / "ls.json").read_text())
    event["tool"]["input"]["command"] = "sudo ls"
    request = {
        "jsonrpc": "2.0",
        "id": event["id"],
        "method": "hooks/intercept",
        "params": {"protocolVersion": "draft", "event": event, "capabilities": {"effects": ["deny", "message"]}},
    }
    note = {"jsonrpc": "2.0", "method": "hooks/observe", "params": {"protocolVersion": "draft", "event": event}}
    proc = subprocess.run(
        [sys.executable, "lint_backend.py"],
        input=json.dumps(note) + "\n" + json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        cwd=EXAMPLES / "chain",
        timeout=30,
        check=True,
    )
    (line,) = proc.stdout.splitlines()
    answer = json.loads(line)
    assert answer["id"] == event["id"]
    assert answer["result"]["effects"] == [{"type": "message", "text": "lint: this command runs as root."}]
    assert schemas.load().response_for["tool.before"].ok(answer)


def test_the_recorded_capture_replays_as_the_readme_shows() -> None:
    out = cli("replay", "--config", "examples/tenants/gateway.yaml", "--events", "examples/replay/capture.jsonl")
    assert out.returncode == 1, out.stderr
    readme = (EXAMPLES / "README.md").read_text()
    block = readme.split("## What replay shows", 1)[1].split("```\n", 2)[1]
    assert out.stdout == block, "examples/README.md shows a different replay result"
    snapshot = SNAPSHOTS / "replay-tenants.txt"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        snapshot.write_text(out.stdout)
    assert out.stdout == snapshot.read_text()
    same = cli("replay", "--config", "examples/replay/gateway.yaml", "--events", "examples/replay/capture.jsonl")
    assert same.returncode == 0 and same.stdout == "0 of 8 events change (baseline: recorded answers)\n"
