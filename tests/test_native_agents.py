"""What the real agents showed (issue 29): payloads and answers as the agents' own binaries send and
read them, captured from runs of the pinned versions (Copilot CLI 1.0.102, Gemini CLI 0.61.0)
against a fake model server on loopback. Each test here failed before its fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gateway.native import ahp, flow
from gateway.native.model import NativeAnswer, Translation

# Copilot CLI 1.0.102, `copilot -p` with hooks in .github/hooks/ (paths and ids replaced).
COPILOT_SESSION = "374132f3-67c2-46bd-993c-711a054401c3"
COPILOT_102 = {
    "preToolUse": {
        "sessionId": COPILOT_SESSION,
        "timestamp": 1796223627096,
        "cwd": "/home/ana/payments",
        "toolName": "bash",
        "toolArgs": {"command": "git push --force origin main", "description": "run it"},
    },
    "permissionRequest": {
        "hookName": "permissionRequest",
        "sessionId": COPILOT_SESSION,
        "timestamp": 1796223627131,
        "cwd": "/home/ana/payments",
        "toolName": "bash",
        "toolInput": {"command": "git push --force origin main"},
        "permissionSuggestions": [],
    },
    "postToolUse": {
        "sessionId": COPILOT_SESSION,
        "timestamp": 1796223627161,
        "cwd": "/home/ana/payments",
        "toolName": "bash",
        "toolArgs": {"command": "ls", "description": "run it"},
        "toolResult": {
            "resultType": "success",
            "textResultForLlm": "README.md\n<shellId: 0 completed with exit code 0>",
        },
    },
}
R = "Force-pushing to main is not allowed."


def translate(harness: str, payload: dict[str, Any], event: str | None) -> Translation:
    tr = flow.codec_for(harness).translate(copy.deepcopy(payload), event)
    assert tr is not None
    return tr


def answer(harness: str, tr: Translation, effects: list[dict[str, Any]]) -> NativeAnswer:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": tr.message["id"], "result": {"protocolVersion": "draft", "effects": effects}}
    ).encode()
    return flow.conclude(flow.codec_for(harness), tr, 200, body, "deny")


# ------------------------------------------------------------------------- Copilot payloads
@pytest.mark.parametrize("event", [None, "permissionRequest"])
def test_copilot_permission_request_reads_the_real_tool_input(event: str | None) -> None:
    """issue 29: Copilot 1.0.x sends the permission request's input as ``toolInput`` (an object);
    the gateway received ``input: {}``, so a force push guarded only there ran. Without --event
    the payload's ``hookName`` names the event (it was taken for a preToolUse)."""
    tr = translate("copilot", COPILOT_102["permissionRequest"], event)
    assert tr.native_event == "PermissionRequest"
    ev = tr.message["params"]["event"]
    assert ev["type"] == "tool.permission.request"
    assert ev["tool"]["input"] == {"command": "git push --force origin main"}
    assert tr.tool_input == {"command": "git push --force origin main"}


@pytest.mark.parametrize(
    "tool_args",
    [
        {"command": "git push --force origin main", "description": "run it"},  # 1.0.x: an object
        '{"command":"git push --force origin main","description":"run it"}',  # older: a JSON string
    ],
)
def test_copilot_tool_args_as_object_or_json_string(tool_args: Any) -> None:
    """issue 29: ``toolArgs`` arrives as an object in Copilot 1.0.x, not only as a JSON string;
    both give the same AHP input and the same synthesized call id."""
    pre = translate("copilot", {**COPILOT_102["preToolUse"], "toolArgs": tool_args}, "preToolUse")
    assert pre.message["params"]["event"]["tool"]["input"] == {
        "command": "git push --force origin main",
        "description": "run it",
    }
    reference = translate("copilot", COPILOT_102["preToolUse"], "preToolUse")
    assert pre.message["params"]["event"]["call"] == reference.message["params"]["event"]["call"]


def test_copilot_post_tool_use_with_object_tool_args() -> None:
    """issue 29: postToolUse of 1.0.x carries ``toolArgs`` as an object too."""
    tr = translate("copilot", COPILOT_102["postToolUse"], "postToolUse")
    ev = tr.message["params"]["event"]
    assert ev["tool"]["input"] == {"command": "ls", "description": "run it"}


def test_copilot_permission_request_deny_is_enforced_on_the_real_payload() -> None:
    """issue 29: the deny of a rule that reads the command reaches Copilot's permission hook."""
    tr = translate("copilot", COPILOT_102["permissionRequest"], None)
    out = answer("copilot", tr, [{"type": "deny", "reason": R}])
    assert json.loads(out.stdout) == {"behavior": "deny", "message": R}


# ------------------------------------------------------------------------------ Copilot ask
def test_copilot_ask_carries_a_reason() -> None:
    """issue 29: Copilot reads ``permissionDecisionReason`` for ``ask`` as well as for ``deny``
    and shows "No reason provided" without it (1.0.102, also to the model in ``-p`` mode:
    "Denied by preToolUse hook (unable to ask user for confirmation): No reason provided")."""
    tr = translate("copilot", COPILOT_102["preToolUse"], "preToolUse")
    doc = json.loads(answer("copilot", tr, [{"type": "ask"}]).stdout)
    assert doc["permissionDecision"] == "ask"
    assert doc["permissionDecisionReason"] == ahp.ASK_REASON
    assert doc["hookSpecificOutput"]["permissionDecisionReason"] == ahp.ASK_REASON
