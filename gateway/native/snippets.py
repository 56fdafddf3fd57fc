"""``ahp-gateway hook config <harness>``: the exact settings for one harness, as one JSON document
that can be merged into the agent's settings file, and (as ``#`` comments, which the command
prints to stderr) where that file is and what the harness does when the hook itself crashes or
times out (native-hooks §7.3).

Every command hook names the ``ahp-gateway`` that printed it by its absolute path (the agent's
PATH rarely holds a virtual environment's ``bin``, and with ``onFailure: block`` a hook that
cannot start blocks every call) and passes ``--event`` so the adapter never guesses the event.
A native timeout of 10 s sits well above the adapter's own default deadline (3 s), so the
adapter (not the harness) decides when the gateway is slow.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

from gateway.native import HTTP_HARNESSES

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
        "adapter crash or non-zero exit: FAIL-CLOSED (Copilot denies the call) on preToolUse and "
        "permissionRequest; native timeout: FAIL-OPEN, also for policy hooks.",
        "native HTTP hook, Copilot CLI 1.0.102: connection refused or a non-2xx answer FAIL-CLOSED (Copilot "
        "denies the call), timeout FAIL-OPEN; GitHub's hooks reference documents FAIL-OPEN for all three, so "
        "check the version you run.",
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


class Snippet(NamedTuple):
    """The settings document (stdout) and the comments on it (stderr)."""

    document: str
    comments: str


def _command(exe: Sequence[str], harness: str, event: str, url: str, token_file: str | None, interactive: bool) -> str:
    argv = [*exe, "hook", harness, "--event", event, "--url", url]
    if token_file:
        argv += ["--token-file", token_file]
    if not interactive:
        argv.append("--non-interactive")
    return shlex.join(argv)


def _claude_http(url: str, harness: str, token_file: str | None) -> dict[str, object]:
    handler: dict[str, object] = {
        "type": "http",
        "url": native_url(url, harness),
        "timeout": NATIVE_TIMEOUT_S,
        "onFailure": "block",
    }
    if token_file:
        handler["headers"] = {"Authorization": "Bearer $AHP_GATEWAY_TOKEN"}
        handler["allowedEnvVars"] = ["AHP_GATEWAY_TOKEN"]
    return {
        "hooks": {
            "PreToolUse": [{"matcher": "*", "hooks": [handler]}],
            "PermissionRequest": [{"matcher": "*", "hooks": [handler]}],
        }
    }


def _copilot_http(url: str, harness: str) -> dict[str, object]:
    return {
        "version": 1,
        "hooks": {
            event: [
                {"type": "http", "url": native_url(url, harness) + f"?event={event}", "timeoutSec": NATIVE_TIMEOUT_S}
            ]
            for event in ("preToolUse", "permissionRequest")
        },
    }


WHERE = {
    "claude-code": ".claude/settings.json (or ~/.claude/settings.json)",
    "codex": "~/.codex/hooks.json (or <repo>/.codex/hooks.json)",
    "gemini": ".gemini/settings.json (or ~/.gemini/settings.json)",
    "copilot": ".github/hooks/ahp-gateway.json (or ~/.copilot/hooks/ahp-gateway.json)",
    "cursor": ".cursor/hooks.json (or ~/.cursor/hooks.json)",
    "windsurf": ".windsurf/hooks.json (or ~/.codeium/windsurf/hooks.json)",
}
HTTP_NOTE = {
    "claude-code": "the native HTTP hook: no process per call; the gateway translates",
    "copilot": "the native HTTP hook: https only; plain http://localhost needs COPILOT_HOOK_ALLOW_LOCALHOST=1",
}

ASK_NOTE = {
    "gemini": "headless runs (gemini -p): add --non-interactive; on an ask Gemini waits for an answer nobody "
    "can give (or, stdin at EOF, exits 0 with no output), and with it the asking rule's fallback (its deny) "
    "applies instead",
}


def document(
    harness: str,
    url: str,
    token_file: str | None,
    *,
    exe: Sequence[str] = ("ahp-gateway",),
    interactive: bool = True,
    http: bool = False,
) -> dict[str, object]:
    """The settings document for one harness: its command hooks, or with ``http`` its native HTTP
    hook (Claude Code, Copilot CLI)."""
    if http:
        if harness not in HTTP_HARNESSES:
            raise ValueError(f"{harness} has no native HTTP hook")
        return _claude_http(url, harness, token_file) if harness == "claude-code" else _copilot_http(url, harness)
    events, closed = EVENTS[harness]
    cmd = {event: _command(exe, harness, event, url, token_file, interactive) for event in events}
    if harness in ("claude-code", "codex"):
        hooks: dict[str, list[object]] = {}
        for event in events:
            handler: dict[str, object] = {"type": "command", "command": cmd[event], "timeout": NATIVE_TIMEOUT_S}
            if event in closed:
                handler["onFailure"] = "block"
            # Codex matchers are regular expressions; ".*" also means "every tool" to Claude Code.
            matcher = "*" if harness == "claude-code" else ".*"
            hooks[event] = (
                [{"matcher": matcher, "hooks": [handler]}]
                if event.endswith(("ToolUse", "Request"))
                else [{"hooks": [handler]}]
            )
        return {"hooks": hooks}
    if harness == "gemini":
        return {
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
    if harness == "copilot":
        return {
            "version": 1,
            "hooks": {
                event: [{"type": "command", "bash": cmd[event], "timeoutSec": NATIVE_TIMEOUT_S}] for event in events
            },
        }
    if harness == "cursor":
        entries: dict[str, list[dict[str, object]]] = {}
        for event in events:
            entry: dict[str, object] = {"command": cmd[event], "timeout": NATIVE_TIMEOUT_S}
            if event in closed:
                entry["failClosed"] = True
            if event == "stop":
                entry["loop_limit"] = 3
            entries[event] = [entry]
        return {"version": 1, "hooks": entries}
    return {"hooks": {event: [{"command": cmd[event], "show_output": True}] for event in events}}


def snippet(
    harness: str,
    url: str,
    token_file: str | None,
    *,
    exe: Sequence[str] = ("ahp-gateway",),
    interactive: bool = True,
    http: bool = False,
) -> Snippet:
    doc = document(harness, url, token_file, exe=exe, interactive=interactive, http=http)
    lines = [f"# merge into {WHERE[harness]}"]
    if http:
        lines.append(f"# {HTTP_NOTE[harness]}")
    elif harness in HTTP_HARNESSES:
        lines.append(f"# alternative: --http prints {HTTP_NOTE[harness]}")
    if harness in ASK_NOTE and interactive and not http:
        lines.append(f"# {ASK_NOTE[harness]}")
    lines.append("# failure behaviour")
    # with --http no adapter runs: only the HTTP hook's own behaviour applies
    lines.extend(f"#   {line}" for line in FAILURE[harness] if not http or "HTTP hook" in line)
    return Snippet(json.dumps(doc, indent=2) + "\n", "\n".join(lines) + "\n")
