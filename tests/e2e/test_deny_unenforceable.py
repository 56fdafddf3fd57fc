"""A local policy deny never becomes "no objection" (issue 28 item 2, AHP-CAP-001, AHP-FAIL-001).

When the harness did not advertise ``deny``, a matching deny rule answers the strongest effect the
harness can enforce, ``ask``; when it advertised neither, the gateway cannot answer honestly and
says so with JSON-RPC -32003 (``backend_unavailable``, protocol §3), whatever the hook's failure
policy, so the harness applies its own policy for the gateway instead of running the call.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.client import post
from tests.support.config import gateway_config
from tests.support.events import intercept, tool_before

POLICY = textwrap.dedent(
    """
    namespace: org.example.guard
    rules:
      - id: no-force
        events: [tool.before]
        when: 'event.tool.input.command.contains("--force")'
        deny: {reason: "force pushes are not allowed"}
      - id: env-needs-approval
        events: [tool.before]
        when: 'event.tool.input.command.contains(".env")'
        ask: {}
        fallback: {deny: {reason: "reading .env needs approval"}}
      - id: note
        events: [tool.before]
        when: 'true'
        message: {text: "seen"}
    """
)


def _local(path: Path, policy: str) -> dict[str, Any]:
    return {
        "id": "org.example.local",
        "transport": {"type": "local", "policies": [str(path)]},
        "subscriptions": [
            {
                "mode": "intercept",
                "events": ["tool.before"],
                "timeoutMs": 200,
                "failurePolicy": policy,
                "content": {"default": "body"},
            }
        ],
    }


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    path = tmp_path / "guard.yaml"
    path.write_text(POLICY)
    return path


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
async def test_cap_001_a_deny_rule_asks_when_the_harness_advertises_ask_but_not_deny(
    gateway_factory, http, policy_path, policy
):
    gw = await gateway_factory(gateway_config([_local(policy_path, policy)]))
    status, body = await post(http, gw.url, intercept(tool_before("git push --force"), {"effects": ["ask", "message"]}))
    assert status == 200, body
    # the deny's reason goes to the person asked as a message (issue 29: an ask has no text)
    assert body["result"]["effects"] == [{"type": "message", "text": "force pushes are not allowed"}, {"type": "ask"}]
    _, body = await post(http, gw.url, intercept(tool_before("git push --force"), {"effects": ["ask"]}))
    assert body["result"]["effects"] == [{"type": "ask"}], body


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("command", ["git push --force", "cat .env"])
@pytest.mark.parametrize("policy", ["fail-open", "fail-closed"])
async def test_fail_001_a_deny_the_harness_cannot_enforce_is_backend_unavailable_under_any_policy(
    gateway_factory, http, policy_path, policy, command
):
    """Neither deny nor ask advertised: -32003 (never ``effects: []``), also for an asking rule's
    deny fallback, and under fail-open too (a decision is not an operational failure)."""
    gw = await gateway_factory(gateway_config([_local(policy_path, policy)]))
    status, body = await post(http, gw.url, intercept(tool_before(command), {"effects": ["message"]}))
    assert status == 200, body
    assert "result" not in body and body["error"]["code"] == -32003, body


async def test_advice_still_flows_when_nothing_is_denied(gateway_factory, http, policy_path):
    gw = await gateway_factory(gateway_config([_local(policy_path, "fail-open")]))
    _, body = await post(http, gw.url, intercept(tool_before("ls"), {"effects": ["message"]}))
    assert body["result"]["effects"] == [{"type": "message", "text": "seen"}], body
