"""Settled AHP result → the exact native answer (exit code, stdout, stderr), per harness; the
gateway failing (down, slow, malformed answer) → the adapter's own decision; Codex outputs
against Codex's published hook output schemas."""

from __future__ import annotations

import copy
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest

from gateway.native import ahp, client, flow
from gateway.native.model import NativeAnswer, Translation
from tests.support.native_answers import FAIL_DENY, SYNTHETIC, hso
from tests.support.native_payloads import ALL, event_of
from tests.support.paths import ROOT

CODEX_SCHEMAS = ROOT / "tests" / "data" / "codex"
R = "Force-pushing to main is not allowed."
DENY = {"type": "deny", "reason": R}
ASK = {"type": "ask"}
ALLOW = {"type": "allow"}
NEW_INPUT = {"command": "git push --dry-run origin main"}
MODIFY = {"type": "modify", "target": "input", "operation": "replace", "value": NEW_INPUT}
MERGE = {"type": "modify", "target": "input", "operation": "merge", "value": {"description": "dry run"}}
MESSAGE = {"type": "message", "text": "The gateway rewrote the command."}
STOP = {"type": "flow", "operation": "stop", "reason": "Session halted by policy."}
CONTINUE = {"type": "flow", "operation": "continue", "instruction": "Run the tests first."}


def ctx(text: str) -> dict[str, Any]:
    return {
        "type": "inject",
        "target": "context",
        "operation": "append",
        "deliverAt": "now",
        "value": [ahp.text_message("m1", "system", text)],
    }


def out_msg(text: str) -> dict[str, Any]:
    return {
        "type": "modify",
        "target": "output",
        "operation": "replace",
        "value": [ahp.text_message("o1", "tool", text)],
    }


INJECT = ctx("Force pushes are rejected by policy.")


def prepared(harness: str, key: str) -> Translation:
    tr = flow.codec_for(harness).translate(copy.deepcopy(ALL[harness][key]), event_of(harness, key))
    assert tr is not None
    return tr


def reply(tr: Translation, effects: list[dict[str, Any]]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": tr.message["id"], "result": {"protocolVersion": "draft", "effects": effects}}
    ).encode()


def run(harness: str, key: str, effects: list[dict[str, Any]], on_error: str = "deny") -> NativeAnswer:
    tr = prepared(harness, key)
    return flow.conclude(flow.codec_for(harness), tr, 200, reply(tr, effects), on_error)


def j(answer: NativeAnswer) -> Any:
    return json.loads(answer.stdout) if answer.stdout else None


# (harness, payload key, effects, exit code, stdout JSON or None, stderr)
OUTCOMES: list[tuple[str, str, list[dict[str, Any]], int, Any, str]] = [
    # ---- Claude Code
    ("claude-code", "PreToolUse/Bash", [], 0, None, ""),
    (
        "claude-code",
        "PreToolUse/Bash",
        [DENY],
        0,
        hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=R),
        "",
    ),
    ("claude-code", "PreToolUse/Bash", [ASK], 0, hso("PreToolUse", permissionDecision="ask"), ""),
    ("claude-code", "PreToolUse/Bash", [ALLOW], 0, hso("PreToolUse", permissionDecision="allow"), ""),
    (
        "claude-code",
        "PreToolUse/Bash",
        [MODIFY],
        0,
        hso("PreToolUse", permissionDecision="ask", updatedInput=NEW_INPUT),
        "",
    ),
    (
        "claude-code",
        "PreToolUse/Bash",
        [ALLOW, MODIFY],
        0,
        hso("PreToolUse", permissionDecision="allow", updatedInput=NEW_INPUT),
        "",
    ),
    (
        "claude-code",
        "PreToolUse/Bash",
        [MERGE],
        0,
        hso(
            "PreToolUse",
            permissionDecision="ask",
            updatedInput={**ALL["claude-code"]["PreToolUse/Bash"]["tool_input"], "description": "dry run"},
        ),
        "",
    ),
    (
        "claude-code",
        "PreToolUse/Bash",
        [INJECT],
        0,
        hso("PreToolUse", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    ("claude-code", "PreToolUse/Bash", [MESSAGE], 0, {"systemMessage": "The gateway rewrote the command."}, ""),
    (
        "claude-code",
        "PreToolUse/Bash",
        [STOP],
        0,
        {
            **hso("PreToolUse", permissionDecision="deny", permissionDecisionReason="Session halted by policy."),
            "continue": False,
            "stopReason": "Session halted by policy.",
        },
        "",
    ),
    (
        "claude-code",
        "PreToolUse/Bash",
        [ASK, MODIFY, MESSAGE, INJECT],
        0,
        {
            "systemMessage": "The gateway rewrote the command.",
            **hso(
                "PreToolUse",
                permissionDecision="ask",
                updatedInput=NEW_INPUT,
                additionalContext="Force pushes are rejected by policy.",
            ),
        },
        "",
    ),
    (
        "claude-code",
        "PermissionRequest/Bash",
        [DENY],
        0,
        hso("PermissionRequest", decision={"behavior": "deny", "message": R}),
        "",
    ),
    (
        "claude-code",
        "PermissionRequest/Bash",
        [ALLOW, MODIFY],
        0,
        hso("PermissionRequest", decision={"behavior": "allow", "updatedInput": NEW_INPUT}),
        "",
    ),
    (
        "claude-code",
        "PermissionRequest/Bash",
        [STOP],
        0,
        hso(
            "PermissionRequest",
            decision={"behavior": "deny", "message": "Session halted by policy.", "interrupt": True},
        ),
        "",
    ),
    (
        "claude-code",
        "PostToolUse/Bash",
        [INJECT, MESSAGE],
        0,
        {
            **hso("PostToolUse", additionalContext="Force pushes are rejected by policy."),
            "systemMessage": "The gateway rewrote the command.",
        },
        "",
    ),
    ("claude-code", "PostToolUse/Bash", [STOP], 0, {"continue": False, "stopReason": "Session halted by policy."}, ""),
    ("claude-code", "UserPromptSubmit", [DENY], 0, {"decision": "block", "reason": R}, ""),
    (
        "claude-code",
        "PostToolBatch",
        [INJECT],
        0,
        hso("PostToolBatch", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    (
        "claude-code",
        "PostToolBatch",
        [STOP],
        0,
        {
            "decision": "block",
            "reason": "Session halted by policy.",
            "continue": False,
            "stopReason": "Session halted by policy.",
        },
        "",
    ),
    (
        "claude-code",
        "SessionStart",
        [INJECT],
        0,
        hso("SessionStart", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    ("claude-code", "Stop", [CONTINUE], 0, {"decision": "block", "reason": "Run the tests first."}, ""),
    (
        "claude-code",
        "Stop",
        [{"type": "flow", "operation": "continue"}],
        0,
        {"decision": "block", "reason": "Continue."},
        "",
    ),
    ("claude-code", "PreCompact", [DENY], 0, {"decision": "block", "reason": R}, ""),
    # ---- Codex (strict)
    ("codex", "PreToolUse/Bash", [], 0, None, ""),
    (
        "codex",
        "PreToolUse/Bash",
        [DENY],
        0,
        hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=R),
        "",
    ),
    (
        "codex",
        "PreToolUse/Bash",
        [MODIFY],
        0,
        hso("PreToolUse", permissionDecision="allow", updatedInput=NEW_INPUT),
        "",
    ),
    (
        "codex",
        "PreToolUse/Bash",
        [DENY, MODIFY, MESSAGE],
        0,
        {
            **hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=R),
            "systemMessage": "The gateway rewrote the command.",
        },
        "",
    ),
    (
        "codex",
        "PreToolUse/Bash",
        [INJECT],
        0,
        hso("PreToolUse", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    ("codex", "PermissionRequest/Bash", [ALLOW], 0, hso("PermissionRequest", decision={"behavior": "allow"}), ""),
    (
        "codex",
        "PermissionRequest/Bash",
        [DENY],
        0,
        hso("PermissionRequest", decision={"behavior": "deny", "message": R}),
        "",
    ),
    (
        "codex",
        "PostToolUse/Bash",
        [STOP, INJECT],
        0,
        {
            **hso("PostToolUse", additionalContext="Force pushes are rejected by policy."),
            "continue": False,
            "stopReason": "Session halted by policy.",
        },
        "",
    ),
    (
        "codex",
        "UserPromptSubmit",
        [DENY, MESSAGE],
        0,
        {"decision": "block", "reason": R, "systemMessage": "The gateway rewrote the command."},
        "",
    ),
    (
        "codex",
        "SessionStart",
        [INJECT],
        0,
        hso("SessionStart", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    # ---- Gemini CLI
    ("gemini", "BeforeTool/shell", [], 0, None, ""),
    ("gemini", "BeforeTool/shell", [DENY], 0, {"decision": "deny", "reason": R}, ""),
    (
        "gemini",
        "BeforeTool/shell",
        [ASK, MESSAGE],
        0,
        {"decision": "ask", "systemMessage": "The gateway rewrote the command."},
        "",
    ),
    ("gemini", "BeforeTool/shell", [MODIFY], 0, hso("BeforeTool", tool_input=NEW_INPUT), ""),
    (
        "gemini",
        "BeforeTool/shell",
        [STOP],
        0,
        {
            "decision": "deny",
            "reason": "Session halted by policy.",
            "continue": False,
            "stopReason": "Session halted by policy.",
        },
        "",
    ),
    (
        "gemini",
        "AfterTool/shell",
        [INJECT],
        0,
        hso("AfterTool", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    ("gemini", "AfterTool/shell", [out_msg("[redacted]")], 0, {"decision": "deny", "reason": "[redacted]"}, ""),
    ("gemini", "BeforeAgent", [DENY], 0, {"decision": "deny", "reason": R}, ""),
    ("gemini", "AfterAgent", [CONTINUE], 0, {"decision": "deny", "reason": "Run the tests first."}, ""),
    ("gemini", "AfterAgent", [STOP], 0, {"continue": False, "stopReason": "Session halted by policy."}, ""),
    (
        "gemini",
        "SessionStart",
        [INJECT],
        0,
        hso("SessionStart", additionalContext="Force pushes are rejected by policy."),
        "",
    ),
    # ---- Copilot CLI (top-level fields + the VS Code nested copy)
    ("copilot", "preToolUse/bash", [], 0, None, ""),
    (
        "copilot",
        "preToolUse/bash",
        [DENY],
        0,
        {
            "permissionDecision": "deny",
            "permissionDecisionReason": R,
            **hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=R),
        },
        "",
    ),
    (
        "copilot",
        "preToolUse/bash",
        [ASK],
        0,
        {
            "permissionDecision": "ask",
            "permissionDecisionReason": ahp.ASK_REASON,
            **hso("PreToolUse", permissionDecision="ask", permissionDecisionReason=ahp.ASK_REASON),
        },
        "",
    ),
    (
        "copilot",
        "preToolUse/bash",
        [MODIFY],
        0,
        {"modifiedArgs": NEW_INPUT, **hso("PreToolUse", updatedInput=NEW_INPUT)},
        "",
    ),
    ("copilot", "permissionRequest/bash", [ALLOW], 0, {"behavior": "allow"}, ""),
    ("copilot", "permissionRequest/bash", [DENY], 0, {"behavior": "deny", "message": R}, ""),
    (
        "copilot",
        "permissionRequest/bash",
        [STOP],
        0,
        {"behavior": "deny", "message": "Session halted by policy.", "interrupt": True},
        "",
    ),
    (
        "copilot",
        "postToolUse/bash",
        [out_msg("[redacted]"), INJECT],
        0,
        {
            "modifiedResult": {"resultType": "success", "textResultForLlm": "[redacted]"},
            "additionalContext": "Force pushes are rejected by policy.",
            **hso("PostToolUse", additionalContext="Force pushes are rejected by policy."),
        },
        "",
    ),
    ("copilot", "agentStop", [CONTINUE], 0, {"decision": "block", "reason": "Run the tests first."}, ""),
    # ---- Cursor (flat snake_case; explicit allow on the no-effect path of before-hooks)
    ("cursor", "preToolUse/Shell", [], 0, {"permission": "allow"}, ""),
    (
        "cursor",
        "preToolUse/Shell",
        [DENY],
        0,
        {"permission": "deny", "decision": "deny", "reason": R, "user_message": R, "agent_message": R},
        "",
    ),
    ("cursor", "preToolUse/Shell", [MODIFY], 0, {"permission": "allow", "updated_input": NEW_INPUT}, ""),
    ("cursor", "beforeShellExecution", [], 0, {"permission": "allow"}, ""),
    ("cursor", "beforeShellExecution", [DENY], 0, {"permission": "deny", "user_message": R, "agent_message": R}, ""),
    ("cursor", "beforeMCPExecution", [DENY], 0, {"permission": "deny", "user_message": R, "agent_message": R}, ""),
    ("cursor", "beforeReadFile", [DENY], 0, {"permission": "deny", "user_message": R, "agent_message": R}, ""),
    ("cursor", "beforeSubmitPrompt", [], 0, {"continue": True}, ""),
    ("cursor", "beforeSubmitPrompt", [DENY], 0, {"continue": False, "user_message": R}, ""),
    ("cursor", "postToolUse/Shell", [], 0, None, ""),
    ("cursor", "postToolUse/Shell", [INJECT], 0, {"additional_context": "Force pushes are rejected by policy."}, ""),
    ("cursor", "stop", [CONTINUE], 0, {"followup_message": "Run the tests first."}, ""),
    ("cursor", "sessionStart", [INJECT], 0, {"additional_context": "Force pushes are rejected by policy."}, ""),
    # ---- Windsurf (exit codes only)
    ("windsurf", "pre_run_command", [], 0, None, ""),
    ("windsurf", "pre_run_command", [DENY], 2, None, R + "\n"),
    ("windsurf", "pre_mcp_tool_use", [DENY], 2, None, R + "\n"),
    ("windsurf", "pre_user_prompt", [DENY], 2, None, R + "\n"),
]


@pytest.mark.spec("AHP-DEC-001")
@pytest.mark.parametrize(("harness", "key", "effects", "code", "stdout", "stderr"), OUTCOMES)
def test_settled_outcome_becomes_the_exact_native_answer(
    harness: str, key: str, effects: list[dict[str, Any]], code: int, stdout: Any, stderr: str
) -> None:
    answer = run(harness, key, effects)
    assert (answer.exit_code, j(answer), answer.stderr) == (code, stdout, stderr)
    if stdout is None:
        assert answer.stdout == ""
    if harness == "codex":
        codex_valid(key.split("/")[0], answer)


# ------------------------------------------------------------------------------------- Codex
_SCHEMA_FILE = {
    "PreToolUse": "pre-tool-use",
    "PermissionRequest": "permission-request",
    "PostToolUse": "post-tool-use",
    "UserPromptSubmit": "user-prompt-submit",
    "SessionStart": "session-start",
    "Stop": "stop",
}


def codex_valid(event: str, answer: NativeAnswer) -> None:
    """Codex's published output schema plus the parser rules that make it fail open (§2.4)."""
    assert answer.exit_code in (0, 2)
    if answer.exit_code == 2:
        assert answer.stderr.strip(), "exit 2 with empty stderr fails open in Codex"
        return
    if not answer.stdout:
        return
    doc = json.loads(answer.stdout)
    schema = json.loads((CODEX_SCHEMAS / f"{_SCHEMA_FILE[event]}.command.output.schema.json").read_text())
    validator = jsonschema_rs.validator_for(schema)
    assert validator.is_valid(doc), [str(e) for e in validator.iter_errors(doc)]
    specific = doc.get("hookSpecificOutput") or {}
    assert specific.get("hookEventName", event) == event
    if event == "PreToolUse":
        assert specific.get("permissionDecision") in (None, "deny", "allow")  # never ask
        if specific.get("permissionDecision") == "allow":
            assert "updatedInput" in specific  # bare allow fails open
        if "updatedInput" in specific:
            assert specific.get("permissionDecision") == "allow"
        if specific.get("permissionDecision") == "deny":
            assert specific.get("permissionDecisionReason", "").strip()
        if "permissionDecisionReason" in specific:
            assert "permissionDecision" in specific
        assert "continue" not in doc and "stopReason" not in doc and "suppressOutput" not in doc
    if event == "PermissionRequest":
        decision = specific.get("decision") or {}
        assert set(decision) <= {"behavior", "message"}
    if doc.get("decision") == "block":
        assert str(doc.get("reason", "")).strip()


CODEX_CASES = [
    (k, e)
    for k in ALL["codex"]
    for e in (
        [],
        [DENY],
        [ALLOW],
        [ASK],
        [MODIFY],
        [INJECT],
        [MESSAGE],
        [STOP],
        [CONTINUE],
        [DENY, MODIFY, INJECT, MESSAGE],
        [ALLOW, MODIFY],
    )
]


@pytest.mark.parametrize(("key", "effects"), CODEX_CASES)
def test_no_codex_answer_ever_violates_its_output_schema(key: str, effects: list[dict[str, Any]]) -> None:
    """Whatever the gateway answers (advertised or not), the Codex answer parses: an unknown
    field or unsupported value would make Codex fail open."""
    answer = run("codex", key, effects)
    codex_valid(key.split("/")[0], answer)
    fail = flow.failure(flow.codec_for("codex"), prepared("codex", key), "deny", "gateway unreachable")
    codex_valid(key.split("/")[0], fail)


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize(
    ("harness", "key", "effect"),
    [
        ("codex", "PreToolUse/Bash", ASK),
        ("codex", "PreToolUse/Bash", ALLOW),
        ("codex", "PreToolUse/Bash", STOP),
        ("cursor", "preToolUse/Shell", ASK),
        ("cursor", "beforeShellExecution", MESSAGE),
        ("windsurf", "pre_run_command", MODIFY),
        ("gemini", "BeforeTool/shell", ALLOW),
        ("gemini", "BeforeTool/shell", INJECT),
        ("copilot", "preToolUse/bash", ALLOW),
        ("claude-code", "PostToolUse/Bash", out_msg("x")),
        ("claude-code", "SessionStart", DENY),
    ],
)
def test_an_unadvertised_effect_is_never_dropped_silently(harness: str, key: str, effect: dict[str, Any]) -> None:
    """A gateway answer with an effect this native event cannot enforce is an operational failure
    (the whole answer is rejected and --on-error decides), not a silent no-op."""
    answer = run(harness, key, [DENY, effect] if harness != "claude-code" or key != "SessionStart" else [effect])
    assert "unadvertised" in answer.stderr
    tr = prepared(harness, key)
    if tr.can_deny:
        assert answer != run(harness, key, [])
        assert R not in answer.stdout + answer.stderr  # nothing salvaged from the rejected answer


def test_claude_permission_request_modify_without_allow_is_a_failure_not_a_grant() -> None:
    answer = run("claude-code", "PermissionRequest/Bash", [MODIFY])
    assert j(answer) == hso("PermissionRequest", decision={"behavior": "deny", "message": SYNTHETIC})
    assert "only be expressed together with allow" in answer.stderr


# ------------------------------------------------------------------------------ gateway failures
MALFORMED: list[tuple[str, int, bytes]] = [
    ("not JSON", 200, b"<html>502</html>"),
    ("not a JSON-RPC 2.0 object", 200, b"[]"),
    ("id does not match", 200, b'{"jsonrpc":"2.0","id":"other","result":{"protocolVersion":"draft","effects":[]}}'),
    (
        "JSON-RPC error -32003",
        200,
        b'{"jsonrpc":"2.0","id":"ID","error":{"code":-32003,"message":"backend_unavailable"}}',
    ),
    (
        "protocol version draft",
        200,
        b'{"jsonrpc":"2.0","id":"ID","result":{"protocolVersion":"1900-01-01","effects":[]}}',
    ),
    ("no effect list", 200, b'{"jsonrpc":"2.0","id":"ID","result":{"protocolVersion":"draft"}}'),
    (
        "malformed deny",
        200,
        b'{"jsonrpc":"2.0","id":"ID","result":{"protocolVersion":"draft","effects":[{"type":"deny","reason":"x","path":"/"}]}}',
    ),
    (
        "deny without a reason",
        200,
        b'{"jsonrpc":"2.0","id":"ID","result":{"protocolVersion":"draft","effects":[{"type":"deny","reason":" "}]}}',
    ),
    (
        "unadvertised effect",
        200,
        b'{"jsonrpc":"2.0","id":"ID","result":{"protocolVersion":"draft","effects":[{"type":"unknown"}]}}',
    ),
    ("HTTP 500", 500, b"{}"),
    ("HTTP 302", 302, b""),
    ("HTTP 200 without a body", 200, b""),
]

FAIL_ALLOW = {
    "claude-code": None,
    "codex": None,
    "gemini": None,
    "copilot": None,
    "cursor": {"permission": "allow"},
    "windsurf": None,
}


@pytest.mark.spec("AHP-FAIL-001")
@pytest.mark.parametrize("harness", list(FAIL_DENY))
@pytest.mark.parametrize(("why", "status", "body"), MALFORMED)
def test_malformed_gateway_answer_is_decided_by_the_adapter(harness: str, why: str, status: int, body: bytes) -> None:
    key, code, stdout = FAIL_DENY[harness]
    tr = prepared(harness, key)
    body = body.replace(b'"ID"', json.dumps(tr.message["id"]).encode())
    codec = flow.codec_for(harness)
    denied = flow.conclude(codec, tr, status, body, "deny")
    assert (denied.exit_code, j(denied)) == (code, stdout)
    assert why in denied.stderr and denied.stderr.rstrip().endswith("denied (--on-error deny)")
    if harness == "windsurf":
        assert denied.stderr.startswith(SYNTHETIC)
    allowed = flow.conclude(codec, tr, status, body, "allow")
    assert (allowed.exit_code, j(allowed)) == (0, FAIL_ALLOW[harness])
    assert why in allowed.stderr and "proceeding (--on-error allow)" in allowed.stderr


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A listener that accepts and never answers (a hung gateway)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                conns.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield sock.getsockname()[1]
    stop.set()
    thread.join()
    for conn in conns:
        conn.close()
    sock.close()


def _closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.mark.spec("AHP-FAIL-002")
def test_slow_gateway_hits_the_internal_deadline(silent_port: int) -> None:
    with pytest.raises(client.Unreachable, match="no answer from the gateway within 150 ms"):
        client.post(f"http://127.0.0.1:{silent_port}/", b"{}", deadline_s=0.15, token=None, front_end="codex")


def test_gateway_down_is_reported_without_details_of_the_token() -> None:
    with pytest.raises(client.Unreachable, match="gateway unreachable") as info:
        client.post(f"http://127.0.0.1:{_closed_port()}/", b"{}", deadline_s=1, token="s3cr3t-token", front_end="codex")
    assert "s3cr3t" not in str(info.value)


@pytest.mark.parametrize(
    "url", ["ftp://h/", "http://", "localhost:8080", "http://h:99999/", "http://h:x/", "http://h/a b"]
)
def test_bad_gateway_urls_are_refused(url: str) -> None:
    with pytest.raises(client.Unreachable):
        client.split_url(url)


def test_url_forms() -> None:
    assert client.split_url("http://127.0.0.1:8080") == ("http", "127.0.0.1", 8080, "/")
    assert client.split_url("HTTPS://gw.example/ahp?x=1#f") == ("https", "gw.example", 443, "/ahp?x=1")
    assert client.split_url("http://[::1]:9/") == ("http", "::1", 9, "/")
    assert client.split_url("http://user@h:1/p") == ("http", "h", 1, "/p")


def test_events_that_cannot_deny_proceed_with_a_note_under_deny() -> None:
    tr = prepared("claude-code", "PostToolUse/Bash")
    answer = flow.failure(flow.codec_for("claude-code"), tr, "deny", "gateway unreachable")
    assert answer == NativeAnswer(
        0, "", "ahp-gateway hook: gateway unreachable; PostToolUse cannot be denied natively, so it proceeds\n"
    )
    obs = prepared("claude-code", "SessionEnd")
    assert flow.conclude(flow.codec_for("claude-code"), obs, 202, None, "deny") == NativeAnswer(0, "", "")
    assert flow.conclude(flow.codec_for("claude-code"), obs, 500, None, "deny").stderr.startswith(
        "ahp-gateway hook: the observation"
    )


def test_unusable_payload_blocks_by_exit_code_or_proceeds() -> None:
    codec = flow.codec_for("codex")
    denied = flow.prepare(codec, b"{oops", None, "deny").answer
    assert denied == NativeAnswer(
        2, "", "ahp-gateway hook: unusable native payload: native payload is not JSON; blocking (--on-error deny)\n"
    )
    allowed = flow.prepare(codec, b"{oops", None, "allow").answer
    assert allowed is not None and allowed.exit_code == 0 and allowed.stdout == ""


BYPASSES: list[tuple[str, dict[str, Any]]] = [
    ("Deny", {"type": "Deny", "reason": R}),
    ("deny reason not a string", {"type": "deny", "reason": 123}),
    ("extra key on a closed effect", {"type": "allow", "reason": "because"}),
    (
        "modify target spelled differently",
        {"type": "modify", "target": "Input", "operation": "replace", "value": NEW_INPUT},
    ),
    (
        "modify input as a JSON string",
        {"type": "modify", "target": "input", "operation": "replace", "value": json.dumps(NEW_INPUT)},
    ),
    ("inject at an unadvertised time", {**INJECT, "deliverAt": "next_turn"}),
    ("inject with replace", {**INJECT, "operation": "replace"}),
    ("stop without a reason", {"type": "flow", "operation": "stop"}),
    ("effect that is not an object", "deny"),  # type: ignore[list-item]
]


@pytest.mark.spec("AHP-CORE-003")
@pytest.mark.parametrize(("name", "effect"), BYPASSES, ids=[b[0] for b in BYPASSES])
def test_near_miss_effects_reject_the_whole_answer(name: str, effect: Any) -> None:
    """Alternate spellings, wrong types and extra keys never pass as the effect they resemble,
    and never let an accompanying valid effect through on its own."""
    answer = run("claude-code", "PreToolUse/Bash", [ALLOW, effect])
    assert j(answer) == hso("PreToolUse", permissionDecision="deny", permissionDecisionReason=SYNTHETIC)
    assert "unusable gateway answer" in answer.stderr
    assert run("claude-code", "PreToolUse/Bash", [ALLOW, effect], on_error="allow").stdout == ""


def test_a_continuation_beyond_the_allowance_is_refused() -> None:
    # Codex Stop with stop_hook_active: the one continuation per stop is used up.
    answer = run("codex", "Stop", [CONTINUE])
    assert "continuation allowance exhausted" in answer.stderr and "cannot be denied natively" in answer.stderr
    assert answer.stdout == ""
