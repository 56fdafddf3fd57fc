"""``ahp-gateway hook config <harness>``: the exact settings snippet for one harness, and what the
harness does when the hook itself crashes or times out (native-hooks §7.3).

Every command hook passes ``--event`` so the adapter never guesses the event, and a native
timeout of 10 s sits well above the adapter's own default deadline (3 s), so the adapter (not the
harness) decides when the gateway is slow.
"""

from __future__ import annotations

import json
import shlex
from urllib.parse import urlsplit, urlunsplit

NATIVE_TIMEOUT_S = 10

# (native events to register, events whose entries should fail closed where the harness can)
EVENTS = {
    "claude-code": (
        ("PreToolUse", "PermissionRequest", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop"),
        ("PreToolUse", "PermissionRequest", "UserPromptSubmit"),
    ),
    "codex": (("PreToolUse", "PermissionRequest", "PostToolUse", "UserPromptSubmit", "SessionStart", "Stop"), ()),
    "gemini": (("BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent", "SessionStart"), ()),
    "copilot": (("preToolUse", "permissionRequest", "postToolUse", "sessionStart", "agentStop"), ()),
    "cursor": (
        ("preToolUse", "beforeSubmitPrompt", "postToolUse", "sessionStart", "stop"),
        ("preToolUse", "beforeSubmitPrompt"),
    ),
    "windsurf": (("pre_run_command", "pre_write_code", "pre_read_code", "pre_mcp_tool_use", "pre_user_prompt"), ()),
}

FAILURE = {
    "claude-code": [
        "gateway down, slow or answering badly: the adapter denies by itself (--on-error deny) on PreToolUse, "
        "PermissionRequest and UserPromptSubmit; other events proceed.",
        "adapter crash or native timeout: FAIL-CLOSED on the entries with onFailure: block (Claude Code 2.1.295 "
        "or later); FAIL-OPEN on older versions and on the other events.",
        "native HTTP hook: the gateway itself answers a deny when its policy backends fail closed; connection "
        "failure or timeout is FAIL-CLOSED only with onFailure: block, otherwise FAIL-OPEN.",
    ],
    "codex": [
        "gateway down, slow or answering badly: the adapter denies by itself (--on-error deny) on PreToolUse, "
        "PermissionRequest and UserPromptSubmit.",
        "adapter crash or native timeout: always FAIL-OPEN (Codex has no fail-closed switch). Codex runs "
        "non-managed hooks only after you trust them with /hooks; an untrusted hook does not run at all.",
    ],
    "gemini": [
        "gateway down, slow or answering badly: the adapter denies by itself (--on-error deny) on BeforeTool "
        "and BeforeAgent.",
        "adapter crash, spawn error or native timeout: FAIL-OPEN (no fail-closed switch).",
    ],
    "copilot": [
        "gateway down, slow or answering badly: the adapter denies by itself (--on-error deny) on preToolUse "
        "and permissionRequest.",
        "adapter crash or non-zero exit on preToolUse: FAIL-CLOSED (the call is denied); native timeout: "
        "FAIL-OPEN, also for policy hooks; HTTP hooks: FAIL-OPEN.",
    ],
    "cursor": [
        "gateway down, slow or answering badly: the adapter denies by itself (--on-error deny) on preToolUse "
        "and beforeSubmitPrompt.",
        "adapter crash or native timeout: FAIL-CLOSED on the entries with failClosed: true; FAIL-OPEN on the others.",
    ],
    "windsurf": [
        "gateway down, slow or answering badly: the adapter blocks by itself (exit 2, --on-error deny) on "
        "every pre_* hook.",
        "adapter crash or hang: FAIL-OPEN (Windsurf documents no timeout or fail-closed setting).",
    ],
}


def native_url(url: str, harness: str) -> str:
    """The gateway's ``/native/<harness>`` endpoint on the same listener as ``url``."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/native/{harness}", "", ""))


def _command(harness: str, event: str, url: str, token_file: str | None) -> str:
    argv = ["ahp-gateway", "hook", harness, "--event", event, "--url", url]
    if token_file:
        argv += ["--token-file", token_file]
    return shlex.join(argv)


def snippet(harness: str, url: str, token_file: str | None) -> str:
    events, closed = EVENTS[harness]
    cmd = {event: _command(harness, event, url, token_file) for event in events}
    blocks: list[tuple[str, str]] = []
    if harness in ("claude-code", "codex"):
        doc = {"hooks": {}}  # type: dict[str, dict[str, list[object]]]
        for event in events:
            handler: dict[str, object] = {"type": "command", "command": cmd[event], "timeout": NATIVE_TIMEOUT_S}
            if event in closed:
                handler["onFailure"] = "block"
            # Codex matchers are regular expressions; ".*" also means "every tool" to Claude Code.
            matcher = "*" if harness == "claude-code" else ".*"
            doc["hooks"][event] = (
                [{"matcher": matcher, "hooks": [handler]}]
                if event.endswith(("ToolUse", "Request"))
                else [{"hooks": [handler]}]
            )
        where = (
            ".claude/settings.json (or ~/.claude/settings.json)"
            if harness == "claude-code"
            else "~/.codex/hooks.json (or <repo>/.codex/hooks.json)"
        )
        blocks.append((where, json.dumps(doc, indent=2)))
        if harness == "claude-code":
            http_handler: dict[str, object] = {
                "type": "http",
                "url": native_url(url, harness),
                "timeout": NATIVE_TIMEOUT_S,
                "onFailure": "block",
            }
            if token_file:
                http_handler["headers"] = {"Authorization": "Bearer $AHP_GATEWAY_TOKEN"}
                http_handler["allowedEnvVars"] = ["AHP_GATEWAY_TOKEN"]
            http_doc = {
                "hooks": {
                    "PreToolUse": [{"matcher": "*", "hooks": [http_handler]}],
                    "PermissionRequest": [{"matcher": "*", "hooks": [http_handler]}],
                }
            }
            blocks.append(
                (
                    "alternative without a process per call: native HTTP hook, same file (the gateway translates)",
                    json.dumps(http_doc, indent=2),
                )
            )
    elif harness == "gemini":
        doc = {
            "hooks": {
                event: [
                    {
                        "matcher": ".*" if event.endswith("Tool") else "*",
                        "hooks": [
                            {
                                "name": "ahp-gateway",
                                "type": "command",
                                "command": cmd[event],
                                "timeout": NATIVE_TIMEOUT_S * 1000,
                            }
                        ],
                    }
                ]
                for event in events
            }
        }
        blocks.append((".gemini/settings.json (or ~/.gemini/settings.json)", json.dumps(doc, indent=2)))
    elif harness == "copilot":
        doc2: dict[str, object] = {
            "version": 1,
            "hooks": {
                event: [{"type": "command", "bash": cmd[event], "timeoutSec": NATIVE_TIMEOUT_S}] for event in events
            },
        }
        blocks.append(
            (".github/hooks/ahp-gateway.json (or ~/.copilot/hooks/ahp-gateway.json)", json.dumps(doc2, indent=2))
        )
        http_doc2 = {
            "version": 1,
            "hooks": {
                "preToolUse": [
                    {
                        "type": "http",
                        "url": native_url(url, harness) + "?event=preToolUse",
                        "timeoutSec": NATIVE_TIMEOUT_S,
                    }
                ]
            },
        }
        blocks.append(
            (
                "alternative: native HTTP hook (https only; plain http://localhost needs COPILOT_HOOK_ALLOW_LOCALHOST=1)",
                json.dumps(http_doc2, indent=2),
            )
        )
    elif harness == "cursor":
        entries: dict[str, list[dict[str, object]]] = {}
        for event in events:
            entry: dict[str, object] = {"command": cmd[event], "timeout": NATIVE_TIMEOUT_S}
            if event in closed:
                entry["failClosed"] = True
            if event == "stop":
                entry["loop_limit"] = 3
            entries[event] = [entry]
        blocks.append(
            (".cursor/hooks.json (or ~/.cursor/hooks.json)", json.dumps({"version": 1, "hooks": entries}, indent=2))
        )
    else:
        doc3 = {"hooks": {event: [{"command": cmd[event], "show_output": True}] for event in events}}
        blocks.append((".windsurf/hooks.json (or ~/.codeium/windsurf/hooks.json)", json.dumps(doc3, indent=2)))
    lines: list[str] = []
    for where, body in blocks:
        lines.append(f"# {where}")
        lines.append(body)
        lines.append("")
    lines.append("# failure behaviour")
    lines.extend(f"#   {line}" for line in FAILURE[harness])
    return "\n".join(lines) + "\n"
