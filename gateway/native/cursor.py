"""Cursor codec (native-hooks §3): flat snake_case JSON on exit 0 (a ``hookSpecificOutput``
wrapper is ignored by Cursor). Register one tool layer per policy (``preToolUse`` or the granular
``before*`` hooks), or every Shell call is intercepted twice.

- ``preToolUse`` can deny and replace the input; ``ask`` is accepted but not enforced there, so
  it is not advertised. The deny satisfies both documented generations of field names.
- ``beforeShellExecution``/``beforeMCPExecution``/``beforeReadFile`` can only deny (``ask`` was
  observed to behave as deny): only ``deny`` is advertised; the reason goes to ``user_message``
  and ``agent_message`` (the model was observed to receive ``user_message``).
- Under ``failClosed: true`` an empty answer blocks, so every before-hook prints an explicit
  ``{"permission":"allow"}`` (prompts: ``{"continue":true}``) on the no-effect path; this grants
  nothing beyond Cursor's own permission checks, which still apply.
- Continuations at ``stop``: ``loop_count`` is the count; the allowance is ``LOOP_LIMIT`` (the
  ``loop_limit`` that ``hook config`` writes) minus it.
"""

from __future__ import annotations

from typing import Any

from gateway.native import ahp, events
from gateway.native.ahp import Json, Settled
from gateway.native.model import NativeAnswer, NativePayloadError, Translation, dumps, event_name, text

LOOP_LIMIT = 3
_caps = ahp.capabilities
CAPS: dict[str, Json | None] = {
    "preToolUse": _caps(("deny",), modify={"input": (True, False)}),
    "beforeShellExecution": _caps(("deny",)),
    "beforeMCPExecution": _caps(("deny",)),
    "beforeReadFile": _caps(("deny",)),
    "beforeSubmitPrompt": _caps(("deny",)),
    "postToolUse": _caps((), inject=("now",)),
    "stop": _caps((), flow=("continue",)),
    "subagentStop": _caps((), flow=("continue",)),
    "sessionStart": _caps((), inject=("now",)),
    "postToolUseFailure": None,
    "afterShellExecution": None,
    "afterMCPExecution": None,
    "afterFileEdit": None,
    "sessionEnd": None,
}
_AHP_TYPE = {
    "preToolUse": "tool.before",
    "beforeShellExecution": "tool.before",
    "beforeMCPExecution": "tool.before",
    "beforeReadFile": "tool.before",
    "beforeSubmitPrompt": "turn.start",
    "postToolUse": "tool.after",
    "postToolUseFailure": "tool.after",
    "afterShellExecution": "tool.after",
    "afterMCPExecution": "tool.after",
    "afterFileEdit": "file.changed",
    "stop": "turn.finish.before",
    "subagentStop": "turn.finish.before",
    "sessionStart": "session.start",
    "sessionEnd": "session.end",
}
_PERMISSION_EVENTS = ("preToolUse", "beforeShellExecution", "beforeMCPExecution", "beforeReadFile")


def _tool(name: str, payload: Json) -> tuple[str, Json, Json | None, list[Json] | None]:
    """(tool name, input object, mcp block, gaps) for the tool events."""
    if name in ("beforeShellExecution", "afterShellExecution"):
        tool_input: Json = {"command": payload.get("command")}
        for key in ("cwd", "sandbox", "timeout") if name == "beforeShellExecution" else ("cwd",):
            if key in payload:
                tool_input[key] = payload[key]
        return "Shell", tool_input, None, None
    if name == "beforeReadFile":
        gaps = [{"path": "tool.input.content", "reason": "the file content is not forwarded by the adapter"}]
        return "Read", {"file_path": payload.get("file_path")}, None, gaps
    tool_name = text(payload.get("tool_name")) or ""
    tool_input = ahp.parse_input(payload.get("tool_input"))
    if name in ("beforeMCPExecution", "afterMCPExecution"):
        server = text(payload.get("server_name")) or text(payload.get("url")) or text(payload.get("command")) or ""
        return tool_name, tool_input, ahp.mcp_block(server, tool_name, payload.get("url"), payload.get("command")), None
    if tool_name.startswith("MCP:"):
        return tool_name, tool_input, ahp.mcp_block("", tool_name[4:]), None
    return tool_name, tool_input, None, None


class CursorCodec:
    harness = "cursor"

    def translate(self, payload: Json, event: str | None) -> Translation | None:
        name = event_name(payload, event)
        if name not in CAPS:
            return None
        caps = CAPS[name]
        session = ahp.session_block(
            payload.get("conversation_id") or payload.get("session_id"),
            payload.get("cwd"),
            payload.get("model"),
            payload.get("workspace_roots"),
        )
        origin = events.Origin(
            "cursor",
            text(payload.get("cursor_version")) or "unknown",
            name,
            payload,
            session,
            text(payload.get("generation_id")),
        )
        ahp_type = _AHP_TYPE[name]
        tool_input: Json | None = None
        if ahp_type.startswith("tool."):
            tool_name, tool_input, mcp, gaps = _tool(name, payload)
            if not tool_name:
                raise NativePayloadError(f"{name} payload has no tool name")
            # before/afterShellExecution carry different extra fields: one call, one identity.
            identity = (
                {"command": tool_input.get("command")}
                if tool_name == "Shell" and "tool_use_id" not in payload
                else None
            )
            if ahp_type == "tool.before":
                event_obj = events.tool_before(
                    origin, tool_name, tool_input, payload.get("tool_use_id"), mcp, gaps, identity=identity
                )
            else:
                error = None
                if name == "postToolUseFailure":
                    error = text(payload.get("error_message")) or "tool failed"
                output: Any = payload.get("tool_output", payload.get("output", payload.get("result_json")))
                if isinstance(output, str):
                    output = ahp.parse_input(output) if output.lstrip().startswith(("{", "[")) else output
                event_obj = events.tool_after(
                    origin,
                    tool_name,
                    tool_input,
                    payload.get("tool_use_id"),
                    output=None if error else output,
                    error=error,
                    mcp=mcp,
                    duration_ms=payload.get("duration"),
                    identity=identity,
                )
        elif ahp_type == "file.changed":
            path = text(payload.get("file_path"))
            if not path:
                raise NativePayloadError(f"{name} payload has no file_path")
            edits = payload.get("edits")
            event_obj = events.file_changed(origin, path, "update" if isinstance(edits, list) and edits else "create")
        elif ahp_type == "turn.start":
            event_obj = events.turn_start(origin, payload.get("prompt"))
        elif ahp_type == "turn.finish.before":
            count = payload.get("loop_count")
            count = count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
            caps = ahp.capabilities((), flow=("continue",), continuations=(count, max(0, LOOP_LIMIT - count)))
            event_obj = events.turn_finish(origin, None, count)
        elif ahp_type == "session.start":
            event_obj = events.session_start(origin, "startup", payload.get("composer_mode"), self.manifest())
        else:
            event_obj = events.session_end(origin, payload.get("reason"))
        message = ahp.observe_notification(event_obj) if caps is None else ahp.intercept_request(event_obj, caps)
        return Translation(name, message, tool_input)

    def manifest(self) -> Json:
        return events.manifest([(_AHP_TYPE[name], caps) for name, caps in CAPS.items()])

    def noop(self, tr: Translation | None) -> NativeAnswer:
        if tr is not None and tr.native_event in _PERMISSION_EVENTS:
            return NativeAnswer(0, dumps({"permission": "allow"}), "")
        if tr is not None and tr.native_event == "beforeSubmitPrompt":
            return NativeAnswer(0, dumps({"continue": True}), "")
        return NativeAnswer(0, "", "")

    def answer(self, tr: Translation, s: Settled) -> NativeAnswer:
        if s.empty:
            return self.noop(tr)
        name = tr.native_event
        out: Json = {}
        if name in _PERMISSION_EVENTS:
            if s.permission == "deny":
                reason = s.reason
                out = {"permission": "deny", "user_message": reason, "agent_message": reason}
                if name == "preToolUse":
                    out = {"permission": "deny", "decision": "deny", "reason": reason, **out}
            elif "input" in s.modified:
                out = {"permission": "allow", "updated_input": s.modified["input"]}
            else:
                return self.noop(tr)
        elif name == "beforeSubmitPrompt":
            if s.permission != "deny":
                return self.noop(tr)
            out = {"continue": False, "user_message": s.reason}
        elif name in ("stop", "subagentStop"):
            if s.resume is not None:
                out = {"followup_message": "\n".join(s.resume) or "Continue."}
        elif s.context:  # postToolUse, sessionStart
            out = {"additional_context": "\n\n".join(s.context)}
        return NativeAnswer(0, dumps(out) if out else "", "")
