"""What each native adapter answers when the gateway fails closed: the harness's own denial with the synthetic reason."""

from __future__ import annotations

from typing import Any

from gateway.native import ahp

SYNTHETIC = ahp.synthetic_denial("x").reason


def hso(event: str, **fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


FAIL_DENY: dict[str, tuple[str, int, Any]] = {
    "claude-code": (
        "PreToolUse/Bash",
        0,
        hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=SYNTHETIC),
    ),
    "codex": ("PreToolUse/Bash", 0, hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=SYNTHETIC)),
    "gemini": ("BeforeTool/shell", 0, {"decision": "deny", "reason": SYNTHETIC}),
    "copilot": (
        "preToolUse/bash",
        0,
        {
            "permissionDecision": "deny",
            "permissionDecisionReason": SYNTHETIC,
            **hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=SYNTHETIC),
        },
    ),
    "cursor": (
        "preToolUse/Shell",
        0,
        {
            "permission": "deny",
            "decision": "deny",
            "reason": SYNTHETIC,
            "user_message": SYNTHETIC,
            "agent_message": SYNTHETIC,
        },
    ),
    "windsurf": ("pre_run_command", 2, None),
}
