"""Native payload → AHP request, per harness (compatibility adapters: keep the native tool name,
parse input into an object, synthesize stable call ids, advertise only enforceable effects)."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from gateway.native import ahp, flow
from gateway.native.model import NativePayloadError
from gateway.protocol.schemas import load
from tests.support.native_payloads import ALL, CLAUDE, COPILOT, CURSOR, GEMINI, PATCH, WINDSURF, event_of

CASES = [(h, k) for h, payloads in ALL.items() for k in payloads]
ALL_EFFECTS_PRE = {
    "effects": ["deny", "allow", "ask", "modify", "message", "flow", "inject"],
    "modify": {"input": {"replace": True, "merge": True}},
    "flow": {"operations": ["stop"]},
    "inject": {"context": {"append": True, "deliverAt": ["now"]}},
}


def translate(harness: str, key: str) -> dict[str, Any]:
    tr = flow.codec_for(harness).translate(copy.deepcopy(ALL[harness][key]), event_of(harness, key))
    assert tr is not None
    return tr.message


def sha(*parts: Any) -> str:
    text = json.dumps(list(parts), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@pytest.mark.spec("AHP-RPC-002")
@pytest.mark.parametrize(("harness", "key"), CASES)
def test_every_documented_payload_becomes_a_schema_valid_ahp_message(harness: str, key: str) -> None:
    msg = translate(harness, key)
    schemas = load()
    event = msg["params"]["event"]
    if msg["method"] == "hooks/intercept":
        check = schemas.request_for[event["type"]]
        assert msg["id"] == event["id"]  # request id == event id
    else:
        check = schemas.observe_notification
        assert "id" not in msg and "capabilities" not in msg["params"]
    assert check.ok(msg), check.explain(msg)
    assert event["source"] == f"urn:ahp-adapter:{harness}"
    assert event["harness"]["name"] == harness


# The mapping table (native-hooks §8): exactly these effects, nothing a harness cannot enforce.
EXPECTED_CAPS: dict[tuple[str, str], dict[str, Any] | None] = {
    ("claude-code", "PreToolUse/Bash"): ALL_EFFECTS_PRE,
    ("claude-code", "PermissionRequest/Bash"): {
        "effects": ["deny", "allow", "modify", "message", "flow"],
        "modify": {"input": {"replace": True, "merge": True}},
        "flow": {"operations": ["stop"]},
    },
    ("claude-code", "PostToolUse/Bash"): {
        "effects": ["message", "flow", "inject"],
        "flow": {"operations": ["stop"]},
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("claude-code", "UserPromptSubmit"): {
        "effects": ["deny", "message", "flow", "inject"],
        "flow": {"operations": ["stop"]},
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("claude-code", "SessionStart"): {
        "effects": ["message", "inject"],
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("claude-code", "Stop"): {
        "effects": ["message", "flow"],
        "flow": {"operations": ["stop", "continue"], "continuationCount": 0, "remainingContinuations": 1},
    },
    ("claude-code", "PreCompact"): {"effects": ["deny"]},
    ("claude-code", "SessionEnd"): None,
    ("codex", "PreToolUse/Bash"): {
        "effects": ["deny", "modify", "message", "inject"],
        "modify": {"input": {"replace": True, "merge": False}},
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("codex", "PermissionRequest/Bash"): {"effects": ["deny", "allow"]},
    ("codex", "Stop"): {
        "effects": ["message", "flow"],
        "flow": {"operations": ["continue"], "continuationCount": 1, "remainingContinuations": 0},
    },
    ("codex", "SessionStart"): {"effects": ["inject"], "inject": {"context": {"append": True, "deliverAt": ["now"]}}},
    ("gemini", "BeforeTool/shell"): {
        "effects": ["deny", "ask", "modify", "message", "flow"],
        "modify": {"input": {"replace": True, "merge": False}},
        "flow": {"operations": ["stop"]},
    },
    ("gemini", "AfterTool/shell"): {
        "effects": ["modify", "message", "flow", "inject"],
        "modify": {"output": {"replace": True, "merge": False}},
        "flow": {"operations": ["stop"]},
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("gemini", "SessionEnd"): None,
    ("copilot", "preToolUse/bash"): {
        "effects": ["deny", "ask", "modify", "message"],
        "modify": {"input": {"replace": True, "merge": False}},
    },
    ("copilot", "permissionRequest/bash"): {"effects": ["deny", "allow", "flow"], "flow": {"operations": ["stop"]}},
    ("copilot", "postToolUse/bash"): {
        "effects": ["modify", "inject"],
        "modify": {"output": {"replace": True, "merge": False}},
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("cursor", "preToolUse/Shell"): {
        "effects": ["deny", "modify"],
        "modify": {"input": {"replace": True, "merge": False}},
    },
    ("cursor", "beforeShellExecution"): {"effects": ["deny"]},
    ("cursor", "beforeMCPExecution"): {"effects": ["deny"]},
    ("cursor", "beforeReadFile"): {"effects": ["deny"]},
    ("cursor", "beforeSubmitPrompt"): {"effects": ["deny"]},
    ("cursor", "postToolUse/Shell"): {
        "effects": ["inject"],
        "inject": {"context": {"append": True, "deliverAt": ["now"]}},
    },
    ("cursor", "stop"): {
        "effects": ["flow"],
        "flow": {"operations": ["continue"], "continuationCount": 0, "remainingContinuations": 3},
    },
    ("windsurf", "pre_run_command"): {"effects": ["deny"]},
    ("windsurf", "pre_user_prompt"): {"effects": ["deny"]},
    ("windsurf", "post_run_command"): None,
}


@pytest.mark.spec("AHP-CAP-001")
@pytest.mark.parametrize(("harness", "key"), list(EXPECTED_CAPS))
def test_only_natively_enforceable_effects_are_advertised(harness: str, key: str) -> None:
    msg = translate(harness, key)
    assert msg["params"].get("capabilities") == EXPECTED_CAPS[(harness, key)]


@pytest.mark.spec("AHP-TB-001")
def test_claude_code_pre_tool_use_is_this_exact_request() -> None:
    payload = CLAUDE["PreToolUse/Bash"]
    msg = translate("claude-code", "PreToolUse/Bash")
    event = msg["params"]["event"]
    eid = "evt-" + sha("event", "claude-code", "PreToolUse", payload)
    assert event.pop("time").endswith("Z")
    assert msg == {
        "jsonrpc": "2.0",
        "id": eid,
        "method": "hooks/intercept",
        "params": {
            "protocolVersion": "draft",
            "capabilities": ALL_EFFECTS_PRE,
            "event": {
                "id": eid,
                "source": "urn:ahp-adapter:claude-code",
                "type": "tool.before",
                "harness": {"name": "claude-code", "version": "unknown"},
                "session": {"id": "5b1e0c7a-93d2-4f0e-8a61-2c4d9e7f1a03", "cwd": "/home/ana/payments"},
                "turn": {"id": "d2a4f8e1-6c3b-4b71-9e0a-71f5c2b8e946"},
                "call": {"id": "toolu_01HqV3m8YpK2cT7rWnD4xZbL"},
                "tool": {"name": "Bash", "input": payload["tool_input"], "origin": "native"},
                "path": "native",
            },
        },
    }


@pytest.mark.spec("AHP-CORE-004")
def test_copilot_pre_tool_use_parses_tool_args_and_synthesizes_the_documented_call_id() -> None:
    msg = translate("copilot", "preToolUse/bash")
    event = msg["params"]["event"]
    tool_input = {"command": "npm publish --access public", "description": "Publish the package"}
    assert event["tool"] == {"name": "bash", "input": tool_input, "origin": "native"}
    assert event["call"] == {
        "id": "syn-" + sha("call", "copilot", COPILOT["preToolUse/bash"]["sessionId"], "", "bash", tool_input),
        "synthesized": True,
    }
    assert event["time"] == "2025-11-30T09:44:18.512Z"  # the payload's epoch milliseconds
    assert event["session"] == {"id": "0f6e3d2c-5b4a-4987-8c1d-2e3f4a5b6c7d", "cwd": "/home/ana/payments"}


@pytest.mark.spec("AHP-CORE-004")
@pytest.mark.parametrize(
    ("harness", "key"),
    [
        ("gemini", "BeforeTool/shell"),
        ("copilot", "preToolUse/bash"),
        ("cursor", "beforeShellExecution"),
        ("windsurf", "pre_mcp_tool_use"),
        ("claude-code", "PermissionRequest/Bash"),
    ],
)
def test_synthesized_ids_are_identical_across_retries(harness: str, key: str) -> None:
    first, again = translate(harness, key), translate(harness, key)
    assert first["params"]["event"]["call"]["synthesized"] is True
    assert first["params"]["event"]["call"] == again["params"]["event"]["call"]
    assert first["id"] == again["id"] == again["params"]["event"]["id"]


def test_synthesized_call_ids_correlate_before_and_after_and_separate_different_calls() -> None:
    codec = flow.codec_for("gemini")
    before = {**GEMINI["BeforeTool/shell"], "timestamp": "2026-11-30T09:44:18.512Z"}
    after = {**GEMINI["AfterTool/shell"], "tool_input": before["tool_input"], "timestamp": "2026-11-30T09:44:19.000Z"}
    b, a = codec.translate(before, None), codec.translate(after, None)
    assert b is not None and a is not None
    assert b.message["params"]["event"]["call"] == a.message["params"]["event"]["call"]
    assert b.message["id"] != a.message["id"]  # distinct events, one call
    other = codec.translate({**before, "tool_input": {"command": "git push --force origin main "}}, None)
    assert other is not None and other.message["params"]["event"]["call"] != b.message["params"]["event"]["call"]
    # Key order in the native input does not change the identity (canonical JSON).
    reordered = codec.translate({**before, "tool_input": dict(reversed(list(before["tool_input"].items())))}, None)
    assert (
        reordered is not None and reordered.message["params"]["event"]["call"] == b.message["params"]["event"]["call"]
    )


def test_tool_inputs_become_objects_and_native_names_are_kept() -> None:
    mcp = translate("cursor", "beforeMCPExecution")["params"]["event"]
    assert mcp["tool"]["input"] == {"sql": "DELETE FROM invoices"}  # a JSON string in the payload
    assert mcp["tool"]["origin"] == "mcp" and mcp["path"] == "mcp"
    assert mcp["tool"]["mcp"]["connection"] == {"transport": "http", "url": "https://mcp.example.com/postgres"}
    shell = translate("cursor", "beforeShellExecution")["params"]["event"]
    assert shell["tool"]["name"] == "Shell"
    assert shell["tool"]["input"] == {
        "command": "aws s3 rm s3://prod-backups --recursive",
        "cwd": "/Users/ana/payments",
        "sandbox": False,
    }
    assert shell["turn"] == {"id": CURSOR["beforeShellExecution"]["generation_id"]}
    assert shell["harness"] == {"name": "cursor", "version": "3.9.16"}
    read = translate("cursor", "beforeReadFile")["params"]["event"]
    assert read["tool"]["input"] == {"file_path": "/Users/ana/payments/.env"}  # file content never forwarded
    assert "KEY=secret" not in json.dumps(read)
    patch = translate("codex", "PreToolUse/apply_patch")["params"]["event"]
    assert patch["tool"] == {"name": "apply_patch", "input": {"command": PATCH}, "origin": "native"}
    argv = translate("codex", "PreToolUse/argv")["params"]["event"]
    assert argv["tool"]["input"] == {"command": ["git", "push", "--force", "origin", "main"]}
    windsurf = translate("windsurf", "pre_mcp_tool_use")["params"]["event"]
    assert windsurf["tool"]["name"] == "query" and windsurf["tool"]["input"] == {
        "sql": "DELETE FROM invoices WHERE paid = false"
    }
    assert windsurf["tool"]["mcp"]["server"] == {"id": "postgres"}
    run = translate("windsurf", "pre_run_command")["params"]["event"]
    assert run["tool"] == {"name": "run_command", "input": WINDSURF["pre_run_command"]["tool_info"], "origin": "native"}
    claude_mcp = translate("claude-code", "PreToolUse/mcp")["params"]["event"]
    assert claude_mcp["tool"]["name"] == "mcp__github__create_issue"
    assert (
        claude_mcp["tool"]["mcp"]["server"] == {"id": "github"}
        and claude_mcp["tool"]["mcp"]["toolName"] == "create_issue"
    )
    gemini_mcp = translate("gemini", "BeforeTool/mcp")["params"]["event"]
    assert gemini_mcp["tool"]["mcp"]["connection"] == {"transport": "http", "url": "https://api.githubcopilot.com/mcp/"}
    pascal = translate("copilot", "PreToolUse/pascal")["params"]["event"]
    assert pascal["tool"]["input"] == {"command": "git push -f origin main"}


def test_other_events_carry_their_content() -> None:
    prompt = translate("claude-code", "UserPromptSubmit")["params"]["event"]
    assert prompt["type"] == "turn.start" and prompt["trigger"] == "user"
    assert prompt["items"][0]["role"] == "user"
    assert prompt["items"][0]["parts"][0]["text"] == "Deploy the payments service to production"
    after = translate("claude-code", "PostToolUse/Bash")["params"]["event"]
    assert after["outcome"] == "ok" and after["call"] == {"id": "toolu_01Ls"} and after["durationMs"] == 12
    assert json.loads(after["items"][0]["parts"][0]["text"])["stdout"] == "total 0"
    failed = translate("claude-code", "PostToolUseFailure/Bash")["params"]["event"]
    assert failed["outcome"] == "error" and failed["error"]["message"] == "Command failed with exit code 1"
    stop = translate("codex", "Stop")["params"]["event"]
    assert stop["type"] == "turn.finish.before" and stop["continuationCount"] == 1
    assert stop["turn"] == {"id": "7"}
    start = translate("copilot", "sessionStart")["params"]["event"]
    assert start["trigger"] == "startup" and start["permissionMode"] == "default"
    assert {e["event"] for e in start["manifest"]["events"]} >= {"tool.before", "session.start"}
    batch = translate("claude-code", "PostToolBatch")["params"]["event"]
    assert [c["call"] for c in batch["calls"]] == [{"id": "toolu_A"}, {"id": "toolu_B"}]
    assert batch["calls"][1]["tool"]["origin"] == "mcp" and batch["batch"]["synthesized"] is True
    note = translate("claude-code", "Notification")["params"]["event"]
    assert note["type"] == "user.attention" and note["attention"]["kind"] == "permission_prompt"
    assert note["attention"]["message"][0]["text"] == "Claude needs your permission to use Bash"
    edit = translate("cursor", "afterFileEdit")["params"]["event"]
    assert edit["changes"] == [{"path": "/Users/ana/payments/app.py", "operation": "update", "agentCaused": True}]
    shell_after = translate("cursor", "afterShellExecution")["params"]["event"]
    assert shell_after["tool"]["name"] == "Shell" and shell_after["items"][0]["parts"][0]["text"] == "total 0\n"
    before = flow.codec_for("cursor").translate({**CURSOR["beforeShellExecution"], "command": "ls -la"}, None)
    assert before is not None and before.message["params"]["event"]["call"] == shell_after["call"]  # one call
    assert shell_after["call"]["synthesized"] is True
    end = translate("claude-code", "SessionEnd")["params"]["event"]
    assert end["type"] == "session.end" and end["outcome"] == "completed" and end["reason"] == "logout"


@pytest.mark.parametrize(
    ("harness", "raw", "why"),
    [
        ("claude-code", b"not json", "not JSON"),
        ("claude-code", b"[1, 2]", "not a JSON object"),
        ("claude-code", b'{"session_id": "s"}', "no hook event name"),
        ("codex", b'{"hook_event_name": "PreToolUse", "tool_input": {}}', "no tool name"),
        ("windsurf", b'{"tool_info": {}}', "agent_action_name"),
        ("cursor", b"\xff\xfe", "not JSON"),
    ],
)
def test_unusable_payloads_are_named_precisely(harness: str, raw: bytes, why: str) -> None:
    codec = flow.codec_for(harness)
    with pytest.raises(NativePayloadError, match=why):
        codec.translate(flow.parse_payload(raw), None)


def test_oversized_payload_is_refused_before_parsing() -> None:
    with pytest.raises(NativePayloadError, match="exceeds"):
        flow.parse_payload(b" " * (flow.MAX_PAYLOAD_BYTES + 1))


def test_unmapped_native_events_are_not_sent() -> None:
    assert flow.codec_for("claude-code").translate({"hook_event_name": "CwdChanged", "session_id": "s"}, None) is None
    assert flow.codec_for("cursor").translate({"hook_event_name": "afterAgentThought"}, None) is None


def test_event_hint_overrides_payload_and_json_strings_are_never_forwarded_as_strings() -> None:
    tr = flow.codec_for("copilot").translate({"sessionId": "s", "toolName": "bash", "toolArgs": "[1,2]"}, "preToolUse")
    assert tr is not None and tr.message["params"]["event"]["tool"]["input"] == {"value": [1, 2]}
    tr = flow.codec_for("copilot").translate({"sessionId": "s", "toolName": "bash", "toolArgs": "not json"}, None)
    assert tr is not None and tr.message["params"]["event"]["tool"]["input"] == {"value": "not json"}
    assert ahp.parse_input(None) == {}


@pytest.mark.spec("AHP-CORE-004")
def test_pre_and_post_events_of_one_call_share_the_synthesized_call_id() -> None:
    copilot = flow.codec_for("copilot")
    pre = copilot.translate({**COPILOT["preToolUse/bash"]}, "preToolUse")
    post = copilot.translate(
        {**COPILOT["postToolUse/bash"], "toolArgs": COPILOT["preToolUse/bash"]["toolArgs"]}, "postToolUse"
    )
    assert pre is not None and post is not None
    assert pre.message["params"]["event"]["call"] == post.message["params"]["event"]["call"]
    windsurf = flow.codec_for("windsurf")
    info = {"command_line": "make deploy", "cwd": "/home/ana/p"}
    before = windsurf.translate({**WINDSURF["pre_run_command"], "tool_info": info}, None)
    after = windsurf.translate(
        {**WINDSURF["post_run_command"], "execution_id": "exec-other", "tool_info": {**info, "output": "ok"}}, None
    )
    assert before is not None and after is not None
    assert before.message["params"]["event"]["call"] == after.message["params"]["event"]["call"]
    assert after.message["method"] == "hooks/observe"


def test_deeply_nested_payloads_are_refused_not_crashed() -> None:
    deep = (
        b'{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":'
        + b'{"a":' * 50_000
        + b"1"
        + b"}" * 50_000
        + b"}"
    )
    prepared = flow.prepare(flow.codec_for("claude-code"), deep, None, "deny")
    assert prepared.answer is not None and prepared.answer.exit_code == 2
    assert "nested too deeply" in prepared.answer.stderr
    medium = (
        b'{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":' + b'{"a":' * 900 + b"1" + b"}" * 900 + b"}"
    )
    prepared = flow.prepare(flow.codec_for("claude-code"), medium, None, "deny")
    assert (prepared.answer is None and prepared.body is not None) or "nested too deeply" in prepared.answer.stderr
