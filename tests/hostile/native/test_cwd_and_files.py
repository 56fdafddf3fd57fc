"""Evasion through the native hook formats: a cwd pointing elsewhere, file tools per harness, other pre-tool events."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.hostile.native.helpers import (
    CHANNEL_IDS,
    CHANNELS,
    FORCE_PUSH,
    REASONS,
    RM_ROOT,
    Send,
    allowed,
    asked,
    call,
    policy_denial,
    pre_tool,
    shell,
)
from tests.support.native_payloads import ALL

pytestmark = pytest.mark.asyncio(loop_scope="module")


# ------------------------------------------------------------------------- cwd pointing elsewhere
# The tool-input fields that name the directory a shell call runs in, per harness.
CWD_FIELDS: dict[str, tuple[str, ...]] = {
    "claude-code": (),
    "copilot": (),
    "gemini": (),
    "codex": ("workdir",),
    "cursor": ("working_directory", "cwd"),
    "windsurf": ("cwd",),
}


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize(("channel", "harness"), CHANNELS, ids=CHANNEL_IDS)
async def test_relative_delete_in_a_cwd_that_points_at_root_is_denied(send: Send, channel: str, harness: str) -> None:
    """docs/policies/index.md ("Policy facts") (`facts.cwd`: the tool's or the session's cwd): `rm -rf *` is judged
    in the directory it runs in, whether the harness reports it as the payload's `cwd` or the tool
    input names it (Codex `workdir`, Cursor `working_directory`/`cwd`, Windsurf `tool_info.cwd`)."""
    payload, event = shell(harness, "rm -rf *")
    if harness == "windsurf":
        payload["tool_info"]["cwd"] = "/"
    else:
        payload["cwd"] = "/"
    policy_denial(channel, harness, event, await call(send, channel, harness, payload, event), REASONS[RM_ROOT])
    for field in CWD_FIELDS[harness]:
        payload, event = pre_tool(harness, {"command": "rm -rf ./*", field: "/usr"})
        a = await call(send, channel, harness, payload, event)
        policy_denial(channel, harness, event, a, REASONS[RM_ROOT])
    home = "/Users/ana/payments" if harness == "cursor" else "/home/ana/payments"  # inside the workspace
    payload, event = pre_tool(harness, {"command": "rm -rf ./build"})
    if harness == "windsurf":
        payload["tool_info"]["cwd"] = home
    else:
        payload["cwd"] = home
    allowed(channel, harness, await call(send, channel, harness, payload, event))


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize(
    ("harness", "tool_input", "session_cwd"),
    [
        ("claude-code", {"command": "rm -rf *", "cwd": "/tmp"}, "/"),
        ("gemini", {"command": "rm -rf *", "cwd": "/tmp"}, "/"),
        ("codex", {"command": "rm -rf *", "cwd": "/tmp", "workdir": "/"}, "/home/ana/payments"),
    ],
    ids=["claude-code", "gemini", "codex-workdir"],
)
async def test_an_ignored_cwd_field_in_the_input_does_not_move_the_call(
    send: Send, harness: str, tool_input: dict[str, Any], session_cwd: str
) -> None:
    """docs/policies/index.md ("Policy facts") (`facts.cwd`: the effective cwd). Claude Code's Bash and Gemini's
    run_shell_command take no `cwd` parameter (they run in the payload's `cwd`), Codex runs in
    `workdir`: an extra `cwd` field written by the model must not decide where the call is judged.
    Which directory runs is unknown, so the bundled `ambiguous-working-directory` rule asks where
    the harness can ask and denies where it cannot; the call never passes."""
    payload, event = pre_tool(harness, tool_input)
    payload["cwd"] = session_cwd
    a = await call(send, "adapter", harness, payload, None)
    if not asked(harness, a):
        policy_denial("adapter", harness, event, a, "names a working directory other than the session's")


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize("field", ["dir_path", "directory"])
async def test_gemini_shell_dir_path_is_the_cwd(send: Send, field: str) -> None:
    """native-hooks §4.3 / Gemini CLI's `run_shell_command` runs in `dir_path` when given: a
    relative delete there must be judged in that directory."""
    payload, event = pre_tool("gemini", {"command": "rm -rf *", field: "/"})
    policy_denial("adapter", "gemini", event, await call(send, "adapter", "gemini", payload, None), REASONS[RM_ROOT])


# ------------------------------------------------------------------------- file tools per harness
FILE_READS = [
    # (harness, payload builder key, payload patch, expectation)
    ("claude-code", "PreToolUse/Read", {"tool_input": {"file_path": "/home/ana/.ssh/id_rsa"}}, "deny"),
    ("claude-code", "PreToolUse/Read", {"tool_name": "read", "tool_input": {"file_path": "~/.ssh/id_rsa"}}, "deny"),
    (
        "gemini",
        "BeforeTool/shell",
        {"tool_name": "read_file", "tool_input": {"absolute_path": "/home/ana/.ssh/id_rsa"}},
        "deny",
    ),
    (
        "gemini",
        "BeforeTool/shell",
        {"tool_name": "read_many_files", "tool_input": {"paths": ["/home/ana/.ssh/id_rsa"]}},
        "deny",
    ),
    ("copilot", "preToolUse/edit", {"toolName": "view", "toolArgs": '{"path":"/home/ana/.ssh/id_rsa"}'}, "deny"),
    ("cursor", "preToolUse/Read", {"tool_input": {"path": "/Users/ana/.ssh/id_rsa"}}, "deny"),
    ("cursor", "beforeReadFile", {"file_path": "/Users/ana/.ssh/id_rsa"}, "deny"),
    ("cursor", "beforeReadFile", {"file_path": "/Users/ana/payments/.env"}, "deny"),
]


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize(
    ("harness", "key", "patch", "expectation"),
    FILE_READS,
    ids=[f"{h}-{k}-{i}" for i, (h, k, _, _) in enumerate(FILE_READS)],
)
async def test_secret_reads_through_file_tools_are_denied(
    send: Send, harness: str, key: str, patch: dict[str, Any], expectation: str
) -> None:
    """README shipped rules `private-key-read`/`dotenv-read`: read tools of every harness (Read,
    `read_file`, `read_many_files`, `view`, Cursor's beforeReadFile) on keys and `.env`."""
    payload = {**copy.deepcopy(ALL[harness][key]), **patch}
    event = "preToolUse" if harness == "copilot" else None
    native_event = payload.get("hook_event_name") or "preToolUse"
    a = await call(send, "adapter", harness, payload, event)
    policy_denial("adapter", harness, str(native_event), a)


@pytest.mark.spec("AHP-TB-001")
@pytest.mark.parametrize(
    "path", ["/home/ana/.ssh/id_rsa", "/home/ana/.aws/credentials", "/home/ana/p/.env"], ids=["key", "aws", "env"]
)
async def test_windsurf_pre_read_code_of_a_secret_is_denied(send: Send, path: str) -> None:
    """docs/agents/windsurf.md: pre_read_code maps to `tool.before` with D enforced (exit 2). The
    same read that a `Read` tool call is denied for over AHP must be denied here."""
    payload = copy.deepcopy(ALL["windsurf"]["pre_read_code"])
    payload["tool_info"] = {"file_path": path}
    policy_denial("adapter", "windsurf", "pre_read_code", await call(send, "adapter", "windsurf", payload, None))


# ---------------------------------------------------------------------------- other pre-tool events
@pytest.mark.spec("AHP-TB-001")
async def test_permission_request_and_cursor_shell_hook_deny_the_same_calls(send: Send) -> None:
    """README tables: PermissionRequest (Claude Code, Codex), permissionRequest (Copilot) and
    Cursor's beforeShellExecution also deny; the deny rules run on `tool.permission.request`."""
    for harness, channel in (("claude-code", "adapter"), ("codex", "adapter"), ("claude-code", "http")):
        payload = {
            **copy.deepcopy(ALL[harness]["PermissionRequest/Bash"]),
            "tool_input": {"command": f"sudo {RM_ROOT}"},
        }
        doc = json.loads((await call(send, channel, harness, payload, None)).out)
        assert doc["hookSpecificOutput"]["hookEventName"] == "PermissionRequest"
        decision = doc["hookSpecificOutput"]["decision"]
        assert decision["behavior"] == "deny" and REASONS[RM_ROOT] in decision["message"], doc
        payload["tool_input"] = {"command": "ls"}
        assert (await call(send, channel, harness, payload, None)).out in ("", "{}")
    for channel in ("adapter", "http"):
        payload = copy.deepcopy(ALL["copilot"]["permissionRequest/bash"])
        payload["toolArgs"] = json.dumps({"command": ["bash", "-lc", FORCE_PUSH]})
        doc = json.loads((await call(send, channel, "copilot", payload, "permissionRequest")).out)
        assert doc["behavior"] == "deny" and REASONS[FORCE_PUSH] in doc["message"], doc
    payload = copy.deepcopy(ALL["cursor"]["beforeShellExecution"])
    for command in (f"env X=1 sh -c '{FORCE_PUSH}'", "rm -rf *"):
        payload["command"] = command
        payload["cwd"] = "/"
        policy_denial("adapter", "cursor", "beforeShellExecution", await call(send, "adapter", "cursor", payload, None))
    payload["command"], payload["cwd"] = "ls -la", "/Users/ana/payments"
    allowed("adapter", "cursor", await call(send, "adapter", "cursor", payload, None))
