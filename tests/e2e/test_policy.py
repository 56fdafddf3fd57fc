"""The local CEL policy backend, policy tests (``ahp-gateway policy test``), ``explain`` and the
bundled default configuration."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.client import post
from tests.support.config import gateway_config, hook
from tests.support.events import ALL_TOOL_BEFORE_CAPS, intercept, result, tool_before
from tests.support.paths import ROOT

POLICY = textwrap.dedent(
    """
    namespace: org.example.test
    rules:
      - id: no-force
        events: [tool.before]
        when: 'has(event.tool.input.command) && event.tool.input.command.contains("--force")'
        deny: {reason: "no force pushes"}
      - id: ask-secrets
        events: [tool.before]
        when: 'has(event.tool.input.command) && event.tool.input.command.contains(".env")'
        ask: {}
        fallback: {deny: {reason: "reading .env needs approval"}}
      - id: note-sudo
        events: [tool.before]
        when: 'has(event.tool.input.command) && event.tool.input.command.startsWith("sudo ")'
        message: {text: "sudo used"}
      - id: broken
        events: [tool.before]
        when: 'event.tool.input.command == "boom" && event.tool.input.missing == 1'
        message: {text: "never"}
    tests:
      - name: force is denied
        event: {type: tool.before, tool: {input: {command: "git push --force"}}}
        expect: [{type: deny, code: org.example.test.no-force}]
      - name: env asks
        event: {type: tool.before, tool: {input: {command: "cat .env"}}}
        expect: [{type: ask}]
      - name: env without ask falls back to deny
        event: {type: tool.before, tool: {input: {command: "cat .env"}}}
        capabilities: {effects: [deny, message]}
        expect: [{type: deny, reason: "reading .env needs approval"}]
      - name: the first deny ends evaluation before later rules
        event: {type: tool.before, tool: {input: {command: "sudo git push --force"}}}
        expect: [{type: deny}]
      - name: sudo gets a message
        event: {type: tool.before, tool: {input: {command: "sudo ls"}}}
        expect: [{type: message, text: "sudo used"}]
    """
)


def local_hook(path: Path, policy: str = "fail-closed") -> dict:
    return {
        "id": "org.example.local",
        "transport": {"type": "local", "policies": [str(path)]},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 100,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "test-policy.yaml"
    path.write_text(POLICY)
    return path


async def test_local_backend_sits_at_its_position_in_the_chain(gateway_factory, stub_factory, http, policy_file):
    """The local backend sees the event as modified by earlier upstreams, like any upstream."""
    rewriter = await stub_factory(
        lambda r: result(
            r, [{"type": "modify", "target": "input", "operation": "replace", "value": {"command": "git push --force"}}]
        )
    )
    after = await stub_factory()
    gw = await gateway_factory(
        gateway_config(
            [hook("org.example.rewriter", rewriter.url), local_hook(policy_file), hook("org.example.after", after.url)]
        )
    )
    _, body = await post(http, gw.url, intercept(tool_before("git push"), ALL_TOOL_BEFORE_CAPS))
    effects = body["result"]["effects"]
    assert [e["type"] for e in effects] == ["modify", "deny"]
    assert effects[1]["extensions"]["org.example.gateway"] == {"upstream": "org.example.local", "kind": "explicit"}
    assert effects[1]["extensions"]["org.example.test"] == {"rule": "no-force"}
    assert after.received == []


async def test_the_rule_memo_keys_by_the_event_as_modified_before_the_local_backend(
    gateway_factory, stub_factory, http, policy_file
):
    """docs/policies/index.md ("The local policy backend") (the rule-result memo): results are remembered by what
    the rules read of the event *the local backend receives*, so an event an earlier upstream
    rewrote is never answered from the entry of the event the harness sent, nor the other way."""
    rewrite = {"on": False}
    force = [{"type": "modify", "target": "input", "operation": "replace", "value": {"command": "git push --force"}}]
    rewriter = await stub_factory(lambda r: result(r, force if rewrite["on"] else []))
    gw = await gateway_factory(gateway_config([hook("org.example.rewriter", rewriter.url), local_hook(policy_file)]))

    async def effects(command: str) -> list[str]:
        _, body = await post(http, gw.url, intercept(tool_before(command), ALL_TOOL_BEFORE_CAPS))
        return [e["type"] for e in body["result"]["effects"]]

    assert await effects("git status") == []  # remembered: "git status" is allowed
    rewrite["on"] = True
    assert await effects("git status") == ["modify", "deny"]  # the local backend saw the rewrite
    rewrite["on"] = False
    assert await effects("git status") == []
    assert await effects("git push --force") == ["deny"]
    assert gw.holder is not None
    (route,) = [r for r in gw.holder.current.intercept_routes["tool.before"] if r.upstream.kind == "local"]
    assert len(route.upstream.library.memo) == 2, "both commands remembered, once each"


async def test_fallback_applies_when_the_effect_is_not_advertised(gateway_factory, http, policy_file):
    gw = await gateway_factory(gateway_config([local_hook(policy_file)]))
    _, body = await post(http, gw.url, intercept(tool_before("cat .env"), ALL_TOOL_BEFORE_CAPS))
    assert body["result"]["effects"] == [{"type": "ask"}]
    _, body = await post(http, gw.url, intercept(tool_before("cat .env"), {"effects": ["deny"]}))
    assert body["result"]["effects"][0]["reason"] == "reading .env needs approval"
    _, body = await post(http, gw.url, intercept(tool_before("cat .env"), {"effects": ["message"]}))
    # Neither ask nor deny can be enforced here: -32003, never "no objection" (issue 28 item 2).
    assert body["error"]["code"] == -32003


@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
async def test_rule_error_is_an_operational_failure(gateway_factory, http, policy_file, policy):
    gw = await gateway_factory(gateway_config([local_hook(policy_file, policy)]))
    _, body = await post(http, gw.url, intercept(tool_before("boom")))
    effects = body["result"]["effects"]
    if policy == "fail-open":
        assert effects == []
    else:
        assert effects[0]["code"] == "org.example.gateway.upstream_unavailable"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_policy_test_command_passes_and_fails(tmp_path, policy_file):
    out = _cli("policy", "test", str(policy_file))
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("5 passed, 0 failed")
    broken = tmp_path / "broken.yaml"
    broken.write_text(POLICY.replace("expect: [{type: ask}]", "expect: [{type: deny}]"))
    out = _cli("policy", "test", str(broken))
    assert out.returncode == 1
    assert "FAIL  env asks" in out.stdout
    assert 'expected: [{"type": "deny"}]' in out.stdout and 'actual:   [{"type": "ask"}]' in out.stdout
    assert out.stdout.strip().endswith("4 passed, 1 failed")


def test_policy_files_with_errors_are_reported_with_positions(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "rules:\n  - id: x\n    events: [tool.before]\n    when: 'event.tool.name =='\n    deny: {reason: r}\n  - id: y\n    events: [tool.before]\n    when: 'true'\n"
    )
    out = _cli("policy", "test", str(bad))
    assert out.returncode == 1
    assert f"{bad}:4: $.rules[0].when: CEL 1:19: Syntax error" in out.stderr
    assert "$.rules[1]: exactly one of deny, ask, message or inject is required" in out.stderr


def test_shipped_policy_library_passes_its_own_tests():
    out = _cli("policy", "test", "policies")
    assert out.returncode == 0, out.stdout[-3000:]
    summary = out.stdout.strip().splitlines()[-1]
    passed = int(summary.split()[0])
    assert passed >= 3 and summary.endswith(" 0 failed")


def test_explain_shows_routing_rules_and_effects(tmp_path, policy_file):
    cfg = gateway_config([local_hook(policy_file)])
    cfg["hooks"][0]["when"] = 'event.tool.name == "shell"'
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(cfg))
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps(
            {
                "id": "evt-x",
                "type": "tool.before",
                "tool": {"name": "shell", "input": {"command": "sudo git push --force"}},
            }
        )
    )
    out = _cli("explain", "--config", str(config), "--event", str(event))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:9] == [
        "event tool.before id=evt-x source=urn:ahp-gateway:policy-test",
        "routing (in chain order):",
        "  org.example.local#0 (local, fail-closed): subscription matches tool.before; selected",
        '      when `event.tool.name == "shell"` = true',
        "      rule test-policy.yaml:no-force = true -> deny",
        "      local backend effects: "
        + json.dumps(
            [
                {
                    "type": "deny",
                    "reason": "no force pushes",
                    "code": "org.example.test.no-force",
                    "extensions": {"org.example.test": {"rule": "no-force"}},
                }
            ]
        ),
    ]


def test_explain_call_shows_answers_and_the_collapsed_result(tmp_path, policy_file):
    cfg = gateway_config([local_hook(policy_file)])
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(cfg))
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"type": "tool.before", "tool": {"input": {"command": "sudo ls"}}}))
    out = _cli("explain", "--config", str(config), "--event", str(event), "--call")
    assert out.returncode == 0, out.stderr
    assert "      rule test-policy.yaml:note-sudo = true -> message" in out.stdout
    assert "      rule test-policy.yaml:no-force = false" in out.stdout
    assert "org.example.local#0: effects in" in out.stdout
    assert '"effects":[{"type":"message","text":"sudo used"}]' in out.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def default_gateway():
    port, admin = _free_port(), _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port), "--admin-port", str(admin)],
        cwd="/",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ},
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, "gateway did not become ready"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    output = proc.stdout.read() if proc.stdout else ""
    assert "bundled default configuration" in output


async def test_bundled_default_denies_force_push_and_allows_ls(default_gateway):
    """Issue acceptance: `ahp-gateway serve` with the bundled default, driven by the SDK harness."""
    from tests.support.sdk_peers import harness, registration, settled
    from tests.support.sdk_peers import tool_before as sdk_tool_before

    reg = registration([("org.example.gateway", default_gateway, "fail-closed", 3000)])
    async with harness(reg) as hooks:
        denied = settled(await sdk_tool_before(hooks, "git push --force origin main"))
        plain = settled(await sdk_tool_before(hooks, "ls"))
    assert denied["permission"] == "deny"
    assert plain["permission"] == "none" and plain["messages"] == []


async def test_bundled_default_answers_empty_effects_for_ls(default_gateway, http):
    _, body = await post(http, default_gateway, intercept(tool_before("ls"), {"effects": ["deny", "message"]}))
    assert body["result"]["effects"] == []
