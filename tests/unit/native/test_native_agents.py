"""What the real agents showed (issue 29): payloads and answers as the agents' own binaries send and
read them, captured from runs of the pinned versions (Copilot CLI 1.0.102, Gemini CLI 0.61.0)
against a fake model server on loopback. Each test here failed before its fix."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gateway.native import ahp, flow
from gateway.native.gemini import CAPS as GEMINI_CAPS
from gateway.native.model import NativeAnswer, Translation
from gateway.server.app import GatewayServer
from tests.support.native_gateway import default_gateway, hook

__all__ = ["default_gateway"]  # the module-scoped gateway fixture (tests/support/native_gateway.py)

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


def test_copilot_ask_carries_the_asking_rules_reason() -> None:
    """issue 29: the AHP ask has no text; the gateway's policies send the asking rule's reason as
    a ``message`` beside it (protocol §6.1: ``message`` is the user-facing effect), which Copilot's
    preToolUse now advertises and shows as the ask's reason."""
    tr = translate("copilot", COPILOT_102["preToolUse"], "preToolUse")
    assert "message" in tr.caps["effects"]  # type: ignore[index]
    why = "Recursive rm of a path outside the workspace roots."
    doc = json.loads(answer("copilot", tr, [{"type": "ask"}, {"type": "message", "text": why}]).stdout)
    assert doc["permissionDecision"] == "ask"
    assert doc["permissionDecisionReason"] == why == doc["hookSpecificOutput"]["permissionDecisionReason"]


WHY = "Why the rule asks."


@pytest.mark.parametrize(
    ("effects", "decision", "reason"),
    [
        (
            [{"type": "ask"}, {"type": "message", "text": WHY}, {"type": "message", "text": "More."}],
            "ask",
            WHY + "\n\nMore.",
        ),
        ([{"type": "deny", "reason": R}, {"type": "message", "text": WHY}], "deny", R + "\n\n" + WHY),
    ],
)
def test_copilot_shows_messages_with_its_decision(effects: list[dict[str, Any]], decision: str, reason: str) -> None:
    """issue 29: ``permissionDecisionReason`` is the one text Copilot shows with a decision: an
    ask gives the messages, a deny its reason and then the messages (top level and nested)."""
    tr = translate("copilot", COPILOT_102["preToolUse"], "preToolUse")
    out = answer("copilot", tr, effects)
    doc = json.loads(out.stdout)
    assert (doc["permissionDecision"], doc["permissionDecisionReason"], out.stderr) == (decision, reason, "")
    assert doc["hookSpecificOutput"] == {
        "hookEventName": "PreToolUse", "permissionDecision": decision, "permissionDecisionReason": reason
    }  # fmt: skip


def test_copilot_message_without_a_decision_goes_to_stderr() -> None:
    """No Copilot field shows a bare message: the hook's stderr says it, never nowhere."""
    tr = translate("copilot", COPILOT_102["preToolUse"], "preToolUse")
    out = answer("copilot", tr, [{"type": "message", "text": WHY}])
    assert (out.exit_code, out.stdout) == (0, "")
    assert out.stderr == f"ahp-gateway hook: message (no Copilot field shows it): {WHY}\n"


@pytest.mark.asyncio(loop_scope="module")
async def test_copilot_ask_from_the_bundled_policy_carries_the_rules_reason(default_gateway: GatewayServer) -> None:
    """issue 29, end to end through ``ahp-gateway hook copilot`` and the bundled policy library: a
    recursive delete outside the workspace asks with the rule's own reason."""
    payload = {**COPILOT_102["preToolUse"], "toolArgs": {"command": "rm -rf /opt/build"}}
    code, out, err = await hook("copilot", "--event", "preToolUse", "--url", default_gateway.url,
                                stdin=json.dumps(payload).encode())  # fmt: skip
    doc = json.loads(out)
    assert (code, err, doc["permissionDecision"]) == (0, "", "ask")
    assert doc["permissionDecisionReason"].startswith("Recursive deletes outside the workspace")


# ------------------------------------------------------------------------- Gemini headless ask
# A recursive delete outside the workspace: the bundled policy asks, with a deny as its fallback.
GEMINI_RM = {
    "session_id": "8c2d4e6f-1a3b-4c5d-9e7f-0a1b2c3d4e5f",
    "transcript_path": "",
    "cwd": "/home/ana/payments",
    "hook_event_name": "BeforeTool",
    "timestamp": "2026-12-02T15:00:00.000Z",
    "tool_name": "run_shell_command",
    "tool_input": {"command": "rm -rf /opt/build"},
}


def test_non_interactive_does_not_advertise_ask() -> None:
    """issue 29: with ``--non-interactive`` the request does not advertise ask (so the gateway
    applies the rule's fallback); the codec's shared advertisement is left as it was."""
    raw = json.dumps(GEMINI_RM).encode()
    prepared = flow.prepare(flow.codec_for("gemini"), raw, None, "deny", ask=False)
    assert prepared.tr is not None and prepared.body is not None
    caps = json.loads(prepared.body)["params"]["capabilities"]
    assert "ask" not in caps["effects"] and "deny" in caps["effects"]
    assert "ask" in GEMINI_CAPS["BeforeTool"]["effects"]  # type: ignore[index]
    interactive = flow.prepare(flow.codec_for("gemini"), raw, None, "deny")
    assert interactive.body is not None and "ask" in json.loads(interactive.body)["params"]["capabilities"]["effects"]


def test_an_ask_answered_to_a_non_interactive_request_is_an_unusable_answer() -> None:
    """issue 29: a gateway that answers ask anyway does not leave headless Gemini waiting: the
    answer is outside the advertisement and decided by --on-error (deny)."""
    prepared = flow.prepare(flow.codec_for("gemini"), json.dumps(GEMINI_RM).encode(), None, "deny", ask=False)
    assert prepared.tr is not None
    out = answer("gemini", prepared.tr, [{"type": "ask"}])
    assert json.loads(out.stdout)["decision"] == "deny" and "unusable gateway answer" in out.stderr


@pytest.mark.asyncio(loop_scope="module")
async def test_headless_gemini_gets_the_rules_deny_instead_of_ask(default_gateway: GatewayServer) -> None:
    """issue 29: a BeforeTool ``ask`` makes ``gemini -p`` wait forever for a confirmation (Gemini
    CLI 0.61.0 turns a hook's ask into ask_user whatever the mode, and neither the payload nor the
    hook's environment says the run is headless). ``hook gemini --non-interactive`` gets the
    asking rule's fallback deny, with its reason, from the real policy library."""
    stdin = json.dumps(GEMINI_RM).encode()
    code, out, err = await hook("gemini", "--url", default_gateway.url, stdin=stdin)
    doc = json.loads(out)
    assert (code, doc["decision"], err) == (0, "ask", "")
    assert doc["systemMessage"].startswith("Recursive deletes outside the workspace")  # why it asks
    code, out, err = await hook("gemini", "--url", default_gateway.url, "--non-interactive", stdin=stdin)
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["decision"] == "deny"
    assert "Recursive deletes outside the workspace" in doc["reason"]
